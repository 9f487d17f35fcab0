"""External execution under a fence with real concurrent sessions on
PostgreSQL (schema version 6, docs/design-v6.md; guarantees.md §19).

A fake external system counts every start it is asked for, by idempotency
key: whoever wins a race, the work of one reservation is started once. No
outcome here depends on timing: where a session must be waiting on a row
lock, it is seen waiting in pg_stat_activity; where sessions race freely,
every outcome the race can have is checked against the same invariant.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest

import fenceq
from helpers import wait_until_past

BACKEND = "fake-cluster"


class FakeExternal:
    """An external system that starts work once per idempotency key and
    counts every start request, including the repeated ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: collections.Counter = collections.Counter()
        self.started: dict[str, str] = {}

    def start(self, key: str) -> str:
        with self.lock:
            self.requests[key] += 1
            return self.started.setdefault(key, f"exec-{key}")

    def lookup(self, key: str) -> str | None:
        with self.lock:
            return self.started.get(key)

    def starts(self, key: str) -> int:
        return 1 if key in self.started else 0


def wait_for_lock_waiters(pg, count: int = 1) -> None:
    waiting = ("SELECT count(*) FROM pg_stat_activity"
               " WHERE wait_event_type = 'Lock' AND datname = current_database()")
    with psycopg.connect(pg.url, autocommit=True) as watcher:   # a fresh snapshot per poll
        deadline = time.monotonic() + 30
        while watcher.execute(waiting).fetchone()[0] < count:
            assert time.monotonic() < deadline, "the sessions never waited for the row lock"
            time.sleep(0.01)


def reserved_and_started(client, external, queue="q", lease=timedelta(minutes=10)):
    """A claim that reserved, asked the external system to start, and has
    not finalized yet (the old owner, about to be late)."""
    c = client.claim_next([queue], "old-owner", fenceq.new_claim_token(), lease=lease)
    ref = f"r-{c.job_id}"
    assert client.reserve_dispatch(c.fence, BACKEND, ref) is True
    external.start(ref)
    return c, ref


def reconcile(client, external, job_id, ref, owner="reconciler"):
    """What a reconciler does with a lapsed reserved dispatch: adopt, ask
    the external system about the reservation ref, finalize under its own
    fence (starting the work only when it never started). None when the
    adoption found nothing to take over."""
    adopted = client.adopt_dispatch(job_id, BACKEND, ref, owner, fenceq.new_claim_token())
    if adopted is None:
        return None
    execution = external.lookup(ref) or external.start(ref)
    assert client.finalize_dispatch(adopted.fence, ref, execution) is True
    return adopted


@pytest.mark.parametrize("lapsed", [True, False])
def test_adoption_and_a_late_finalize_waiting_on_one_row_exactly_one_wins(pg, lapsed):
    """Both wait on the job's row lock; the lease lapses while they wait (or
    not). Judged after the lock: a lapsed old fence finalizes nothing and
    the adoption wins; a live one finalizes and the adoption finds a live
    claim. Either way the work started once."""
    external = FakeExternal()
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c, ref = reserved_and_started(client, external, lease=timedelta(seconds=1) if lapsed else timedelta(hours=1))
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (c.job_id,))

            def late_finalize():
                with pg.connect() as old:
                    outcome["finalize"] = old.finalize_dispatch(c.fence, ref, external.lookup(ref))

            def adopt():
                with pg.connect() as reconciler:
                    outcome["adopt"] = reconciler.adopt_dispatch(c.job_id, BACKEND, ref, "reconciler",
                                                                 fenceq.new_claim_token())

            threads = [threading.Thread(target=late_finalize), threading.Thread(target=adopt)]
            for thread in threads:
                thread.start()
            wait_for_lock_waiters(pg, 2)
            if lapsed:
                wait_until_past(c.lease_expires_at)
            locker.commit()
        for thread in threads:
            thread.join(30)
        assert (outcome["finalize"] is True) != (outcome["adopt"] is not None), outcome
        assert outcome["finalize"] is (not lapsed)
        [row] = client.dispatches()
        if lapsed:
            assert (row.owner_id, row.generation, row.state) == ("reconciler", 2, "reserved")
            adopted = outcome["adopt"]
            assert client.finalize_dispatch(adopted.fence, ref, external.lookup(ref) or external.start(ref))
            assert client.finalize_dispatch(c.fence, ref, external.lookup(ref)) is False
        else:
            assert (row.owner_id, row.generation, row.state) == ("old-owner", 1, "running")
        assert client.dispatches()[0].execution_ref == f"exec-{ref}"
        assert external.requests[ref] == 1


