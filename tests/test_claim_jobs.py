"""claim_jobs: one nonce per claim call (schema version 8, issue 29), on
both engines. Every job of a call is fenced by the call's nonce; the call
spends the nonce once, in the same namespace as the per-job tokens;
recover_claims finds the call's live claims; attempts, purge and the
activity sampler know the claims of calls."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest

import fenceq
from fenceq.ops import Arg, Op, Shape
from fenceq.types import Claim
from helpers import claim, raises_code, wait_until_past
from test_activity import (MINUTE, SECONDS, by_start, close_to, counts, last_closed, middle_of_bucket, seed_sample,
                           set_jobs, stored)

LONG = timedelta(minutes=10)


@pytest.fixture
def q(client) -> str:
    client.create_queue("q", lease=LONG)
    return "q"


def nonce() -> str:
    return fenceq.new_claim_token()


def pending(client, queue: str = "q") -> int:
    return {s.queue: s.pending for s in client.stats()}[queue]


# Claims and fences -------------------------------------------------------------------------

def test_every_job_of_a_call_is_fenced_by_the_nonce_and_written_on_its_own(client, q):
    ids = [client.submit(q, "t", priority=p) for p in (1, 5, 3)]
    call = nonce()
    claims = client.claim_jobs([q], "w", call, 3)
    assert [c.job_id for c in claims] == [ids[1], ids[2], ids[0]], "priority desc"
    assert {(c.claim_token, c.owner_id, c.generation, c.attempt) for c in claims} == {(call, "w", 1, 1)}
    first, second, third = claims
    assert client.complete(first.fence, result={"n": 1})
    assert client.heartbeat(second.fence)
    assert client.fail(third.fence, "boom")
    assert not client.complete(first.fence), "the job's fence died with its completion, not the others'"
    assert client.complete(second.fence)
    assert [client.get_job(j).status for j in ids] == ["pending", "completed", "completed"]
    stale = fenceq.Fence(ids[2], "w", 1, nonce(), q)
    assert not client.heartbeat(stale), "another nonce fences nothing"


def test_claims_come_in_claim_order_across_queues_and_within_max_jobs(client):
    for name in ("a", "b"):
        client.create_queue(name, lease=LONG)
    low = client.submit("a", "t", priority=0)
    high = client.submit("b", "t", priority=9)
    middle = client.submit("a", "t", priority=4)
    later = client.submit("b", "t", priority=0)
    assert [c.job_id for c in client.claim_jobs(["a", "b"], "w", nonce(), 3)] == [high, middle, low]
    assert [c.job_id for c in client.claim_jobs(["a", "b"], "w", nonce(), 10)] == [later]
    assert client.claim_jobs(["a", "b"], "w", nonce(), 10) == []


def test_max_jobs_bounds_the_call(client, q):
    for _ in range(5):
        client.submit(q, "t")
    assert len(client.claim_jobs([q], "w", nonce(), 1)) == 1
    assert len(client.claim_jobs([q], "w", nonce(), 3)) == 3
    assert pending(client) == 1


def test_a_lease_and_budget_apply_to_every_job_of_the_call(client, q):
    client.submit(q, "t")
    client.submit(q, "t")
    claims = client.claim_jobs([q], "w", nonce(), 2, lease=timedelta(minutes=5), budget=timedelta(minutes=1))
    assert len(claims) == 2
    assert all(c.budget_expires_at is not None and c.lease_expires_at == c.budget_expires_at for c in claims)


# One namespace, spent once ----------------------------------------------------------------

def test_a_nonce_spent_by_claim_jobs_is_refused_whatever_the_call(client, q):
    for _ in range(3):
        client.submit(q, "t")
    call = nonce()
    assert len(client.claim_jobs([q], "w", call, 1)) == 1
    with raises_code("QF301"):
        client.claim_jobs([q], "w", call, 1)
    with raises_code("QF301"):
        client.claim_jobs([q], "other", call, 5)
    with raises_code("QF301"):
        client.claim_next([q], "w", call)
    with raises_code("QF301"):
        client.claim_batch([q], "w", [nonce(), call])
    assert pending(client) == 2, "the refused calls claimed nothing"


def test_a_token_spent_by_claim_batch_or_claim_next_is_refused_as_a_nonce(client, q):
    for _ in range(3):
        client.submit(q, "t")
    batch_token, next_token = nonce(), nonce()
    client.claim_batch([q], "w", [batch_token])
    client.claim_next([q], "w", next_token)
    for spent in (batch_token, next_token):
        with raises_code("QF301"):
            client.claim_jobs([q], "w", spent, 1)
    assert pending(client) == 1


def test_a_spent_nonce_is_refused_even_with_nothing_to_claim(client, q):
    client.submit(q, "t")
    call = nonce()
    client.claim_jobs([q], "w", call, 5)
    with raises_code("QF301"):
        client.claim_jobs([q], "w", call, 5)


def test_a_call_that_claims_nothing_does_not_spend_its_nonce(client, q):
    call = nonce()
    assert client.claim_jobs([q], "w", call, 5) == []
    client.pause_queue(q)
    client.submit(q, "t")
    assert client.claim_jobs([q], "w", call, 5) == [], "a paused queue offers nothing"
    client.resume_queue(q)
    assert len(client.claim_jobs([q], "w", call, 5)) == 1, "the nonce was still unspent"


# recover_claims ---------------------------------------------------------------------------

def test_recover_claims_answers_the_calls_live_claims_in_order(client, q):
    for p in (3, 2, 1):
        client.submit(q, "t", priority=p)
    call = nonce()
    claims = client.claim_jobs([q], "w", call, 3)
    assert client.recover_claims("w", call) == claims
    assert client.recover_claim("w", call) == claims[0], "recover_claim: the first row"
    assert client.complete(claims[0].fence)
    assert client.release(claims[2].fence)
    assert client.recover_claims("w", call) == [claims[1]], "completed and released ones are left out"
    assert client.recover_claims("someone-else", call) == []
    assert client.recover_claims("w", nonce()) == []


def test_recover_claims_of_a_per_job_token_is_its_one_claim(client, q):
    client.submit(q, "t")
    token = nonce()
    c = client.claim_next([q], "w", token)
    assert client.recover_claims("w", token) == [c]
    assert client.complete(c.fence)
    assert client.recover_claims("w", token) == []


def test_recover_claims_leaves_out_a_lapsed_claim(client, q):
    client.submit(q, "t")
    client.submit(q, "t")
    call = nonce()
    first, second = client.claim_jobs([q], "w", call, 2)
    assert client.heartbeat(first.fence, lease=timedelta(milliseconds=1))
    wait_until_past(client.get_job(first.job_id).lease_expires_at)
    assert [c.job_id for c in client.recover_claims("w", call)] == [second.job_id]


# attempts, purge, the sampler -----------------------------------------------------------------

def test_attempts_lists_the_claims_of_calls_with_the_per_token_ones(client, q):
    client.create_queue("r", lease=LONG, backoff_base=timedelta(0))
    job = client.submit("r", "t")
    first = claim(client, "r", owner="a")
    assert client.fail(first.fence, "again")
    [second] = client.claim_jobs(["r"], "b", nonce(), 1)
    assert client.release(second.fence)
    [third] = client.claim_jobs(["r"], "c", nonce(), 1)
    attempts = client.attempts(job)
    assert [(a.generation, a.owner_id) for a in attempts] == [(1, "a"), (2, "b"), (3, "c")]
    assert all(a.job_id == job and a.claimed_at is not None for a in attempts)
    assert attempts[1].claimed_at <= attempts[2].claimed_at
    assert third.generation == 3


def test_purge_keeps_a_calls_nonce_spent_until_all_its_jobs_are_gone(client, q):
    early, late = client.submit(q, "t"), client.submit(q, "t")
    call = nonce()
    first, second = client.claim_jobs([q], "w", call, 2)
    assert client.complete(first.fence)
    assert client.purge(timedelta(0)) == 1
    assert client.get_job(early) is None
    with raises_code("QF301"):
        client.claim_jobs([q], "w", call, 1)
    assert client.complete(second.fence)
    assert client.purge(timedelta(0)) == 1
    assert client.get_job(late) is None
    client.submit(q, "t")
    assert len(client.claim_jobs([q], "w", call, 1)) == 1, "the call row went with its last job"


def test_purge_leaves_a_call_row_while_a_later_call_keeps_a_job(client, q):
    """A job claimed by two calls in turn: purging it removes both call rows
    only once every job of each call is gone."""
    client.create_queue("r", lease=LONG, backoff_base=timedelta(0))
    job, other = client.submit("r", "t"), client.submit("r", "t", priority=-1)
    one, two = nonce(), nonce()
    [first] = client.claim_jobs(["r"], "w", one, 1)
    assert first.job_id == job and client.release(first.fence)
    by_two = client.claim_jobs(["r"], "w", two, 2)
    assert [c.job_id for c in by_two] == [job, other]
    assert client.complete(by_two[0].fence)
    assert client.purge(timedelta(0)) == 1
    client.submit("r", "t")
    assert len(client.claim_jobs(["r"], "w", one, 1)) == 1, "call one's only job is gone"
    with raises_code("QF301"):
        client.claim_jobs(["r"], "w", two, 1)


def set_call_claims(db, job_ids, claimed_at) -> None:
    """Move the claimed_at of every claim of the jobs by claim_jobs."""
    if db.backend == "postgres":
        db.sql("UPDATE fenceq._jobs SET call_claims = ARRAY(SELECT ROW(c.generation, c.owner_id, %s::timestamptz,"
               " c.claim_nonce)::fenceq._call_claim FROM unnest(call_claims) WITH ORDINALITY"
               " AS c(generation, owner_id, claimed_at, claim_nonce, n) ORDER BY c.n) WHERE job_id = ANY(%s)",
               [claimed_at, list(job_ids)])
    else:
        db.sql("UPDATE fenceq__jobs SET call_claims = (SELECT json_group_array(json_set(a.value, '$.claimed_at', ?))"
               " FROM json_each(call_claims) AS a) WHERE job_id IN (SELECT value FROM json_each(?))",
               [stored(db, claimed_at), json.dumps(list(job_ids))])


def test_the_sampler_counts_the_claims_of_calls(db, client, q):
    done, running = client.submit(q, "t"), client.submit(q, "t")
    claims = client.claim_jobs([q], "w", nonce(), 2)
    assert client.complete(claims[0].fence)
    base = last_closed(db) - 20 * MINUTE
    set_jobs(db, [done, running], created_at=base + SECONDS, run_at=base + SECONDS)
    set_jobs(db, [done], finished_at=base + MINUTE + 2 * SECONDS)
    set_call_claims(db, [done, running], base + MINUTE + SECONDS)
    seed_sample(db, q, base - MINUTE)
    assert client.sample_activity() > 0
    buckets = by_start(client.activity(queue=q))
    assert counts(buckets[base]) == (2, 0, 0, 0, 0, 0, 0)
    assert counts(buckets[base + MINUTE]) == (0, 2, 0, 1, 0, 0, 0), "two claims by the call, one completion"
    finished = buckets[base + MINUTE]
    assert close_to(finished.wait_p50, middle_of_bucket(60_000)), "run_at to the call's claim"
    assert close_to(finished.run_p50, middle_of_bucket(10_000)), "the call's claim to the completion"


# Limits -----------------------------------------------------------------------------------

def test_max_claimed_and_the_rate_window_bound_a_call(client):
    client.create_queue("capped", lease=LONG)
    client.create_queue("rated", lease=LONG)
    client.set_queue_limits("capped", max_claimed=2)
    client.set_queue_limits("rated", rate_limit=3, rate_period=timedelta(hours=1))
    for name in ("capped", "rated"):
        for _ in range(5):
            client.submit(name, "t")
    assert len(client.claim_jobs(["capped"], "w", nonce(), 5)) == 2
    assert client.claim_jobs(["capped"], "w", nonce(), 5) == []
    assert len(client.claim_jobs(["rated"], "w", nonce(), 2)) == 2
    assert len(client.claim_jobs(["rated"], "w", nonce(), 5)) == 1, "the window had room for one more"
    stats = {s.queue: s for s in client.stats()}
    assert (stats["capped"].claimed, stats["rated"].claimed, stats["rated"].rate_used) == (2, 3, 3)


def test_max_claimed_per_key_passes_over_a_key_at_its_limit(client):
    client.create_queue("keyed", lease=LONG)
    client.set_queue_limits("keyed", max_claimed_per_key=1)
    a1 = client.submit("keyed", "t", concurrency_key="a", priority=3)
    client.submit("keyed", "t", concurrency_key="a", priority=2)
    b1 = client.submit("keyed", "t", concurrency_key="b", priority=1)
    assert [c.job_id for c in client.claim_jobs(["keyed"], "w", nonce(), 3)] == [a1, b1]


# Refusals ---------------------------------------------------------------------------------

def raw_claim_jobs(**values) -> Op:
    """claim_jobs built by hand, so that the values reach the SQL unchecked."""
    kinds = {"queues": "text[]", "owner_id": "text", "claim_nonce": "text", "max_jobs": "integer",
             "lease": "interval", "budget": "interval"}
    arguments = {"queues": ["q"], "owner_id": "w", "claim_nonce": "n", "max_jobs": 1} | values
    return Op("claim_jobs", tuple(Arg(name, kinds[name], value) for name, value in arguments.items()),
              Shape.ROWS, Claim)


@pytest.mark.parametrize("sqlstate, values", [
    ("QF104", {"max_jobs": 0}), ("QF104", {"max_jobs": 10001}), ("QF104", {"max_jobs": None}),
    ("QF102", {"claim_nonce": ""}), ("QF102", {"claim_nonce": "x" * 256}), ("QF102", {"claim_nonce": None}),
    ("QF102", {"owner_id": ""}), ("QF100", {"queues": []}), ("QF101", {"queues": ["q", "nope"]}),
    ("QF105", {"lease": timedelta(0)}), ("QF105", {"budget": timedelta(seconds=-1)}),
], ids=lambda v: v if isinstance(v, str) else next(iter(v)))
def test_bad_arguments_are_refused_by_the_database_with_nothing_changed(client, q, sqlstate, values):
    job = client.submit(q, "t")
    with raises_code(sqlstate):
        client._backend.run(raw_claim_jobs(**values))
    assert client.get_job(job).status == "pending"
    assert len(client.claim_jobs([q], "w", "n", 1)) == 1, "the nonce was not spent"


def test_the_client_refuses_bad_arguments_before_sending(client, q):
    client.submit(q, "t")
    with raises_code("QF104"):
        client.claim_jobs([q], "w", nonce(), 0)
    with raises_code("QF102"):
        client.claim_jobs([q], "w", "", 1)
    assert pending(client) == 1


def test_two_calls_with_one_nonce_one_wins(db, q):
    """Concurrent sessions: exactly one call claims, the other is refused
    QF301 and claims nothing."""
    with db.connect() as setup:
        for _ in range(4):
            setup.submit(q, "t")
    call, outcomes, start = nonce(), [], threading.Barrier(2)

    def attempt(owner: str) -> None:
        with db.connect() as client:
            start.wait()
            try:
                outcomes.append(len(client.claim_jobs([q], owner, call, 2)))
            except fenceq.FenceqError as error:
                outcomes.append(error.sqlstate)

    threads = [threading.Thread(target=attempt, args=(owner,)) for owner in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes, key=str) == [2, "QF301"]
    with db.connect() as client:
        assert pending(client) == 2
        assert sorted(len(client.recover_claims(owner, call)) for owner in ("a", "b")) == [0, 2]
