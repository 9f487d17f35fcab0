"""The in-memory backend (fenceq.testing's memory mode) answers queue
settings, reap's requeue_priority and the job history as the database
does: each scenario runs once on a ``MemoryBackend`` (a manual clock: a
lease lapses when the clock moves past it) and once on each engine of the
``db`` fixture (a lease renewed to a millisecond and waited past), and what
it observes must be the same. Times in an event's detail are compared by
what they are equal to, not by value (the clocks differ). The database's
own answers are pinned in tests/test_history.py and tests/test_dispatch.py;
what the memory backend does not model (dead letters, expiry, purge) stays
out of the scenarios."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import pytest

import fenceq
from fenceq.testing.backend import MemoryBackend
from fenceq.testing.clock import ManualClock
from helpers import claim, raises_code, wait_until_past

LONG = timedelta(minutes=10)
BACKEND = "batch-cluster"


class OnLoop:
    """The in-memory backend under a sync ``Client``: each call runs to its
    end on an event loop of its own."""

    name = "memory"

    def __init__(self, memory: MemoryBackend):
        self.memory = memory

    def run(self, op):
        return asyncio.run(self.memory.run(op))


@dataclass
class Side:
    """One engine a scenario runs on: its client, how a claim's lease lapses
    there, and its clock."""

    client: fenceq.Client
    lapse: Callable[[fenceq.Claim], None]
    now: Callable[[], datetime]


def on_memory() -> Side:
    clock = ManualClock()
    memory = MemoryBackend(clock)
    client = fenceq.Client(OnLoop(memory))

    def lapse(c: fenceq.Claim) -> None:
        assert client.heartbeat(c.fence, lease=timedelta(seconds=1)) is True
        clock.advance(2)

    return Side(client, lapse, memory.now)


@contextlib.contextmanager
def on_database(db) -> Iterator[Side]:
    with db.connect() as client:
        def lapse(c: fenceq.Claim) -> None:
            assert client.heartbeat(c.fence, lease=timedelta(milliseconds=1)) is True
            wait_until_past(client.get_job(c.job_id).lease_expires_at)

        yield Side(client, lapse, lambda: datetime.now(timezone.utc))


def alike(scenario: Callable[[Side], Any], db) -> Any:
    """What the scenario observes on memory, once it is checked to be what it
    observes on the database."""
    observed = scenario(on_memory())
    with on_database(db) as side:
        assert observed == scenario(side)
    return observed


def told(call: Callable[[], Any]) -> Any:
    """What a call answers, or the SQLSTATE it is refused with."""
    try:
        return call()
    except fenceq.FenceqError as error:
        return error.sqlstate


def drained(client, queue) -> list[str]:
    order = []
    while (c := client.claim_next([queue], "w", fenceq.new_claim_token())) is not None:
        order.append(c.job_id)
        assert client.complete(c.fence)
    return order


def timeline(client, job_id) -> list[tuple]:
    """(event, generation, owner_id, detail) of each event, in seq order; a
    time in a detail is '<time>' (the clocks differ; what it equals is each
    scenario's to observe)."""
    events = client.get_job_events(job_id)
    assert [e.seq for e in events] == sorted({e.seq for e in events}) and all(e.job_id == job_id for e in events)
    return [(e.event, e.generation, e.owner_id, {key: "<time>" if key.endswith("_at") else value
                                                 for key, value in e.detail.items()}) for e in events]


def detail_time(client, job_id, event) -> datetime:
    [found] = [e for e in client.get_job_events(job_id) if e.event == event]
    key = next(key for key in found.detail if key.endswith("_at"))
    return datetime.fromisoformat(found.detail[key].replace("Z", "+00:00"))


# Queue settings and requeue_priority ----------------------------------------------------------

def test_queue_settings_are_validated_and_compared(db):
    def scenario(side):
        c = side.client
        return [
            c.create_queue("q", requeue_priority="first"), c.create_queue("q", requeue_priority="first"),
            told(lambda: c.create_queue("q", requeue_priority="last")),
            c.create_queue("k"), c.create_queue("k", requeue_priority="keep"),
            told(lambda: c.create_queue("k", lease=LONG)),
            c.alter_queue("q", requeue_priority="last"), c.create_queue("q", requeue_priority="last"),
            c.alter_queue("q", max_attempts=7),
            told(lambda: c.create_queue("q", requeue_priority="last")),
            c.create_queue("q", requeue_priority="last", max_attempts=7),
            told(lambda: c.alter_queue("q", backoff_base=timedelta(hours=2))),
        ]

    assert alike(scenario, db) == [True, False, "QF100", True, False, "QF100", None, False, None, "QF100",
                                   False, "QF105"]


def test_create_queue_without_requeue_priority_matches_any_setting(db):
    """docs/guarantees.md §3: NULL is keep for a new queue and matches any
    setting of an existing one."""

    def scenario(side):
        side.client.create_queue("q", requeue_priority="first")
        return told(lambda: side.client.create_queue("q"))

    assert alike(scenario, db) is False


def stalled(side, queue) -> fenceq.Claim:
    """Job "stalled" of ``queue``, claimed and lapsed (not yet reaped)."""
    side.client.submit(queue, "stalled", job_id="stalled")
    c = claim(side.client, queue, owner="w-stalled")
    assert c.job_id == "stalled"
    side.lapse(c)
    return c


def test_requeue_first_goes_ahead_of_its_priority_never_of_a_higher_one(db):
    def scenario(side):
        c = side.client
        c.create_queue("q", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5, requeue_priority="first")
        stalled(side, "q")
        past = side.now() - timedelta(minutes=5)
        c.submit("q", "t", job_id="early", run_at=past)
        c.submit("q", "t", job_id="later-submitted")
        c.submit("q", "t", job_id="high", priority=5)
        c.submit("q", "t", job_id="low-earliest", priority=-1, run_at=past - timedelta(hours=1))
        reaped = c.reap()
        job = c.get_job("stalled")
        between = c.get_job("low-earliest").run_at < job.run_at < c.get_job("early").run_at
        return reaped, (job.status, job.last_error, job.owner_id), between, drained(c, "q")

    assert alike(scenario, db)[-1] == ["high", "stalled", "early", "later-submitted", "low-earliest"]


def test_requeue_keep_backs_off_and_last_goes_behind_its_priority(db):
    def scenario(side):
        c = side.client
        c.create_queue("q", lease=LONG, backoff_base=timedelta(0), max_attempts=5, requeue_priority="last")
        c.create_queue("k", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5)
        far = side.now() + timedelta(hours=1)
        claims = []
        for queue in ("q", "k"):
            c.submit(queue, "t", job_id=f"due-{queue}")
            c.submit(queue, "t", job_id=f"far-{queue}", run_at=far)
            c.submit(queue, "t", job_id=f"farther-low-{queue}", priority=-1, run_at=far + timedelta(hours=1))
            c.submit(queue, "t", job_id=f"now-{queue}", priority=-1)
            claims.append(claim(c, queue))
        for claimed in claims:
            side.lapse(claimed)
        reaped = c.reap()
        last = c.get_job("due-q").run_at
        return (reaped, last - c.get_job("far-q").run_at, last < c.get_job("farther-low-q").run_at,
                c.get_job("due-k").run_at > side.now() + timedelta(minutes=30), drained(c, "q"), drained(c, "k"))

    assert alike(scenario, db)[1:] == (timedelta(microseconds=1), True, True, ["now-q"], ["now-k"])


def test_reap_cancels_a_requested_cancel_fails_a_last_attempt_and_leaves_a_dispatch(db):
    def scenario(side):
        c = side.client
        c.create_queue("q", lease=LONG, max_attempts=1, dead_letter=False, requeue_priority="first")
        for job_id in ("asked", "last", "dispatched"):
            c.submit("q", "t", job_id=job_id)
        claims = [claim(c, "q") for _ in range(3)]
        asked = [c.cancel("asked"), c.cancel("asked")]
        reserved = c.reserve_dispatch(claims[2].fence, BACKEND, "r1")
        for claimed in claims:
            side.lapse(claimed)
        reaped = c.reap()
        return asked, reserved, reaped, [(j.status, j.last_error) for j in map(c.get_job, ("asked", "last",
                                                                                             "dispatched"))]

    assert alike(scenario, db)[2:] == (fenceq.ReapResult(0, 1, 1, 0),
                                       [("cancelled", None), ("failed", "lease_expired"), ("claimed", None)])


# History ------------------------------------------------------------------------------------

def history_queue(client, queue="q", **settings):
    settings.setdefault("backoff_base", timedelta(0))
    client.create_queue(queue, lease=LONG, dead_letter=False, **settings)
    assert client.set_queue_history(queue, True) is True


def test_set_queue_history_answers_whether_it_changed(db):
    def scenario(side):
        c = side.client
        c.create_queue("q")
        return [c.set_queue_history("q", False), c.set_queue_history("q", True), c.set_queue_history("q", True),
                c.set_queue_history("q", True, retention=timedelta(hours=48)),
                c.set_queue_history("q", True, retention=timedelta(hours=48)),
                c.set_queue_history("q", True), c.set_queue_history("q", False),
                told(lambda: c.set_queue_history("q", True, retention=timedelta(0)))]

    assert alike(scenario, db) == [False, True, False, True, False, True, True, "QF105"]


def test_history_is_per_queue_and_turning_it_off_keeps_the_events(db):
    def scenario(side):
        c = side.client
        c.create_queue("quiet")
        history_queue(c, "loud")
        c.submit("quiet", "t", job_id="quiet-one")
        c.submit("loud", "t", job_id="loud-one")
        for queue in ("quiet", "loud"):
            assert c.complete(claim(c, queue).fence)
        c.submit("loud", "t", job_id="cut-short")
        held = claim(c, "loud")
        c.set_queue_history("loud", False)
        c.complete(held.fence)
        return [timeline(c, j) for j in ("quiet-one", "loud-one", "cut-short", "no-such-job")]

    assert [[e[0] for e in events] for events in alike(scenario, db)] == [
        [], ["submitted", "claimed", "completed"], ["submitted", "claimed"], []]


def test_a_job_retried_reaped_released_and_completed(db):
    def scenario(side):
        c = side.client
        history_queue(c, max_attempts=3)
        c.submit("q", "render", job_id="j", priority=2)
        first = claim(c, "q", owner="w1")
        c.fail(first.fence, "boom")
        side.lapse(claim(c, "q", owner="w2"))
        c.reap()
        c.release(claim(c, "q", owner="w3").fence)
        released_at = c.get_job("j").run_at
        c.complete(claim(c, "q", owner="w4").fence, {"ok": True})
        return timeline(c, "j"), detail_time(c, "j", "released") == released_at

    events, released_as_job_says = alike(scenario, db)
    assert [e[0] for e in events] == ["submitted", "claimed", "retried", "claimed", "reaped", "retried", "claimed",
                                      "released", "claimed", "completed"]
    assert released_as_job_says


def test_a_retry_records_its_error_cut_and_its_retry_time(db):
    def scenario(side):
        c = side.client
        history_queue(c, max_attempts=3, backoff_base=timedelta(minutes=5))
        c.submit("q", "t", job_id="backed-off")
        c.fail(claim(c, "q").fence, "e" * 3000)
        wanted = side.now() + timedelta(seconds=7)
        c.submit("q", "t", job_id="explicit")
        c.fail(claim(c, "q").fence, "later", retry_at=wanted)
        return (timeline(c, "backed-off"), c.get_job("backed-off").last_error == "e" * 3000,
                detail_time(c, "backed-off", "retried") == c.get_job("backed-off").run_at,
                detail_time(c, "explicit", "retried") == wanted)

    events, *checks = alike(scenario, db)
    assert events[-1][3]["error"] == "e" * 2000 and checks == [True, True, True]


def test_cancel_paths(db):
    def scenario(side):
        c = side.client
        history_queue(c, max_attempts=1)
        c.submit("q", "t", job_id="pending")
        answers = [c.cancel("pending"), c.cancel("pending")]
        c.submit("q", "t", job_id="acked")
        acked = claim(c, "q", owner="w1")
        answers += [c.cancel("acked"), c.cancel("acked"), c.acknowledge_cancel(acked.fence)]
        c.submit("q", "t", job_id="forced")
        claim(c, "q", owner="w1")
        answers.append(c.cancel("forced", force=True))
        c.submit("q", "t", job_id="reaped")
        reaped = claim(c, "q", owner="w1")
        answers.append(c.cancel("reaped"))
        side.lapse(reaped)
        answers.append(c.reap())
        c.submit("q", "t", job_id="failed")
        answers.append(c.fail(claim(c, "q", owner="w1").fence, "fatal"))
        return answers, [timeline(c, j) for j in ("pending", "acked", "forced", "reaped", "failed")]

    answers, timelines = alike(scenario, db)
    assert answers[:5] == ["cancelled", "cancelled", "cancel_requested", "cancel_requested", True]
    assert [e[:3] for e in timelines[3]] == [("submitted", None, None), ("claimed", 1, "w1"),
                                             ("cancel_requested", 1, "w1"), ("reaped", 1, "w1"),
                                             ("cancelled", 1, "w1")]


def test_submissions_and_dependencies(db):
    def scenario(side):
        c = side.client
        history_queue(c, max_attempts=1)
        replayed = [c.submit("q", "t", {"n": 1}, job_id="s", submission_id="s") for _ in range(2)]
        c.submit_batch("q", [{"task": "a", "job_id": "b1"}, {"task": "b", "job_id": "b2", "priority": 4}])
        c.submit("q", "a", job_id="A")
        c.submit("q", "b", job_id="B", depends_on=["A"])
        c.submit("q", "c", job_id="C", depends_on=["A", "B"])
        c.submit("q", "d", job_id="D")
        c.submit("q", "e", job_id="E", depends_on=["D"])
        for job_id in ("s", "b1", "b2"):
            c.cancel(job_id)

        def settle(job_id, ok=True):
            claimed = claim(c, "q", owner="w")
            while claimed.job_id != job_id:              # another due job first: put it back
                assert c.release(claimed.fence)
                claimed = claim(c, "q", owner="w")
            assert c.complete(claimed.fence) if ok else c.fail(claimed.fence, "broken")

        settle("A")
        after_a = [e[0] for e in timeline(c, "C")]
        settle("B")
        settle("D", ok=False)
        # A blocked job's submitted run_at is left out: see the next test.
        return replayed, after_a, [timeline(c, j)[1:] for j in ("s", "b1", "b2", "B", "C", "E")]

    replayed, after_a, timelines = alike(scenario, db)
    assert replayed == ["s", "s"] and after_a == ["submitted"]
    assert [e[0] for e in timelines[3]] == ["unblocked", "claimed", "completed"]
    assert timelines[4:] == [[("unblocked", None, None, {})],
                             [("cancelled", None, None, {"reason": "dependency_failed"})]]


def test_a_blocked_jobs_submitted_event_records_the_run_at_it_asked_for(db):
    """As get_job shows it, on memory and SQLite. Differs on PostgreSQL,
    whose step 0006 records the 'infinity' it stores while the job waits."""
    def scenario(side):
        c = side.client
        history_queue(c)
        c.submit("q", "a", job_id="A")
        later = side.now() + timedelta(hours=1)
        c.submit("q", "b", job_id="B", depends_on=["A"], run_at=later)
        [submitted] = c.get_job_events("B")
        recorded = submitted.detail["run_at"]
        if recorded == "infinity":
            return recorded
        return datetime.fromisoformat(recorded.replace("Z", "+00:00")) == c.get_job("B").run_at == later

    assert scenario(on_memory()) is True
    with on_database(db) as side:
        assert scenario(side) == ("infinity" if db.backend == "postgres" else True)


def test_dispatch_events(db):
    def scenario(side):
        c = side.client
        history_queue(c)
        c.submit("q", "t", job_id="j")
        first = claim(c, "q", owner="w1")
        answers = [c.reserve_dispatch(first.fence, BACKEND, "r1"), c.reserve_dispatch(first.fence, BACKEND, "r1"),
                   told(lambda: c.reserve_dispatch(first.fence, BACKEND, "r2")),
                   c.finalize_dispatch(first.fence, "r1", "x1"), c.finalize_dispatch(first.fence, "r1", "x1"),
                   c.finalize_dispatch(first.fence, "r1", "x9"), c.replace_dispatch_ref(first.fence, "x1", "x2"),
                   c.replace_dispatch_ref(first.fence, "x1", "x2"), c.release(first.fence)]
        side.lapse(first)
        answers.append(c.reap())
        token = fenceq.new_claim_token()
        answers.append(c.adopt_dispatch("j", BACKEND, "x1", "reconciler", token))
        adopted = c.adopt_dispatch("j", BACKEND, "x2", "reconciler", token)
        answers.append(c.complete(adopted.fence))
        c.submit("q", "t", job_id="k")
        second = claim(c, "q", owner="w2")
        answers += [c.reserve_dispatch(second.fence, BACKEND, "r1"), c.release_dispatch(second.fence, "r2"),
                    c.release_dispatch(second.fence, "r1"), c.release(second.fence)]
        return answers, timeline(c, "j"), timeline(c, "k")

    answers, adopted, released = alike(scenario, db)
    assert [e[0] for e in adopted[2:]] == ["dispatch_reserved", "dispatch_finalized", "dispatch_replaced",
                                           "dispatch_adopted", "completed"]
    assert [e[0] for e in released[2:]] == ["dispatch_reserved", "dispatch_released", "released"]


def test_an_operation_it_does_not_model_is_refused_by_name():
    with raises_code("QF100") as refused:
        on_memory().client.purge(timedelta(days=1))
    assert "does not model purge" in str(refused.value)


def test_a_declared_queues_back_off_grows_as_on_the_database():
    """The database's growth is tested with real back-offs elsewhere; here
    the clock can wait them out."""
    clock = ManualClock()
    memory = MemoryBackend(clock)
    client = fenceq.Client(OnLoop(memory))
    client.create_queue("q", backoff_base=timedelta(minutes=1), backoff_factor=3, backoff_max=timedelta(minutes=5))
    client.submit("q", "t", job_id="failing")
    delays = []
    for _ in range(3):
        assert client.fail(claim(client, "q").fence, "boom") is True
        delays.append(client.get_job("failing").run_at - memory.now())
        clock.advance(delays[-1].total_seconds())
    assert delays == [timedelta(minutes=1), timedelta(minutes=3), timedelta(minutes=5)]


# One nonce per claim call (schema version 8) ---------------------------------------------------------

def test_claim_jobs_and_recover_claims(db):
    def scenario(side):
        c = side.client
        c.create_queue("q", lease=LONG)
        for job_id, priority in (("low", 0), ("high", 2), ("middle", 1)):
            c.submit("q", "t", job_id=job_id, priority=priority)
        claims = c.claim_jobs(["q"], "w", "call", 2)
        c.complete(claims[0].fence)
        token = fenceq.new_claim_token()
        single = claim(c, "q")
        return ([(x.job_id, x.claim_token, x.generation) for x in claims],
                [x.job_id for x in c.recover_claims("w", "call")],
                c.recover_claim("w", "call").job_id,
                c.recover_claims("other", "call"),
                [x.job_id for x in c.recover_claims(single.owner_id, single.claim_token)],
                told(lambda: c.claim_jobs(["q"], "w", "call", 1)),
                told(lambda: c.claim_jobs(["q"], "w", single.claim_token, 1)),
                told(lambda: c.claim_next(["q"], "w", "call")),
                c.claim_jobs(["q"], "w", token, 3),
                told(lambda: c.claim_jobs(["q"], "w", token, 3)))

    assert alike(scenario, db) == ([("high", "call", 1), ("middle", "call", 1)], ["middle"], "middle", [], ["low"],
                                   "QF301", "QF301", "QF301", [], [])
