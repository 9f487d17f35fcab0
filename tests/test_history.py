"""A history of every job's transitions (schema version 6, issue 26;
docs/design-v6.md "History", docs/guarantees.md §20), on both engines.

Written from the design's table of events: each transition of a job whose
queue has history on writes one event in the transaction that made it, in
order (``seq``), with ``generation`` and ``owner_id`` the job's after the
transition for ``claimed`` and ``dispatch_adopted``, else the fence's (NULL
for an unclaimed job), and the ``detail`` the table names. A lease lapses
the way tests/test_dispatch.py lets it: renewed to a millisecond, then waited
past on the database's own reading.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from helpers import claim, raises_code, wait_until_past

BACKEND = "batch-cluster"


def lapse(client, c) -> None:
    assert client.heartbeat(c.fence, lease=timedelta(milliseconds=1)) is True
    wait_until_past(client.get_job(c.job_id).lease_expires_at)


def timeline(client, job_id):
    """(event, generation, owner_id, detail) of each event, checking the
    rows themselves on the way: in seq order, of this job, at non-decreasing times."""
    events = client.get_job_events(job_id)
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert len({e.seq for e in events}) == len(events)
    assert all(e.job_id == job_id for e in events)
    assert all(isinstance(e.detail, dict) for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    return [(e.event, e.generation, e.owner_id, e.detail) for e in events]


def names(client, job_id):
    return [e.event for e in client.get_job_events(job_id)]


def moment(value) -> datetime:
    """A time written into an event's detail (a JSON string)."""
    assert isinstance(value, str), value
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None, value
    return parsed


def history_queue(client, queue="q", **settings):
    settings.setdefault("backoff_base", timedelta(0))
    client.create_queue(queue, lease=timedelta(minutes=10), **settings)
    assert client.set_queue_history(queue, True) is True
    return queue


# set_queue_history ------------------------------------------------------------------------

def test_set_queue_history_answers_whether_it_changed(db):
    with db.connect() as client:
        client.create_queue("q")
        assert client.set_queue_history("q", False) is False            # off by default
        assert client.set_queue_history("q", True) is True
        assert client.set_queue_history("q", True) is False
        assert client.set_queue_history("q", True, retention=timedelta(hours=48)) is True
        assert client.set_queue_history("q", True, retention=timedelta(hours=48)) is False
        assert client.set_queue_history("q", True, retention=timedelta(hours=12)) is True
        assert client.set_queue_history("q", True) is True              # retention back to NULL
        assert client.set_queue_history("q", False) is True
        assert client.set_queue_history("q", False) is False
        with raises_code("QF101"):
            client.set_queue_history("nope", True)
        for bad in (timedelta(0), timedelta(seconds=-1)):
            with raises_code("QF105"):
                client.set_queue_history("q", True, retention=bad)
        assert client.set_queue_history("q", False) is False            # the refusals changed nothing


def test_history_is_off_by_default_and_per_queue(db):
    with db.connect() as client:
        client.create_queue("quiet")
        history_queue(client, "loud")
        quiet = client.submit("quiet", "t")
        loud = client.submit("loud", "t")
        for queue in ("quiet", "loud"):
            c = claim(client, queue)
            assert client.complete(c.fence)
        assert client.get_job_events(quiet) == []
        assert names(client, loud) == ["submitted", "claimed", "completed"]


def test_events_of_an_unknown_job_are_none(db):
    with db.connect() as client:
        assert client.get_job_events("no-such-job") == []


# The timeline of a job ----------------------------------------------------------------

