"""Concurrency on PostgreSQL with real concurrent sessions (docs/guarantees.md §1, §3, §5)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest

import fenceq
from helpers import wait_until_past


def _drain(pg, queue: str, owner: str) -> list[str]:
    taken = []
    with pg.connect() as client:
        while (c := client.claim_next([queue], owner, fenceq.new_claim_token())) is not None:
            taken.append(c.job_id)
            assert client.complete(c.fence)
    return taken


def test_concurrent_claimers_never_share_a_job(pg):
    with pg.connect() as client:
        client.create_queue("q")
        ids = client.submit_batch("q", [{"task": str(i)} for i in range(400)])
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: _drain(pg, "q", f"w{n}"), range(8)))
    taken = [job_id for result in results for job_id in result]
    assert sorted(taken) == sorted(ids)
    assert sum(1 for r in results if r) > 1  # the work really was spread


def test_concurrent_claim_batches_never_share_a_job(pg):
    def drain(owner: str) -> list[str]:
        taken = []
        with pg.connect() as client:
            while claims := client.claim_batch(["q"], owner, [fenceq.new_claim_token() for _ in range(5)]):
                taken.extend(c.job_id for c in claims)
                assert client.complete_batch([c.fence for c in claims]) == [True] * len(claims)
        return taken

    with pg.connect() as client:
        client.create_queue("q")
        ids = client.submit_batch("q", [{"task": str(i)} for i in range(400)])
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(drain, [f"w{n}" for n in range(8)]))
    taken = [job_id for result in results for job_id in result]
    assert sorted(taken) == sorted(ids)
    assert sum(1 for r in results if r) > 1  # the work really was spread


@pytest.mark.parametrize("call", ["claim_next", "claim_batch"])
def test_claimers_skip_a_locked_row_instead_of_waiting(pg, call):
    """Another session holds the head job's row lock: the claim takes the
    next job at once. Either the claim returns, or it is seen waiting on a
    lock (pg_stat_activity), which fails the test; no timing is assumed."""
    claims = {
        "claim_next": lambda c: [c.claim_next(["q"], "w", fenceq.new_claim_token())],
        "claim_batch": lambda c: c.claim_batch(["q"], "w", [fenceq.new_claim_token(), fenceq.new_claim_token()]),
    }
    with pg.connect() as client:
        client.create_queue("q")
        first = client.submit("q", "a", priority=1)
        second = client.submit("q", "b")
    outcome = {}

    def claim_while_locked():
        with pg.connect() as claimer:
            outcome["claimed"] = [c.job_id for c in claims[call](claimer)]

    with psycopg.connect(pg.url) as locker:
        locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (first,))
        thread = threading.Thread(target=claim_while_locked)
        thread.start()
        waiting = ("SELECT count(*) FROM pg_stat_activity"
                   " WHERE wait_event_type = 'Lock' AND datname = current_database()")
        with psycopg.connect(pg.url, autocommit=True) as watcher:  # a fresh snapshot per poll
            while thread.is_alive() and watcher.execute(waiting).fetchone()[0] == 0:
                time.sleep(0.01)
            waited = thread.is_alive()
        locker.rollback()  # frees a claim that waited, so the thread ends
    thread.join(30)
    assert not waited, "the claim waited for the locked row instead of skipping it"
    assert outcome["claimed"] == [second]


def test_a_lock_wait_past_lease_expiry_refuses_the_write(pg):
    """Another session holds the row lock while the lease lapses: the waiting
    complete must judge the lease after it gets the lock, and refuse."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c = client.claim_next(["q"], "w", fenceq.new_claim_token(), lease=timedelta(seconds=1))
        assert c is not None
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (c.job_id,))

            def complete_while_blocked():
                with pg.connect() as writer:
                    outcome["complete"] = writer.complete(c.fence, {"late": True})

            thread = threading.Thread(target=complete_while_blocked)
            thread.start()
            time.sleep(0.3)
            assert thread.is_alive(), "complete should be waiting for the row lock"
            wait_until_past(c.lease_expires_at)
            locker.commit()
        thread.join(10)
        assert outcome == {"complete": False}
        job = client.get_job(c.job_id)
        assert job.status == "claimed" and job.result is None


