"""The isolation specs of tests/isolation (PostgreSQL's isolation tester),
mirrored on SQLite with two real connections and the same expected outcome
(docs/testing.md lists the specs).

SQLite has no row locks: a session that holds a write transaction
(``BEGIN IMMEDIATE``, statement files run inside it as in a caller's own
transaction) keeps every other writer waiting on the busy timeout. So where
a PostgreSQL spec shows a step waiting on a row, here the other session's
call waits for the whole file, and once it gets the write lock it decides
on what the holder committed, with the clock read inside its own write
transaction. The call that waits runs in a thread on a client of its own.

Differs from PostgreSQL in that a reap, a claim or a tick waits for the
write lock where PostgreSQL's passes over a locked row; the outcomes are the
same (but for which reap requeues, in reap_vs_reserve). Not mirrored:
schedule_tick (a schedule's first occurrence is up to a minute away; SQLite
ticks take turns on the write lock, and processes ticking at once are tested
in test_schedules.py), and the check_lock permutations where the holder
releases or renews from another connection during the fenced transaction,
which SQLite holds back (§15); due_later_move, claim_vs_cancel,
claim_vs_release and move_due_vs_cancel, not yet."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import time
from datetime import timedelta
from typing import Any, Callable, Iterator

import pytest

import fenceq
from fenceq import ops
from fenceq.backends.sqlite import database_path, open_connection, run_in_transaction
from fenceq.locks import check_lock_in_transaction
from fenceq.types import ReapResult

LONG = timedelta(minutes=1)
SHORT = timedelta(milliseconds=200)
PAST_SHORT = 0.3  # seconds: a sleep that outlasts SHORT


class Holder:
    """A session that holds the database's write lock: calls run in its open
    transaction, which it commits or rolls back when the spec says."""

    def __init__(self, url: str):
        self.connection = open_connection(database_path(url))

    def begin(self) -> "Holder":
        self.connection.execute("BEGIN IMMEDIATE")
        return self

    def run(self, op: ops.Op) -> Any:
        return run_in_transaction(self.connection, op)

    def commit(self) -> None:
        self.connection.execute("COMMIT")

    def rollback(self) -> None:
        self.connection.execute("ROLLBACK")

    def close(self) -> None:
        if self.connection.in_transaction:
            self.rollback()
        self.connection.close()


def told(call: Callable[[], Any]) -> Any:
    """What a call answers, or the SQLSTATE it is refused with."""
    try:
        return call()
    except fenceq.FenceqError as error:
        return error.sqlstate


class Race:
    """The sessions of one spec: holders (``hold()``), a client for calls
    that run in transactions of their own, and ``waiting(call)``: a call on
    another client, started while a holder has the write lock."""

    def __init__(self, url: str):
        self.url = url
        self.client = fenceq.connect(url)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        self._holders: list[Holder] = []
        self._clients: list[fenceq.Client] = [self.client]

    def hold(self) -> Holder:
        holder = Holder(self.url)
        self._holders.append(holder)
        return holder.begin()

    def waiting(self, call: Callable[[fenceq.Client], Any]) -> concurrent.futures.Future:
        other = fenceq.connect(self.url)
        self._clients.append(other)
        future = self._pool.submit(told, lambda: call(other))
        # The holder has the write lock: the call cannot be answered before it
        # ends (a call answered now got past a held write lock).
        done, _ = concurrent.futures.wait([future], timeout=0.1)
        assert not done, future.result()
        return future

    def close(self) -> None:
        for holder in self._holders:
            holder.close()
        self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()


@pytest.fixture
def race(sqlite_db) -> Iterator[Race]:
    race = Race(sqlite_db.url)
    yield race
    race.close()


def answer(future: concurrent.futures.Future) -> Any:
    return future.result(timeout=30)


def claimed_fence(client: fenceq.Client, queue: str, job_id: str, token: str = "t",
                  owner: str = "w", lease: timedelta = LONG) -> fenceq.Fence:
    claim = client.claim_next([queue], owner, token, lease=lease)
    assert claim is not None and claim.job_id == job_id
    return claim.fence


def one_claimed_job(client: fenceq.Client) -> fenceq.Fence:
    """Job j of queue q, claimed by w for a minute (generation 1)."""
    client.create_queue("q", max_attempts=3)
    client.submit("q", "task", job_id="j")
    return claimed_fence(client, "q", "j")


def lapse(client: fenceq.Client, fence: fenceq.Fence) -> None:
    """Renew the claim to SHORT and outlast it."""
    assert client.heartbeat(fence, lease=SHORT) is True
    time.sleep(PAST_SHORT)


def in_time_past_the_lease(race: "Race", fence: fenceq.Fence, write: ops.Op) -> "Holder":
    """A holder that made a fenced write within a lease renewed to 3 s and
    keeps it uncommitted while the lease lapses."""
    assert race.client.heartbeat(fence, lease=timedelta(seconds=3)) is True
    worker = race.hold()
    assert worker.run(write) is True  # within the three seconds
    time.sleep(3)
    return worker


# fenced_write_past_lease.spec

FENCED_WRITES = {
    "complete": (lambda c, f: c.complete(f, {"done": True}), True),
    "heartbeat": (lambda c, f: c.heartbeat(f), True),
    "checkpoint": (lambda c, f: c.checkpoint(f, "step", 1), 1),
    "fail": (lambda c, f: c.fail(f, "boom"), True),
    "release": (lambda c, f: c.release(f), True),
    "progress": (lambda c, f: c.progress(f, {"pct": 50}), True),
    "extend": (lambda c, f: c.extend(f, timedelta(hours=1)), True),
    "set_pid": (lambda c, f: c.set_pid(f, 4242), True),
    "heartbeat_batch": (lambda c, f: c.heartbeat_batch([f]), [True]),
    "complete_batch": (lambda c, f: c.complete_batch([f]), [True]),
}
REFUSED = {"checkpoint": None, "heartbeat_batch": [False], "complete_batch": [False]}
STATUS_AFTER = {"complete": "completed", "complete_batch": "completed", "fail": "pending", "release": "pending"}


@pytest.mark.parametrize("write", sorted(FENCED_WRITES))
@pytest.mark.parametrize("renewal", ["short", "long"])
def test_fenced_write_waiting_past_the_lease_is_refused(race, write, renewal):
    fence = one_claimed_job(race.client)
    call, applied = FENCED_WRITES[write]

    heartbeats = race.hold()
    assert heartbeats.run(ops.heartbeat(fence, SHORT if renewal == "short" else LONG)) is True
    pending = race.waiting(lambda client: call(client, fence))
    if renewal == "short":
        time.sleep(PAST_SHORT)
    heartbeats.commit()

    told_write = answer(pending)
    job = race.client.get_job("j")
    if renewal == "short":
        assert told_write == REFUSED.get(write, False)
        assert (job.status, job.attempts, job.result, job.last_error, job.progress,
                job.budget_expires_at, job.pid) == ("claimed", 1, None, None, None, None, None)
    else:
        assert told_write == applied
        assert job.status == STATUS_AFTER.get(write, "claimed")


# reap_vs_complete.spec

def test_reap_against_a_completion_that_holds_the_job(race):
    fence = one_claimed_job(race.client)

    worker = in_time_past_the_lease(race, fence, ops.complete(fence))
    reaped = race.waiting(lambda client: client.reap())
    worker.commit()

    assert answer(reaped) == ReapResult(0, 0, 0, 0)
    job = race.client.get_job("j")
    assert (job.status, job.attempts, job.generation) == ("completed", 1, 1)


@pytest.mark.parametrize("reap_ends", ["commit", "rollback"])
def test_completion_against_a_reap_of_its_lapsed_claim(race, reap_ends):
    fence = one_claimed_job(race.client)
    lapse(race.client, fence)

    reaper = race.hold()
    assert reaper.run(ops.reap()) == ReapResult(1, 0, 0, 0)
    completion = race.waiting(lambda client: client.complete(fence))
    getattr(reaper, reap_ends)()

    assert answer(completion) is False
    job = race.client.get_job("j")
    expected = ("pending", "lease_expired") if reap_ends == "commit" else ("claimed", None)
    assert (job.status, job.last_error) == expected


def test_completion_after_a_reap_is_refused(race):
    fence = one_claimed_job(race.client)
    lapse(race.client, fence)
    assert race.client.reap() == ReapResult(1, 0, 0, 0)
    assert race.client.complete(fence) is False
    assert race.client.get_job("j").status == "pending"


# claim_token.spec

def status(client: fenceq.Client, job_id: str) -> str | None:
    job = client.get_job(job_id)
    return job.status if job else None


def token_state(client: fenceq.Client) -> tuple:
    return (status(client, "j1"), status(client, "j2"), client.recover_claim("w1", "T") is not None,
            client.recover_claim("w2", "T") is not None)


def two_jobs(client: fenceq.Client) -> None:
    client.create_queue("q")
    client.submit("q", "task", job_id="j1")
    client.submit("q", "task", job_id="j2")


@pytest.mark.parametrize("call", ["claim_next", "claim_batch"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
@pytest.mark.parametrize("retired_by", [None, "complete", "release"])
def test_one_claim_token_from_two_sessions(race, call, first_ends, retired_by):
    two_jobs(race.client)
    first = race.hold()
    claim = first.run(ops.claim_next(["q"], "w1", "T"))
    assert claim.job_id == "j1"
    if retired_by:
        assert first.run(getattr(ops, retired_by)(claim.fence)) is True
    second = race.waiting(lambda client: (
        client.claim_next(["q"], "w2", "T") is not None if call == "claim_next"
        else len(client.claim_batch(["q"], "w2", ["T"]))))
    getattr(first, first_ends)()

    if first_ends == "commit":
        assert answer(second) == "QF301"
        first_status = {None: "claimed", "complete": "completed", "release": "pending"}[retired_by]
        assert token_state(race.client) == (first_status, "pending", retired_by is None, False)
    else:
        assert answer(second) in (True, 1)
        # Differs from PostgreSQL (j2: j1 was locked) in that claims take
        # turns in strict order: the waiting claim takes j1.
        assert token_state(race.client) == ("claimed", "pending", False, True)


def test_a_used_token_is_refused_without_waiting(race):
    two_jobs(race.client)
    claim = race.client.claim_next(["q"], "w1", "T")
    assert race.client.complete(claim.fence) is True
    assert told(lambda: race.client.claim_next(["q"], "w2", "T")) == "QF301"
    assert token_state(race.client) == ("completed", "pending", False, False)


@pytest.mark.parametrize("purge_ends", ["commit", "rollback"])
def test_a_token_racing_the_purge_of_its_use(race, purge_ends):
    two_jobs(race.client)
    claim = race.client.claim_next(["q"], "w1", "T")
    assert race.client.complete(claim.fence) is True
    purger = race.hold()
    assert purger.run(ops.purge(timedelta(0))) > 0
    second = race.waiting(lambda client: client.claim_next(["q"], "w2", "T") is not None)
    getattr(purger, purge_ends)()

    if purge_ends == "commit":
        assert answer(second) is True
        assert token_state(race.client) == (None, "claimed", False, True)
    else:
        assert answer(second) == "QF301"
        assert token_state(race.client) == ("completed", "pending", False, False)


# submission_id.spec

@pytest.mark.parametrize("request_of_second", ["same", "changed"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_submissions_under_one_submission_id(race, request_of_second, first_ends):
    race.client.create_queue("q")
    first = race.hold()
    first_id = first.run(ops.submit("q", "task", [1], submission_id="s"))
    payload = [1] if request_of_second == "same" else [2]
    second = race.waiting(lambda client: client.submit("q", "task", payload, submission_id="s"))
    getattr(first, first_ends)()

    second_told = answer(second)
    jobs = race.client.get_job(first_id), (race.client.get_job(second_told)
                                           if second_told not in (None, "QF201") else None)
    if first_ends == "commit" and request_of_second == "changed":
        assert second_told == "QF201"
        assert jobs[0].payload == [1]
    elif first_ends == "commit":
        assert second_told == first_id and jobs[0].payload == [1]
    else:  # the first keeps no identity: the second creates the job
        assert jobs[0] is None and jobs[1].payload == payload and jobs[1].submission_id == "s"


# active_key.spec

def key_holders(client: fenceq.Client) -> tuple:
    statuses = tuple(status(client, job_id) for job_id in ("j1", "j2", "j3"))
    return statuses + (sum(s in ("pending", "claimed") for s in statuses),)


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("claim_ends", ["commit", "rollback"])
def test_an_active_key_against_a_claim_of_its_holder(race, force, claim_ends):
    race.client.create_queue("q")
    race.client.submit("q", "task", job_id="j1", active_key="k")
    worker = race.hold()
    claim = worker.run(ops.claim_next(["q"], "w", "t"))
    assert claim.job_id == "j1"
    second = race.waiting(lambda client: client.submit("q", "task", job_id="j2", active_key="k", force=force))
    getattr(worker, claim_ends)()

    if not force:
        assert answer(second) == "QF202"
        assert key_holders(race.client) == ("claimed" if claim_ends == "commit" else "pending", None, None, 1)
    else:
        assert answer(second) == "j2"
        assert key_holders(race.client) == ("cancelled", "pending", None, 1)
    if claim_ends == "commit":
        assert race.client.heartbeat(claim.fence) is (not force)


def test_a_claim_after_a_forced_replacement_finds_nothing(race):
    race.client.create_queue("q")
    race.client.submit("q", "task", job_id="j1", active_key="k")
    submitter = race.hold()
    assert submitter.run(ops.submit("q", "task", job_id="j2", active_key="k", force=True)) == "j2"
    claim = race.waiting(lambda client: client.claim_next(["q"], "w", "t"))
    submitter.commit()
    # Differs from PostgreSQL in that the claim waits for the replacement to
    # commit and then claims it (PostgreSQL passes over both rows).
    assert answer(claim).job_id == "j2"
    assert key_holders(race.client) == ("cancelled", "claimed", None, 1)


def test_two_forced_submissions_leave_one_active_job(race):
    race.client.create_queue("q")
    race.client.submit("q", "task", job_id="j1", active_key="k")
    first = race.hold()
    assert first.run(ops.submit("q", "task", job_id="j3", active_key="k", force=True)) == "j3"
    second = race.waiting(lambda client: client.submit("q", "task", job_id="j2", active_key="k", force=True))
    first.commit()
    assert answer(second) == "j2"
    assert key_holders(race.client) == ("cancelled", "pending", "cancelled", 1)


# dependency_join.spec

@pytest.mark.parametrize("order", ["p1 first", "p2 first", "p1 rolls back"])
def test_a_join_completed_by_two_parents_at_once(race, order):
    client = race.client
    client.create_queue("q")
    client.submit("q", "parent", job_id="p1")
    client.submit("q", "parent", job_id="p2")
    client.submit("q", "child", job_id="c", depends_on=["p1", "p2"])
    fences = {"p1": claimed_fence(client, "q", "p1", "t1"), "p2": claimed_fence(client, "q", "p2", "t2")}
    first, second = ("p2", "p1") if order == "p2 first" else ("p1", "p2")

    holder = race.hold()
    assert holder.run(ops.complete(fences[first])) is True
    other = race.waiting(lambda c: c.complete(fences[second]))
    (holder.rollback if order == "p1 rolls back" else holder.commit)()
    assert answer(other) is True

    child = client.get_job("c")
    claim = client.claim_next(["q"], "w3", "t3")
    if order == "p1 rolls back":
        assert (child.status, child.blocked_by, claim) == ("pending", 1, None)
    else:
        assert (child.status, child.blocked_by, claim.task) == ("pending", 0, "child")


# dependency_fail.spec

@pytest.mark.parametrize("first", ["submit", "fail"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_a_parent_failing_while_its_dependent_is_submitted(race, first, first_ends):
    client = race.client
    client.create_queue("q")
    client.submit("q", "parent", job_id="p")
    fence = claimed_fence(client, "q", "p")

    def submit(c):
        return c.submit("q", "child", job_id="c", depends_on=["p"])

    def fail(c):
        return c.fail(fence, "boom", retry=False)

    holder = race.hold()
    if first == "submit":
        assert holder.run(ops.submit("q", "child", job_id="c", depends_on=["p"])) == "c"
        other = race.waiting(fail)
    else:
        assert holder.run(ops.fail(fence, "boom", False)) is True
        other = race.waiting(submit)
    getattr(holder, first_ends)()
    assert answer(other) == ("c" if first == "fail" else True)

    parent, child = client.get_job("p"), client.get_job("c")
    if first_ends == "commit":
        assert (parent.status, child.status, child.last_error) == ("failed", "cancelled", "dependency_failed")
    elif first == "submit":  # the dependent rolled back; the failure went ahead
        assert (parent.status, child) == ("failed", None)
    else:  # the failure rolled back: the dependent waits on a claimed parent
        assert (parent.status, child.status) == ("claimed", "pending")


# claim_limits.spec

@pytest.mark.parametrize("limit", ["max_claimed", "max_claimed_per_key", "rate_limit"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_claimers_at_limit_minus_one(race, limit, first_ends):
    client = race.client
    client.create_queue("q")
    settings = {"max_claimed": {"max_claimed": 2}, "max_claimed_per_key": {"max_claimed_per_key": 2},
                "rate_limit": {"rate_limit": 2, "rate_period": timedelta(hours=1)}}[limit]
    client.set_queue_limits("q", **settings)
    for _ in range(3):
        client.submit("q", "k", concurrency_key="k")
    client.submit("q", "other", concurrency_key="other")
    assert client.claim_next(["q"], "w0", "t0") is not None

    holder = race.hold()
    assert holder.run(ops.claim_next(["q"], "w1", "t1")).task == "k"
    second = race.waiting(lambda c: c.claim_next(["q"], "w2", "t2"))
    getattr(holder, first_ends)()

    claim = answer(second)
    if first_ends == "rollback":
        assert claim.task == "k"
    elif limit == "max_claimed_per_key":  # key k is full: the next key's job
        assert claim.task == "other"
    else:
        assert claim is None
    [stats] = [s for s in client.stats() if s.queue == "q"]
    assert stats.claimed == (3 if (first_ends, limit) == ("commit", "max_claimed_per_key") else 2)


# named_lock.spec

@pytest.mark.parametrize("renewal", ["short", "long"])
def test_a_lock_acquired_while_its_hold_expires(race, renewal):
    assert race.client.acquire_lock("L", "a", LONG) == 1
    holder = race.hold()
    assert holder.run(ops.renew_lock("L", "a", 1, SHORT if renewal == "short" else LONG)) is True
    taker = race.waiting(lambda c: c.acquire_lock("L", "b", LONG))
    if renewal == "short":
        time.sleep(PAST_SHORT)
    holder.commit()
    if renewal == "short":
        assert answer(taker) == 2
        assert race.client.renew_lock("L", "a", 1, LONG) is False
    else:
        assert answer(taker) is None
        assert race.client.check_lock("L", 1) is True


def test_check_lock_holds_off_an_acquire_until_the_fenced_transaction_ends(race, sqlite_db):
    assert race.client.acquire_lock("L", "a", LONG) == 1
    fenced = sqlite3.connect(database_path(sqlite_db.url), isolation_level=None, timeout=10)
    try:
        fenced.execute("BEGIN IMMEDIATE")
        assert check_lock_in_transaction(fenced, "L", 1) is True
        # Differs from PostgreSQL in that the holder's renewal from another
        # connection would wait for the fenced transaction: it renews in it.
        assert run_in_transaction(fenced, ops.renew_lock("L", "a", 1, SHORT)) is True
        taker = race.waiting(lambda c: c.acquire_lock("L", "b", LONG))
        time.sleep(PAST_SHORT)  # the hold lapses during the fenced transaction
        assert check_lock_in_transaction(fenced, "L", 1) is False
        fenced.execute("COMMIT")
    finally:
        fenced.close()
    assert answer(taker) == 2


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_takers_of_a_released_lock(race, first_ends):
    assert race.client.acquire_lock("L", "a", LONG) == 1
    assert race.client.release_lock("L", "a", 1) is True
    first = race.hold()
    assert first.run(ops.acquire_lock("L", "b", LONG)) == 2
    second = race.waiting(lambda c: c.acquire_lock("L", "c", LONG))
    getattr(first, first_ends)()
    assert answer(second) == (None if first_ends == "commit" else 2)


# cancel_matching_vs_claim.spec

@pytest.mark.parametrize("variant,claim_ends,changed,status", [
    ("pending", "commit", 0, "claimed"),
    ("pending", "rollback", 1, "cancelled"),
    ("include_claimed", "commit", 1, "claimed"),
    ("force", "commit", 1, "cancelled"),
])
def test_cancel_matching_against_a_claim(race, variant, claim_ends, changed, status):
    client = race.client
    client.create_queue("q")
    client.submit("q", "task", {"kind": "x"}, job_id="j")
    worker = race.hold()
    claim = worker.run(ops.claim_next(["q"], "w", "t"))
    options = {"pending": {}, "include_claimed": {"include_claimed": True},
               "force": {"include_claimed": True, "force": True}}[variant]
    cancelling = race.waiting(lambda c: c.cancel_matching("q", payload_contains={"kind": "x"}, **options))
    getattr(worker, claim_ends)()

    assert answer(cancelling) == changed
    job = client.get_job("j")
    assert (job.status, job.cancel_requested) == (status, variant == "include_claimed")
    if claim_ends == "commit":
        assert client.heartbeat(claim.fence) is (variant != "force")


def test_a_claim_waiting_for_cancel_matching_finds_nothing(race):
    client = race.client
    client.create_queue("q")
    client.submit("q", "task", {"kind": "x"}, job_id="j")
    canceller = race.hold()
    assert canceller.run(ops.cancel_matching("q", None, {"kind": "x"}, False, False, 10_000)) == 1
    claim = race.waiting(lambda c: c.claim_next(["q"], "w", "t"))
    canceller.commit()
    assert answer(claim) is None
    job = client.get_job("j")
    assert (job.status, job.generation) == ("cancelled", 0)


# adopt_vs_finalize.spec

def dispatched_job(client: fenceq.Client) -> fenceq.Fence:
    """Job j claimed by w (generation 1) with a dispatch reserved under r1."""
    fence = one_claimed_job(client)
    assert client.reserve_dispatch(fence, "ext", "r1") is True
    return fence


def dispatch_state(client: fenceq.Client) -> tuple:
    job = client.get_job("j")
    dispatch = next((d for d in client.dispatches() if d.job_id == "j"), None)
    refs = (dispatch.state, dispatch.reservation_ref, dispatch.execution_ref) if dispatch else (None, None, None)
    return (job.status, job.generation, job.attempts, job.owner_id) + refs


def adopted(claim: Any) -> tuple | None:
    return None if claim is None else (claim.owner_id, claim.generation, claim.attempt)


@pytest.mark.parametrize("adoption_ends", ["commit", "rollback", "before"])
def test_a_late_finalize_against_an_adoption_of_its_lapsed_claim(race, adoption_ends):
    fence = dispatched_job(race.client)
    lapse(race.client, fence)

    if adoption_ends == "before":
        assert adopted(race.client.adopt_dispatch("j", "ext", "r1", "reconciler", "t2")) == ("reconciler", 2, 1)
        assert race.client.finalize_dispatch(fence, "r1", "x1") is False
    else:
        reconciler = race.hold()
        assert adopted(reconciler.run(ops.adopt_dispatch("j", "ext", "r1", "reconciler", "t2"))) == (
            "reconciler", 2, 1)
        finalize = race.waiting(lambda client: client.finalize_dispatch(fence, "r1", "x1"))
        getattr(reconciler, adoption_ends)()
        assert answer(finalize) is False  # also after the rollback: the lease lapsed

    owner = ("w", 1) if adoption_ends == "rollback" else ("reconciler", 2)
    assert dispatch_state(race.client) == ("claimed", owner[1], 1, owner[0], "reserved", "r1", None)


@pytest.mark.parametrize("finalize_ends", ["commit", "rollback"])
def test_an_adoption_against_a_finalize_that_came_in_time(race, finalize_ends):
    fence = dispatched_job(race.client)
    worker = in_time_past_the_lease(race, fence, ops.finalize_dispatch(fence, "r1", "x1"))
    adoption = race.waiting(lambda client: adopted(client.adopt_dispatch("j", "ext", "r1", "reconciler", "t2")))
    getattr(worker, finalize_ends)()

    if finalize_ends == "commit":  # the dispatch runs under another ref: nothing taken
        assert answer(adoption) is None
        assert dispatch_state(race.client) == ("claimed", 1, 1, "w", "running", "r1", "x1")
        assert adopted(race.client.adopt_dispatch("j", "ext", "x1", "reconciler", "t3")) == ("reconciler", 2, 1)
        assert dispatch_state(race.client) == ("claimed", 2, 1, "reconciler", "running", "r1", "x1")
    else:
        assert answer(adoption) == ("reconciler", 2, 1)
        assert dispatch_state(race.client) == ("claimed", 2, 1, "reconciler", "reserved", "r1", None)


# reap_vs_reserve.spec

def reserve_state(client: fenceq.Client) -> tuple:
    job = client.get_job("j")
    dispatch = next((d for d in client.dispatches() if d.job_id == "j"), None)
    candidate = sum(c.job_id == "j" for c in client.dispatch_repair_candidates("ext"))
    return (job.status, job.generation, job.last_error,
            dispatch and dispatch.state, dispatch and dispatch.reservation_ref, candidate)


@pytest.mark.parametrize("reservation_ends", ["commit", "rollback"])
def test_reap_against_a_reservation_made_in_time(race, reservation_ends):
    fence = one_claimed_job(race.client)
    worker = in_time_past_the_lease(race, fence, ops.reserve_dispatch(fence, "ext", "r1"))
    reaped = race.waiting(lambda client: client.reap())
    getattr(worker, reservation_ends)()

    if reservation_ends == "commit":  # the dispatched claim is reap's no more, lapsed or not
        assert answer(reaped) == ReapResult(0, 0, 0, 0)
        assert race.client.reap() == ReapResult(0, 0, 0, 0)
        assert reserve_state(race.client) == ("claimed", 1, None, "reserved", "r1", 1)
    else:
        # Differs from PostgreSQL (whose waiting reap passed over the row and
        # the next one requeues) in that the reap that waited requeues.
        assert answer(reaped) == ReapResult(1, 0, 0, 0)
        assert race.client.reap() == ReapResult(0, 0, 0, 0)
        assert reserve_state(race.client) == ("pending", 1, "lease_expired", None, None, 0)


@pytest.mark.parametrize("reap_ends", ["commit", "rollback", "before"])
def test_a_reservation_against_a_reap_of_its_lapsed_claim(race, reap_ends):
    fence = one_claimed_job(race.client)
    lapse(race.client, fence)

    if reap_ends == "before":
        assert race.client.reap() == ReapResult(1, 0, 0, 0)
        assert race.client.reserve_dispatch(fence, "ext", "r1") is False
    else:
        reaper = race.hold()
        assert reaper.run(ops.reap()) == ReapResult(1, 0, 0, 0)
        reservation = race.waiting(lambda client: client.reserve_dispatch(fence, "ext", "r1"))
        getattr(reaper, reap_ends)()
        assert answer(reservation) is False  # also after the rollback: the lease lapsed

    expected = ("claimed", 1, None) if reap_ends == "rollback" else ("pending", 1, "lease_expired")
    assert reserve_state(race.client) == expected + (None, None, 0)