def test_a_job_retried_reaped_released_and_completed(db):
    with db.connect() as client:
        history_queue(client, max_attempts=3)
        job_id = client.submit("q", "render", priority=2)
        job = client.get_job(job_id)
        first = claim(client, "q", owner="w1")
        assert client.fail(first.fence, "boom") is True
        second = claim(client, "q", owner="w2")
        lapse(client, second)
        assert client.reap().requeued == 1
        third = claim(client, "q", owner="w3")
        assert client.release(third.fence) is True
        released_run_at = client.get_job(job_id).run_at
        fourth = claim(client, "q", owner="w4")
        assert client.complete(fourth.fence, {"ok": True}) is True

        events = timeline(client, job_id)
        assert [e[:3] for e in events] == [
            ("submitted", None, None),
            ("claimed", 1, "w1"),
            ("retried", 1, "w1"),
            ("claimed", 2, "w2"),
            ("reaped", 2, "w2"),
            ("retried", 2, "w2"),
            ("claimed", 3, "w3"),
            ("released", 3, "w3"),
            ("claimed", 4, "w4"),
            ("completed", 4, "w4"),
        ]
        details = [e[3] for e in events]
        assert set(details[0]) == {"priority", "run_at"} and details[0]["priority"] == 2
        assert moment(details[0]["run_at"]) == job.run_at
        assert [details[i] for i in (1, 3, 6, 8)] == [{"attempt": 1}, {"attempt": 2}, {"attempt": 3},
                                                      {"attempt": 3}]  # a release spends no attempt
        assert set(details[2]) == {"error", "retry_at"} and details[2]["error"] == "boom"
        assert set(details[4]) == {"lease_expires_at"}
        assert set(details[5]) == {"error", "retry_at"} and details[5]["error"] == "lease_expired"
        assert set(details[7]) == {"run_at"} and moment(details[7]["run_at"]) == released_run_at
        assert details[9] == {}
        # Claim tokens never appear.
        text = json.dumps([e.detail for e in client.get_job_events(job_id)])
        for c in (first, second, third, fourth):
            assert c.claim_token not in text


def test_reaped_records_the_lapsed_lease(db):
    with db.connect() as client:
        history_queue(client, max_attempts=3)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        lapse(client, c)
        recorded = client.get_job(job_id).lease_expires_at
        assert client.reap().requeued == 1
        [reaped] = [e for e in client.get_job_events(job_id) if e.event == "reaped"]
        assert moment(reaped.detail["lease_expires_at"]) == recorded
        [retried] = [e for e in client.get_job_events(job_id) if e.event == "retried"]
        assert moment(retried.detail["retry_at"]) == client.get_job(job_id).run_at


def test_a_retry_records_its_error_and_retry_time(db):
    with db.connect() as client:
        history_queue(client, max_attempts=3, backoff_base=timedelta(minutes=5))
        job_id = client.submit("q", "t")
        c = claim(client, "q")
        long_error = "e" * 3000
        assert client.fail(c.fence, long_error) is True
        job = client.get_job(job_id)
        assert job.last_error == long_error                                # the job keeps it whole
        [retried] = [e for e in client.get_job_events(job_id) if e.event == "retried"]
        assert retried.detail["error"] == "e" * 2000                       # the event: cut to 2,000
        assert moment(retried.detail["retry_at"]) == job.run_at
        # An explicit retry time is the one recorded.
        client.alter_queue("q", backoff_base=timedelta(0))
        wanted = datetime.now(timezone.utc) - timedelta(seconds=1)
        assert client.fail(c.fence, "stale") is False                      # refused: no event
        client.submit("q", "t", job_id="explicit")
        c2 = claim(client, "q")
        assert c2.job_id == "explicit"                                     # the first waits its back-off
        assert client.fail(c2.fence, "later", retry_at=wanted) is True
        [retried] = [e for e in client.get_job_events("explicit") if e.event == "retried"]
        assert (retried.detail["error"], moment(retried.detail["retry_at"])) == ("later", wanted)
        assert names(client, job_id) == ["submitted", "claimed", "retried"]


def test_a_final_failure_writes_failed_then_dead_lettered_and_replay_writes_replayed(db):
    with db.connect() as client:
        history_queue(client, max_attempts=1)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        assert client.fail(c.fence, "fatal") is True
        dlq_id = client.get_job(job_id).dlq_id
        assert client.replay_dead_letter(dlq_id) == job_id
        again = claim(client, "q", owner="w2")
        assert client.complete(again.fence) is True
        assert timeline(client, job_id) == [
            ("submitted", None, None, timeline(client, job_id)[0][3]),
            ("claimed", 1, "w1", {"attempt": 1}),
            ("failed", 1, "w1", {"error": "fatal"}),
            ("dead_lettered", 1, "w1", {"dlq_id": dlq_id}),
            ("replayed", None, None, {"dlq_id": dlq_id}),
            ("claimed", 2, "w2", {"attempt": 1}),
            ("completed", 2, "w2", {}),
        ]


def test_a_final_failure_without_a_dead_letter_writes_failed_only(db):
    with db.connect() as client:
        history_queue(client, max_attempts=3, dead_letter=False)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        assert client.fail(c.fence, "fatal", retry=False) is True
        assert [e[:3] for e in timeline(client, job_id)][-1] == ("failed", 1, "w1")
        assert names(client, job_id) == ["submitted", "claimed", "failed"]


