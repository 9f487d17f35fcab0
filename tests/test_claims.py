"""Workers: claims, fences and fenced writes (docs/guarantees.md §1, §3)."""

import time
from datetime import datetime, timedelta, timezone

import fenceq
from helpers import claim, raises_code, wait_until_past


def test_claim_order_is_priority_then_run_at_then_submission(client, queue):
    past = datetime.now(timezone.utc) - timedelta(minutes=5)
    low = client.submit(queue, "low", priority=0)
    early = client.submit(queue, "early", priority=0, run_at=past)
    high = client.submit(queue, "high", priority=10)
    second_low = client.submit(queue, "low2", priority=0)
    order = [claim(client, queue).job_id for _ in range(4)]
    assert order == [high, early, low, second_low]
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None


def test_claim_across_queues_merges_by_priority(client):
    for name in ("a", "b", "c"):
        client.create_queue(name)
    ids = {client.submit("a", "t", priority=1): 1, client.submit("b", "t", priority=5): 5,
           client.submit("c", "t", priority=3): 3}
    got = [client.claim_next(["a", "b", "c"], "w", fenceq.new_claim_token()).priority for _ in ids]
    assert got == [5, 3, 1]


def test_claim_returns_fence_and_columns(client, queue):
    job_id = client.submit(queue, "t", {"k": "v"}, submission_id="s", priority=2, max_attempts=3)
    token = fenceq.new_claim_token()
    c = client.claim_next([queue], "owner-A", token, lease=timedelta(seconds=5))
    assert (c.job_id, c.queue, c.task, c.payload, c.priority) == (job_id, queue, "t", {"k": "v"}, 2)
    assert (c.attempt, c.max_attempts, c.owner_id, c.generation) == (1, 3, "owner-A", 1)
    assert c.claim_token == token and c.submission_id == "s" and c.checkpoints == {}
    assert c.cancel_requested is False and c.budget_expires_at is None
    assert timedelta(seconds=4) < c.lease_expires_at - datetime.now(timezone.utc) <= timedelta(seconds=5)
    fence = c.fence
    assert fence == fenceq.Fence(job_id, "owner-A", 1, token, queue)
    assert token not in repr(fence) and token not in repr(c)


def test_reused_nonce_raises_qf301_whatever_the_owner(client, queue):
    client.submit(queue, "t")
    client.submit(queue, "t")
    token = fenceq.new_claim_token()
    client.claim_next([queue], "w1", token)
    with raises_code("QF301"):
        client.claim_next([queue], "w1", token)
    with raises_code("QF301"):
        client.claim_next([queue], "w2", token)
    with raises_code("QF301"):
        client.claim_batch([queue], "w2", [fenceq.new_claim_token(), token])
    assert [s.pending for s in client.stats()] == [1]


def test_reused_nonce_raises_even_with_nothing_to_claim(client, queue):
    client.submit(queue, "t")
    token = fenceq.new_claim_token()
    claim_ = client.claim_next([queue], "w", token)
    assert client.complete(claim_.fence)
    with raises_code("QF301"):
        client.claim_next([queue], "w", token)


def test_claim_batch_repeated_token_claims_nothing(client, queue):
    client.submit(queue, "t")
    token = fenceq.new_claim_token()
    with raises_code("QF301"):
        client.claim_batch([queue], "w", [token, token])
    assert [s.pending for s in client.stats()] == [1]


def test_claim_batch_claims_up_to_one_job_per_token(client, queue):
    ids = client.submit_batch(queue, [{"task": str(i)} for i in range(3)])
    tokens = [fenceq.new_claim_token() for _ in range(5)]
    claims = client.claim_batch([queue], "w", tokens)
    assert [c.job_id for c in claims] == ids
    assert [c.claim_token for c in claims] == tokens[:3]


def test_recover_claim_after_lost_acknowledgement(client, queue):
    job_id = client.submit(queue, "t")
    token = fenceq.new_claim_token()
    original = client.claim_next([queue], "w", token)  # pretend this answer was lost
    recovered = client.recover_claim("w", token)
    assert recovered == original and recovered.job_id == job_id
    assert client.recover_claim("other-owner", token) is None
    assert client.recover_claim("w", fenceq.new_claim_token()) is None
    # Recovery neither claims again nor renews.
    assert client.get_job(job_id).generation == 1
    assert client.get_job(job_id).lease_expires_at == original.lease_expires_at
    assert client.complete(recovered.fence)
    assert client.recover_claim("w", token) is None