def test_concurrent_force_submissions_leave_exactly_one_active_job(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t", active_key="k")

    def force(n: int) -> list[str]:
        with pg.connect() as c:
            return [c.submit("q", "t", active_key="k", force=True, submission_id=f"s{n}-{i}")
                    for i in range(10)]

    with ThreadPoolExecutor(6) as pool:
        ids = [job_id for batch in pool.map(force, range(6)) for job_id in batch]
    assert len(set(ids)) == 60
    rows = pg.sql("SELECT status, count(*) FROM fenceq._jobs WHERE active_key = 'k' GROUP BY status")
    assert dict(rows) == {"pending": 1, "cancelled": 60}


def test_old_force_request_replayed_during_a_replacement_cancels_nothing(pg):
    """An identical request that commits after the replay's first lookup is
    caught under the lock: the retry returns its id and no successor dies."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t", active_key="k")
    request = dict(active_key="k", force=True, submission_id="force-1")
    with psycopg.connect(pg.url) as original_conn:
        original = fenceq.connect(connection=original_conn).submit("q", "t", **request)  # uncommitted
        replay = {}

        def retry():
            with pg.connect() as c:
                replay["id"] = c.submit("q", "t", **request)

        thread = threading.Thread(target=retry)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive(), "the retry should wait for the original"
        original_conn.commit()
    thread.join(10)
    assert replay["id"] == original
    rows = pg.sql("SELECT job_id, status FROM fenceq._jobs WHERE active_key = 'k' AND status = 'pending'")
    assert rows == [(original, "pending")]


def test_a_replay_racing_a_newer_force_never_cancels_the_successor(pg):
    with pg.connect() as client:
        client.create_queue("q")
        first = client.submit("q", "t", active_key="k", force=True, submission_id="old")
    stop = threading.Event()
    answers = []

    def replay_old():
        with pg.connect() as c:
            while not stop.is_set():
                answers.append(c.submit("q", "t", active_key="k", force=True, submission_id="old"))

    thread = threading.Thread(target=replay_old)
    thread.start()
    try:
        with pg.connect() as c:
            successors = [c.submit("q", "t", active_key="k", force=True, submission_id=f"new{i}")
                          for i in range(20)]
    finally:
        stop.set()
        thread.join(10)
    assert answers and set(answers) == {first}
    with pg.connect() as c:
        assert c.get_job(successors[-1]).status == "pending"
        assert all(c.get_job(s).status == "cancelled" for s in successors[:-1])


def test_batches_in_opposite_orders_do_not_deadlock(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": str(i)} for i in range(50)])
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(50)])
    fences = [c.fence for c in claims]

    def beat(order):
        with pg.connect() as c:
            for _ in range(20):
                assert c.heartbeat_batch(order) == [True] * len(order)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(beat, [fences, fences[::-1]]))


def test_a_killed_backend_mid_claim_leaves_nothing_claimed(pg):
    with pg.connect() as client:
        client.create_queue("q")
        job_id = client.submit("q", "t")
        token = fenceq.new_claim_token()
        conn = psycopg.connect(pg.url)
        fenceq.connect(connection=conn).claim_next(["q"], "w", token)  # in an open transaction
        pg.sql("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()
        assert client.recover_claim("w", token) is None
        job = client.get_job(job_id)
        assert (job.status, job.generation) == ("pending", 0)
        # The token was never committed to the ledger, so it may be used now.
        assert client.claim_next(["q"], "w", token).job_id == job_id


def test_reapers_running_at_once_never_count_a_row_twice(pg):
    with pg.connect() as client:
        client.create_queue("q", backoff_base=timedelta(0))
        client.submit_batch("q", [{"task": str(i)} for i in range(60)])
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(60)],
                                    lease=timedelta(milliseconds=200))
    wait_until_past(max(c.lease_expires_at for c in claims))

    def reap(_):
        with pg.connect() as c:
            return c.reap(max_rows=7).requeued + c.reap(max_rows=100).requeued

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(reap, range(4))) == 60


def test_batches_with_shared_identities_in_opposite_orders_do_not_deadlock(pg):
    with pg.connect() as client:
        client.create_queue("q")

    def submit(reverse: bool) -> None:
        with pg.connect() as c:
            for i in range(40):
                requests = [{"task": "t", "active_key": key, "force": True} for key in ("k1", "k2", "k3")]
                c.submit_batch("q", requests[::-1] if reverse else requests)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(submit, [False, True]))
    rows = pg.sql("SELECT active_key, count(*) FROM fenceq._jobs WHERE status = 'pending' GROUP BY 1 ORDER BY 1")
    assert rows == [("k1", 1), ("k2", 1), ("k3", 1)]


FENCED_WRITES = {
    "complete": lambda client, fence: client.complete(fence, {"late": True}),
    "heartbeat": lambda client, fence: client.heartbeat(fence),
    "fail": lambda client, fence: client.fail(fence, "late"),
    "release": lambda client, fence: client.release(fence),
    "checkpoint": lambda client, fence: client.checkpoint(fence, "late", {"v": 1}),
    "heartbeat_batch": lambda client, fence: client.heartbeat_batch([fence])[0],
    "complete_batch": lambda client, fence: client.complete_batch([fence], [{"late": True}])[0],
}


@pytest.mark.parametrize("write", sorted(FENCED_WRITES))
def test_every_fenced_write_judges_the_lease_after_its_lock_wait(pg, write):
    """The writer is seen waiting on the row lock (pg_stat_activity) while
    the lease lapses; once it gets the lock it must refuse."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        c = client.claim_next(["q"], "w", fenceq.new_claim_token(), lease=timedelta(seconds=1))
        outcome = {}
        with psycopg.connect(pg.url) as locker:
            locker.execute("SELECT 1 FROM fenceq._jobs WHERE job_id = %s FOR UPDATE", (c.job_id,))

            def write_while_blocked():
                with pg.connect() as writer:
                    outcome[write] = FENCED_WRITES[write](writer, c.fence)

            thread = threading.Thread(target=write_while_blocked)
            thread.start()
            waiting = ("SELECT count(*) FROM pg_stat_activity"
                       " WHERE wait_event_type = 'Lock' AND datname = current_database()")
            with psycopg.connect(pg.url, autocommit=True) as watcher:  # a fresh snapshot per poll
                deadline = time.monotonic() + 30
                while watcher.execute(waiting).fetchone()[0] == 0:
                    assert time.monotonic() < deadline, "the write never waited for the row lock"
                    time.sleep(0.01)
            wait_until_past(c.lease_expires_at)
            locker.commit()
        thread.join(30)
        assert outcome[write] in (False, None)  # checkpoint answers NULL without a live fence
        job = client.get_job(c.job_id)
        assert (job.status, job.result, job.generation) == ("claimed", None, 1)