def test_adoptions_racing_late_finalizes_start_each_work_once(pg):
    """Many jobs; for each, the old owner finalizes late, right as its lease
    lapses, while a reconciler keeps trying to adopt it. Exactly one of the
    two wins each job, and each reservation's work was asked for once."""
    jobs = 8
    external = FakeExternal()
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": "t"} for _ in range(jobs)])
        started = [reserved_and_started(client, external) for _ in range(jobs)]
        for c, _ in started:
            assert client.heartbeat(c.fence, lease=timedelta(milliseconds=300 + 20 * jobs))
        leases = {c.job_id: client.get_job(c.job_id).lease_expires_at for c, _ in started}

    def old_owner(item):
        c, ref = item
        with pg.connect() as old:
            wait_until_past(leases[c.job_id] - timedelta(milliseconds=60))   # about when it lapses
            return old.finalize_dispatch(c.fence, ref, external.lookup(ref))

    def reconciler(item):
        c, ref = item
        deadline = time.monotonic() + 60
        with pg.connect() as rc:
            while time.monotonic() < deadline:
                adopted = reconcile(rc, external, c.job_id, ref)
                if adopted is not None:
                    return adopted
                row = [d for d in rc.dispatches() if d.job_id == c.job_id]
                if row and row[0].state == "running":       # the old owner finalized in time
                    return None
                time.sleep(0.005)
        return "neither the adoption nor the late finalize won"

    with ThreadPoolExecutor(2 * jobs) as pool:
        finalized = pool.map(old_owner, started)
        adopted = pool.map(reconciler, started)
        finalized, adopted = list(finalized), list(adopted)
    with pg.connect() as client:
        rows = {d.job_id: d for d in client.dispatches()}
        for (c, ref), late, adoption in zip(started, finalized, adopted):
            assert adoption is None or isinstance(adoption, fenceq.Claim), (c.job_id, adoption)
            assert (late is True) != (adoption is not None), (c.job_id, late, adoption)
            row = rows[c.job_id]
            assert (row.state, row.reservation_ref, row.execution_ref) == ("running", ref, f"exec-{ref}")
            assert row.owner_id == ("old-owner" if late else "reconciler")
            assert external.requests[ref] == 1, ref


@pytest.mark.parametrize("write", ["reserve_dispatch", "finalize_dispatch", "release_dispatch",
                                   "replace_dispatch_ref"])
def test_every_dispatch_write_judges_the_lease_after_its_lock_wait(pg, write):
    """The writer is seen waiting on the row lock while the lease lapses;
    once it gets the lock it must refuse."""
    calls = {
        "reserve_dispatch": lambda c, f: c.reserve_dispatch(f, BACKEND, "r1"),
        "finalize_dispatch": lambda c, f: c.finalize_dispatch(f, "r1", "x1"),
        "release_dispatch": lambda c, f: c.release_dispatch(f, "r1"),
        "replace_dispatch_ref": lambda c, f: c.replace_dispatch_ref(f, "x1", "x2"),
    }
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c = client.claim_next(["q"], "w", fenceq.new_claim_token(), lease=timedelta(hours=1))
        if write != "reserve_dispatch":
            assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        if write == "replace_dispatch_ref":
            assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert client.heartbeat(c.fence, lease=timedelta(seconds=1)) is True
        lease = client.get_job(c.job_id).lease_expires_at
        before = (client.dispatches(), client.get_job(c.job_id))
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (c.job_id,))

            def write_while_blocked():
                with pg.connect() as writer:
                    outcome[write] = calls[write](writer, c.fence)

            thread = threading.Thread(target=write_while_blocked)
            thread.start()
            wait_for_lock_waiters(pg)
            wait_until_past(lease)
            locker.commit()
        thread.join(30)
        assert outcome[write] is False
        assert (client.dispatches(), client.get_job(c.job_id)) == before