def test_reap_of_a_last_attempt_writes_reaped_failed_dead_lettered(db):
    with db.connect() as client:
        history_queue(client, max_attempts=1)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        lapse(client, c)
        assert client.reap().failed == 1
        dlq_id = client.get_job(job_id).dlq_id
        assert [e for e in timeline(client, job_id)][1:] == [
            ("claimed", 1, "w1", {"attempt": 1}),
            ("reaped", 1, "w1", timeline(client, job_id)[2][3]),
            ("failed", 1, "w1", {"error": "lease_expired"}),
            ("dead_lettered", 1, "w1", {"dlq_id": dlq_id}),
        ]


# Cancels -----------------------------------------------------------------------------------

def test_cancel_paths(db):
    with db.connect() as client:
        history_queue(client)
        pending = client.submit("q", "t", job_id="pending")
        assert client.cancel(pending) == "cancelled"
        assert client.cancel(pending) == "cancelled"                      # terminal: nothing new
        assert timeline(client, pending)[1:] == [("cancelled", None, None, {"reason": "cancel"})]

        client.submit("q", "t", job_id="acked")
        c = claim(client, "q", owner="w1")
        assert client.cancel(c.job_id) == "cancel_requested"
        assert client.acknowledge_cancel(c.fence) is True
        assert timeline(client, "acked")[1:] == [
            ("claimed", 1, "w1", {"attempt": 1}),
            ("cancel_requested", 1, "w1", {}),
            ("cancelled", 1, "w1", {"reason": "acknowledged"}),
        ]

        client.submit("q", "t", job_id="forced")
        c = claim(client, "q", owner="w1")
        assert client.cancel(c.job_id, force=True) == "cancelled"
        assert timeline(client, "forced")[1:] == [
            ("claimed", 1, "w1", {"attempt": 1}),
            ("cancelled", 1, "w1", {"reason": "force"}),
        ]

        client.submit("q", "t", job_id="reaped")
        c = claim(client, "q", owner="w1")
        assert client.cancel(c.job_id) == "cancel_requested"
        lapse(client, c)
        assert client.reap().cancelled == 1
        events = timeline(client, "reaped")[1:]
        assert [e[:3] for e in events] == [("claimed", 1, "w1"), ("cancel_requested", 1, "w1"),
                                           ("reaped", 1, "w1"), ("cancelled", 1, "w1")]
        assert events[3][3] == {"reason": "reaped"}


def test_a_repeated_cancel_request_writes_nothing(db):
    """A second request on a job whose cancel is already requested is no
    transition ("one row per transition"): nothing is written, as for a
    cancel of a terminal job."""
    with db.connect() as client:
        history_queue(client)
        client.submit("q", "t", job_id="j")
        c = claim(client, "q", owner="w1")
        assert client.cancel("j") == "cancel_requested"
        assert client.cancel("j") == "cancel_requested"
        client.cancel_matching("q", include_claimed=True)        # its count is not at issue here
        assert names(client, "j") == ["submitted", "claimed", "cancel_requested"]
        assert client.acknowledge_cancel(c.fence) is True
        assert client.cancel("j") == "cancelled"
        assert names(client, "j") == ["submitted", "claimed", "cancel_requested", "cancelled"]


def test_cancel_matching_writes_the_same_events(db):
    with db.connect() as client:
        history_queue(client)
        client.submit("q", "t", job_id="claimed-one")
        c = claim(client, "q", owner="w1")
        client.submit("q", "t", job_id="pending-one")
        assert client.cancel_matching("q", include_claimed=True) == 2
        assert timeline(client, "pending-one")[1:] == [("cancelled", None, None, {"reason": "cancel"})]
        assert timeline(client, "claimed-one")[1:] == [("claimed", 1, "w1", {"attempt": 1}),
                                                       ("cancel_requested", 1, "w1", {})]
        assert client.cancel_matching("q", include_claimed=True, force=True) == 1
        assert timeline(client, "claimed-one")[-1] == ("cancelled", 1, "w1", {"reason": "force"})
        assert c.job_id == "claimed-one"


# Submissions, expiry, dependencies ----------------------------------------------------------