def test_generation_advances_on_every_claim_and_old_fences_die(client, queue):
    client.submit(queue, "t")
    first = claim(client, queue)
    assert client.release(first.fence)
    second = claim(client, queue, owner="worker-1")
    assert second.generation == first.generation + 1
    for call in (lambda f: client.heartbeat(f), lambda f: client.complete(f),
                 lambda f: client.fail(f, "x"), lambda f: client.release(f),
                 lambda f: client.set_pid(f, 42), lambda f: client.acknowledge_cancel(f)):
        assert call(first.fence) is False
    assert client.claim_state(first.fence) is None
    assert client.checkpoint(first.fence, "s", 1) is None
    assert client.complete(second.fence) is True


def test_each_fence_part_must_match(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    f = c.fence
    for wrong in (fenceq.Fence(f.job_id, "intruder", f.generation, f.claim_token),
                  fenceq.Fence(f.job_id, f.owner_id, f.generation + 1, f.claim_token),
                  fenceq.Fence(f.job_id, f.owner_id, f.generation, "forged"),
                  fenceq.Fence(f.job_id, f.owner_id.upper(), f.generation, f.claim_token),
                  fenceq.Fence("missing", f.owner_id, f.generation, f.claim_token)):
        assert client.heartbeat(wrong) is False
        assert client.complete(wrong) is False
    assert client.complete(f) is True


def test_every_fenced_write_refuses_each_wrong_fence_part(client, queue):
    """The token alone would identify the claim: the generation and the owner
    are compared too, by every fenced write, and a refused one changes nothing."""
    client.submit(queue, "t")
    c = claim(client, queue)
    f = c.fence
    writes = {
        "heartbeat": lambda w: client.heartbeat(w), "complete": lambda w: client.complete(w),
        "fail": lambda w: client.fail(w, "x"), "release": lambda w: client.release(w),
        "set_pid": lambda w: client.set_pid(w, 42), "acknowledge_cancel": lambda w: client.acknowledge_cancel(w),
        "extend": lambda w: client.extend(w, timedelta(hours=1)), "progress": lambda w: client.progress(w, {"p": 1}),
        "heartbeat_batch": lambda w: client.heartbeat_batch([w])[0],
        "complete_batch": lambda w: client.complete_batch([w])[0],
    }
    for wrong in (fenceq.Fence(f.job_id, "intruder", f.generation, f.claim_token),
                  fenceq.Fence(f.job_id, f.owner_id, f.generation + 1, f.claim_token),
                  fenceq.Fence(f.job_id, f.owner_id, f.generation, "forged")):
        for name, write in writes.items():
            assert write(wrong) is False, (name, wrong)
        assert client.checkpoint(wrong, "s", 1) is None
        assert client.claim_state(wrong) is None
    job = client.get_job(f.job_id)
    assert (job.status, job.generation, job.attempts, job.lease_expires_at) == (
        "claimed", f.generation, 1, c.lease_expires_at)
    assert client.checkpoints(f.job_id) == []
    assert client.complete(f) is True


def test_heartbeat_renews_and_expired_lease_refuses_writes(client, queue):
    client.alter_queue(queue, backoff_base=timedelta(0))
    client.submit(queue, "t")
    c = claim(client, queue, lease=timedelta(seconds=1))
    time.sleep(0.01)  # past the claim's clock reading, even on SQLite's millisecond clock
    assert client.heartbeat(c.fence, lease=timedelta(seconds=1)) is True
    renewed = client.get_job(c.job_id).lease_expires_at
    assert renewed > c.lease_expires_at
    wait_until_past(renewed)
    assert client.heartbeat(c.fence) is False
    assert client.complete(c.fence) is False
    assert client.recover_claim(c.owner_id, c.claim_token) is None
    # Once reaped, the job is taken over by a new claim at a higher generation.
    assert client.reap() == fenceq.ReapResult(requeued=1, failed=0, cancelled=0, expired=0)
    takeover = claim(client, queue, owner="worker-2")
    assert takeover.generation == 2 and takeover.attempt == 2


def test_budget_clamps_the_lease(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue, lease=timedelta(seconds=30), budget=timedelta(seconds=1))
    assert c.lease_expires_at == c.budget_expires_at
    assert client.heartbeat(c.fence) is True  # live, though clamped
    assert client.get_job(c.job_id).lease_expires_at == c.budget_expires_at
    wait_until_past(c.budget_expires_at)
    assert client.heartbeat(c.fence) is False


def test_fail_backs_off_exponentially(client):
    client.create_queue("q", max_attempts=5, backoff_base=timedelta(seconds=10), backoff_factor=3)
    job_id = client.submit("q", "t")
    c = claim(client, "q")
    before = datetime.now(timezone.utc)
    assert client.fail(c.fence, "first") is True
    job = client.get_job(job_id)
    assert job.status == "pending" and job.last_error == "first" and job.owner_id is None
    assert timedelta(seconds=9) < job.run_at - before < timedelta(seconds=11)  # base * 3^0
    assert client.fail(c.fence, "again") is False
    assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None  # not due yet


def test_fail_retry_at_and_backoff_cap(client):
    client.create_queue("q", max_attempts=50, backoff_base=timedelta(seconds=1), backoff_factor=10,
                        backoff_max=timedelta(seconds=60))
    job_id = client.submit("q", "t")
    for attempt in range(1, 5):
        c = claim(client, "q")
        assert c.attempt == attempt
        retry_at = datetime.now(timezone.utc) - timedelta(seconds=1) if attempt < 4 else None
        before = datetime.now(timezone.utc)
        assert client.fail(c.fence, f"e{attempt}", retry_at=retry_at)
    # attempt 4 without retry_at: min(1 s * 10^3, 60 s) = 60 s
    delay = client.get_job(job_id).run_at - before
    assert timedelta(seconds=59) < delay <= timedelta(seconds=61)


def test_fail_without_attempts_left_writes_a_dead_letter(client):
    client.create_queue("q", max_attempts=2, backoff_base=timedelta(0))
    job_id = client.submit("q", "t")
    assert client.fail(claim(client, "q").fence, "first")
    c2 = claim(client, "q")
    assert c2.attempt == 2
    assert client.fail(c2.fence, "last") is True
    job = client.get_job(job_id)
    assert job.status == "failed" and job.dlq_id is not None and job.last_error == "last"
    letters = client.dead_letters()
    assert [(d.dlq_id, d.job_id, d.error, d.attempts) for d in letters] == [(job.dlq_id, job_id, "last", 2)]


def test_fail_without_retry_fails_at_once(client):
    client.create_queue("q", max_attempts=5, dead_letter=False)
    job_id = client.submit("q", "t")
    assert client.fail(claim(client, "q").fence, "fatal", retry=False)
    job = client.get_job(job_id)
    assert job.status == "failed" and job.dlq_id is None
    assert client.dead_letters() == []


def test_replay_dead_letter_gives_a_fresh_attempt_budget(client):
    client.create_queue("q", max_attempts=1)
    job_id = client.submit("q", "t", submission_id="s")
    first = claim(client, "q")
    client.fail(first.fence, "boom")
    dlq_id = client.get_job(job_id).dlq_id
    assert client.replay_dead_letter(dlq_id) == job_id
    assert client.replay_dead_letter(dlq_id) is None
    assert client.discard_dead_letter(dlq_id) is False
    job = client.get_job(job_id)
    assert (job.status, job.attempts, job.submission_id) == ("pending", 0, "s")
    again = claim(client, "q")
    assert again.generation == first.generation + 1 and again.attempt == 1
    assert [d.replayed_at is not None for d in client.dead_letters(include_handled=True)] == [True]
    assert client.dead_letters() == []
    assert client.replay_dead_letter("0" * 32) is None


def test_discard_dead_letter_is_true_once(client):
    client.create_queue("q", max_attempts=1)
    job_id = client.submit("q", "t")
    client.fail(claim(client, "q").fence, "boom")
    dlq_id = client.get_job(job_id).dlq_id
    assert client.discard_dead_letter(dlq_id) is True
    assert client.discard_dead_letter(dlq_id) is False
    assert client.replay_dead_letter(dlq_id) is None
    assert client.get_job(job_id).status == "failed"


def test_release_does_not_spend_an_attempt(client):
    client.create_queue("q", max_attempts=1)
    job_id = client.submit("q", "t")
    for _ in range(3):
        c = claim(client, "q")
        assert c.attempt == 1
        assert client.release(c.fence) is True
        assert client.release(c.fence) is False
    job = client.get_job(job_id)
    assert (job.status, job.attempts, job.generation, job.owner_id) == ("pending", 0, 3, None)


def test_release_with_run_at_snoozes(client, queue):
    job_id = client.submit(queue, "t")
    c = claim(client, queue)
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert client.release(c.fence, run_at=later)
    assert client.get_job(job_id).run_at == later
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None


def test_checkpoint_records_once_and_survives_reclaims(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue, lease=timedelta(seconds=5))
    time.sleep(0.01)  # past the claim's clock reading, even on SQLite's millisecond clock
    assert client.checkpoint(c.fence, "download", {"bytes": 10}) == {"bytes": 10}
    assert client.checkpoint(c.fence, "download", {"bytes": 99}) == {"bytes": 10}
    assert client.get_job(c.job_id).lease_expires_at > c.lease_expires_at  # renewed
    client.release(c.fence)
    again = claim(client, queue)
    assert again.checkpoints == {"download": {"bytes": 10}}
    assert client.checkpoint(again.fence, "download", [1]) == {"bytes": 10}
    assert client.checkpoint(again.fence, "upload", [1, 2]) == [1, 2]
    assert client.recover_claim(again.owner_id, again.claim_token).checkpoints == {
        "download": {"bytes": 10}, "upload": [1, 2]}
    with raises_code("QF103"):
        client.checkpoint(again.fence, "nothing", None)


def test_set_pid_and_claim_state(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.claim_state(c.fence) == fenceq.ClaimState(cancel_requested=False, pid=None)
    assert client.set_pid(c.fence, 4242) is True
    assert client.claim_state(c.fence) == fenceq.ClaimState(cancel_requested=False, pid=4242)
    assert client.get_job(c.job_id).pid == 4242
    client.release(c.fence)
    assert client.get_job(c.job_id).pid is None


def test_cancel_pending_claimed_and_terminal(client, queue):
    pending = client.submit(queue, "t", active_key="k")
    assert client.cancel(pending) == "cancelled"
    assert client.cancel(pending) == "cancelled"
    client.submit(queue, "t", active_key="k")  # the key was freed
    c = claim(client, queue)
    assert client.cancel(c.job_id) == "cancel_requested"
    assert client.claim_state(c.fence).cancel_requested is True
    # Cancel-requested: complete, fail, release and set_pid refuse; heartbeat still works.
    assert client.complete(c.fence) is False
    assert client.fail(c.fence, "x") is False
    assert client.release(c.fence) is False
    assert client.set_pid(c.fence, 1) is False
    assert client.heartbeat(c.fence) is True
    assert client.acknowledge_cancel(c.fence) is True
    assert client.acknowledge_cancel(c.fence) is False
    job = client.get_job(c.job_id)
    assert (job.status, job.lease_expires_at, job.pid) == ("cancelled", None, None)
    assert client.cancel("unknown-job") is None
    done = client.submit(queue, "t")
    assert client.complete(claim(client, queue).fence)
    assert client.cancel(done) == "completed"


def test_acknowledge_cancel_needs_a_request(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.acknowledge_cancel(c.fence) is False
    assert client.get_job(c.job_id).status == "claimed"


def test_force_cancel_kills_the_fence(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.cancel(c.job_id, force=True) == "cancelled"
    assert client.heartbeat(c.fence) is False
    assert client.complete(c.fence) is False


def test_attempts_view_lists_every_claim(client, queue):
    job_id = client.submit(queue, "t")
    first = claim(client, queue, owner="a")
    client.release(first.fence)
    claim(client, queue, owner="b")
    assert [(a.generation, a.owner_id) for a in client.attempts(job_id)] == [(1, "a"), (2, "b")]