def test_adoption_judges_the_lapse_after_its_lock_wait(pg):
    """The lease is live when the adoption is called and lapses while the
    adopter waits for the row lock: judged after the lock, the claim has
    lapsed and the adoption takes it."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c = client.claim_next(["q"], "w", fenceq.new_claim_token(), lease=timedelta(hours=1))
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.heartbeat(c.fence, lease=timedelta(seconds=1)) is True
        lease = client.get_job(c.job_id).lease_expires_at
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (c.job_id,))

            def adopt():
                with pg.connect() as reconciler:
                    outcome["adopt"] = reconciler.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler",
                                                                 fenceq.new_claim_token())

            thread = threading.Thread(target=adopt)
            thread.start()
            wait_for_lock_waiters(pg)
            wait_until_past(lease)
            locker.commit()
        thread.join(30)
        assert outcome["adopt"] is not None and outcome["adopt"].generation == 2
        assert client.heartbeat(c.fence) is False


def test_repair_candidates_skip_rows_another_session_holds(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": "t", "job_id": j} for j in ("a", "b")])
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token(), fenceq.new_claim_token()])
        for c in claims:
            assert client.reserve_dispatch(c.fence, BACKEND, f"r-{c.job_id}") is True
            assert client.heartbeat(c.fence, lease=timedelta(milliseconds=1)) is True
        wait_until_past(max(client.get_job(c.job_id).lease_expires_at for c in claims))
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._dispatches WHERE job_id = 'a' FOR UPDATE")
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = 'a' FOR UPDATE")

            def candidates():
                with pg.connect() as reconciler:
                    outcome["rows"] = [k.job_id for k in reconciler.dispatch_repair_candidates(BACKEND)]

            thread = threading.Thread(target=candidates)
            thread.start()
            waiting = ("SELECT count(*) FROM pg_stat_activity"
                       " WHERE wait_event_type = 'Lock' AND datname = current_database()")
            with psycopg.connect(pg.url, autocommit=True) as watcher:
                while thread.is_alive() and watcher.execute(waiting).fetchone()[0] == 0:
                    time.sleep(0.01)
                waited = thread.is_alive()
            locker.rollback()
        thread.join(30)
        assert not waited, "dispatch_repair_candidates waited for a row another session holds"
        assert outcome["rows"] == ["b"]
        assert [k.job_id for k in client.dispatch_repair_candidates(BACKEND)] == ["a", "b"]


def test_a_reservation_committed_while_reap_runs_keeps_its_job_from_reap(pg):
    """reap reads the lapsed claims (its snapshot), then locks and settles
    them one by one. A reservation made in time but committed after reap's
    read, before reap reaches its row, must still keep the job claimed: the
    reservation said true, so the external call is being made.

    To hold reap between its read and the job's row lock without timing,
    the first lapsed claim it settles fails for good and has a dependent
    whose row another session holds: reap waits there (seen in
    pg_stat_activity) while the reservation commits. Sixty other lapsed
    claims come before the job, so that its row is not among those reap
    locked before it began settling them."""
    with pg.connect() as client:
        client.create_queue("q", max_attempts=1, dead_letter=False)
        client.submit("q", "first", job_id="first")
        client.submit("q", "dependent", job_id="dependent", depends_on=["first"])
        client.submit_batch("q", [{"task": "filler"} for _ in range(60)])
        client.submit("q", "target", job_id="target")
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(62)],
                                    lease=timedelta(hours=1))
        by_id = {c.job_id: c for c in claims}
        assert "first" in by_id and "target" in by_id and "dependent" not in by_id
        order = [by_id["first"]] + [c for c in claims if c.job_id not in ("first", "target")]
        for c in order:                                   # lapse in this order, target last
            assert client.heartbeat(c.fence, lease=timedelta(milliseconds=1))
        target = by_id["target"]
        assert client.heartbeat(target.fence, lease=timedelta(seconds=3))
        with psycopg.connect(pg.url) as worker_conn, psycopg.connect(pg.url) as locker:
            worker = fenceq.connect(connection=worker_conn)
            assert worker.reserve_dispatch(target.fence, BACKEND, "r1") is True    # in time, not committed
            wait_until_past(client.get_job("target").lease_expires_at)
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = 'dependent' FOR UPDATE")
            outcome = {}

            def reap():
                with pg.connect() as reaper:
                    outcome["reap"] = reaper.reap()

            thread = threading.Thread(target=reap)
            thread.start()
            wait_for_lock_waiters(pg)                      # reap waits on the dependent's row
            worker_conn.commit()                           # the reservation commits
            locker.rollback()
        thread.join(60)
        job = client.get_job("target")
        assert (job.status, job.generation) == ("claimed", 1), (
            f"reap settled ({job.status}) a job whose reservation, answered true, committed while it ran")
        assert outcome["reap"].failed == 61
        assert [d.job_id for d in client.dispatches()] == ["target"]


@pytest.mark.parametrize("call", [
    "fenceq.reserve_dispatch('j', 'w', 0, 't', '', 'r1')",
    "fenceq.reserve_dispatch('j', 'w', 0, 't', 'ext', '')",
    "fenceq.finalize_dispatch('j', 'w', 0, 't', '', 'x1')",
    "fenceq.release_dispatch('j', '', 1, 't', '')",
    "fenceq.replace_dispatch_ref('j', 'w', 1, '', '', 'x2')",
])
def test_a_malformed_fence_is_qf106_before_anything_else_in_sql(pg, call):
    """design-v6.md: "a malformed fence raises QF106 before anything else,
    a bad name QF102" — called in SQL, not through the client (which checks
    the fence first on its own)."""
    with psycopg.connect(pg.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(f"SELECT {call}")
    assert info.value.sqlstate == "QF106"


def test_a_backend_name_is_at_most_255_characters_in_sql(pg):
    """design-v6.md: a backend is a name (1-255 characters, QF102 otherwise)."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c = client.claim_next(["q"], "w", fenceq.new_claim_token())
    with psycopg.connect(pg.url, autocommit=True) as conn:
        for call in ("SELECT fenceq.reserve_dispatch(%s, %s, %s, %s, %s, 'r1')",
                     "SELECT * FROM fenceq.dispatch_repair_candidates(%s)"):
            args = (c.job_id, c.owner_id, c.generation, c.claim_token, "b" * 256) if "reserve" in call \
                else ("b" * 256,)
            with pytest.raises(psycopg.Error) as info:
                conn.execute(call, args)
            assert info.value.sqlstate == "QF102", call
        assert conn.execute("SELECT count(*) FROM fenceq.dispatches").fetchone()[0] == 0