def test_a_replayed_submission_writes_nothing(db):
    with db.connect() as client:
        history_queue(client)
        first = client.submit("q", "t", {"n": 1}, submission_id="s")
        assert client.submit("q", "t", {"n": 1}, submission_id="s") == first
        assert names(client, first) == ["submitted"]
        batch = client.submit_batch("q", [{"task": "a"}, {"task": "b", "priority": 4}])
        assert [names(client, j) for j in batch] == [["submitted"], ["submitted"]]
        assert client.get_job_events(batch[1])[0].detail["priority"] == 4


def test_an_overdue_job_expires_with_an_event(db):
    with db.connect() as client:
        history_queue(client)
        soon = datetime.now(timezone.utc) + timedelta(milliseconds=200)
        job_id = client.submit("q", "t", expires_at=soon)
        wait_until_past(soon)
        assert client.reap().expired == 1
        assert timeline(client, job_id)[1:] == [("expired", None, None, {})]


def test_dependencies_unblock_or_cancel_their_dependents(db):
    with db.connect() as client:
        history_queue(client, max_attempts=1, dead_letter=False)
        a = client.submit("q", "a", job_id="A")
        b = client.submit("q", "b", job_id="B", depends_on=[a])
        c = client.submit("q", "c", job_id="C", depends_on=[a, b])
        d = client.submit("q", "d", job_id="D")
        e = client.submit("q", "e", job_id="E", depends_on=[d])

        def settle(job_id, ok=True):
            claimed = client.claim_next(["q"], "w", fenceq.new_claim_token())
            while claimed.job_id != job_id:              # another due job first: put it back
                assert client.release(claimed.fence)
                claimed = client.claim_next(["q"], "w", fenceq.new_claim_token())
            assert client.complete(claimed.fence) if ok else client.fail(claimed.fence, "broken")

        settle("A")
        assert names(client, b) == ["submitted", "unblocked"]
        assert names(client, c) == ["submitted"]                  # B still to complete
        settle("B")
        assert timeline(client, c)[1:] == [("unblocked", None, None, {})]
        settle("D", ok=False)
        assert timeline(client, e)[1:] == [("cancelled", None, None, {"reason": "dependency_failed"})]


def test_events_of_an_unclaimed_job_carry_no_generation(db):
    """design-v6.md: generation/owner_id are "the job's after the
    transition for claimed/dispatch_adopted, else the fence's (NULL for an
    unclaimed job)"."""
    with db.connect() as client:
        history_queue(client, max_attempts=1)
        job_id = client.submit("q", "t")
        assert client.fail(claim(client, "q").fence, "fatal")
        assert client.replay_dead_letter(client.get_job(job_id).dlq_id) == job_id
        assert client.cancel(job_id) == "cancelled"
        events = timeline(client, job_id)
        assert [e[0] for e in events] == ["submitted", "claimed", "failed", "dead_lettered", "replayed", "cancelled"]
        unclaimed = [e for e in events if e[0] in ("submitted", "replayed", "cancelled")]
        assert [(e[1], e[2]) for e in unclaimed] == [(None, None)] * 3


# Dispatch events -----------------------------------------------------------------------------

def test_dispatch_events(db):
    with db.connect() as client:
        history_queue(client)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True       # a retry: no event
        with raises_code("QF305"):
            client.reserve_dispatch(c.fence, BACKEND, "r2")
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True         # a retry: no event
        assert client.finalize_dispatch(c.fence, "r1", "x9") is False
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True      # a retry: no event
        assert client.release(c.fence) is False                              # refused: no event
        lapse(client, c)
        assert client.reap().requeued == 0                                    # not reaped: no event
        token = fenceq.new_claim_token()
        adopted = client.adopt_dispatch(job_id, BACKEND, "x2", "reconciler", token)
        assert client.complete(adopted.fence) is True
        assert timeline(client, job_id)[1:] == [
            ("claimed", 1, "w1", {"attempt": 1}),
            ("dispatch_reserved", 1, "w1", {"backend": BACKEND, "reservation_ref": "r1"}),
            ("dispatch_finalized", 1, "w1", {"backend": BACKEND, "reservation_ref": "r1", "execution_ref": "x1"}),
            ("dispatch_replaced", 1, "w1", {"backend": BACKEND, "expected_ref": "x1", "execution_ref": "x2"}),
            ("dispatch_adopted", 2, "reconciler", {"backend": BACKEND, "ref": "x2", "previous_owner_id": "w1"}),
            ("completed", 2, "reconciler", {}),
        ]
        text = json.dumps([e.detail for e in client.get_job_events(job_id)])
        assert c.claim_token not in text and token not in text


def test_release_dispatch_and_stale_dispatch_calls(db):
    with db.connect() as client:
        history_queue(client)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        stale = fenceq.Fence(c.job_id, "intruder", c.generation, c.claim_token)
        assert client.reserve_dispatch(stale, BACKEND, "r1") is False
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.release_dispatch(stale, "r1") is False
        assert client.release_dispatch(c.fence, "r2") is False
        assert client.release_dispatch(c.fence, "r1") is True
        assert client.release(c.fence) is True
        assert timeline(client, job_id)[1:] == [
            ("claimed", 1, "w1", {"attempt": 1}),
            ("dispatch_reserved", 1, "w1", {"backend": BACKEND, "reservation_ref": "r1"}),
            ("dispatch_released", 1, "w1", {"backend": BACKEND, "reservation_ref": "r1"}),
            ("released", 1, "w1", timeline(client, job_id)[4][3]),
        ]


def test_a_refused_adoption_writes_nothing(db):
    with db.connect() as client:
        history_queue(client)
        job_id = client.submit("q", "t")
        c = claim(client, "q", owner="w1")
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = names(client, job_id)
        assert client.adopt_dispatch(job_id, BACKEND, "r1", "x", fenceq.new_claim_token()) is None   # live
        lapse(client, c)
        assert client.adopt_dispatch(job_id, BACKEND, "r2", "x", fenceq.new_claim_token()) is None
        with raises_code("QF301"):
            client.adopt_dispatch(job_id, BACKEND, "r1", "x", c.claim_token)
        assert names(client, job_id) == before


# Purge, retention, turning it off ------------------------------------------------------------

def test_purge_removes_a_jobs_events_with_the_job(db):
    with db.connect() as client:
        history_queue(client)
        done = client.submit("q", "t")
        assert client.complete(claim(client, "q").fence)
        live = client.submit("q", "t")
        assert client.purge(timedelta(0)) == 1
        assert client.get_job(done) is None
        assert client.get_job_events(done) == []
        assert names(client, live) == ["submitted"]


def test_retention_bounds_the_events_of_its_queue_only(db):
    with db.connect() as client:
        history_queue(client, "short")
        assert client.set_queue_history("short", True, retention=timedelta(milliseconds=100)) is True
        history_queue(client, "long")
        assert client.set_queue_history("long", True, retention=timedelta(hours=1)) is True
        history_queue(client, "forever")
        jobs = {q: client.submit(q, "t") for q in ("short", "long", "forever")}
        newest = max(e.at for j in jobs.values() for e in client.get_job_events(j))
        wait_until_past(newest + timedelta(milliseconds=100))
        client.purge(timedelta(hours=1))
        assert client.get_job_events(jobs["short"]) == []
        assert names(client, jobs["long"]) == ["submitted"]
        assert names(client, jobs["forever"]) == ["submitted"]
        assert all(client.get_job(j).status == "pending" for j in jobs.values())   # the jobs stay


def test_retention_is_bounded_by_max_rows(db):
    with db.connect() as client:
        history_queue(client, "short")
        assert client.set_queue_history("short", True, retention=timedelta(milliseconds=100)) is True
        jobs = client.submit_batch("short", [{"task": "t"} for _ in range(5)])
        newest = max(e.at for j in jobs for e in client.get_job_events(j))
        wait_until_past(newest + timedelta(milliseconds=100))
        client.purge(timedelta(hours=1), max_rows=2)
        assert sum(len(client.get_job_events(j)) for j in jobs) == 3
        client.purge(timedelta(hours=1), max_rows=2)
        assert sum(len(client.get_job_events(j)) for j in jobs) == 1
        client.purge(timedelta(hours=1), max_rows=2)
        assert sum(len(client.get_job_events(j)) for j in jobs) == 0


def test_turning_history_off_keeps_the_events_and_writes_no_more(db):
    with db.connect() as client:
        history_queue(client)
        job_id = client.submit("q", "t")
        c = claim(client, "q")
        assert client.set_queue_history("q", False) is True
        assert client.complete(c.fence) is True
        other = client.submit("q", "t")
        assert names(client, job_id) == ["submitted", "claimed"]
        assert client.get_job_events(other) == []
        assert client.set_queue_history("q", True) is True
        assert names(client, job_id) == ["submitted", "claimed"]
