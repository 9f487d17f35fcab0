"""Waiting for results (docs/guarantees.md §17) on both engines: a wait
returns the job another process finishes meanwhile, woken by fenceq_done
where the queue notifies (PostgreSQL) and by its polls everywhere else; it
times out with TimeoutError; and the notifications are sent exactly for the
terminal transitions of jobs whose queue has notify_done on.

No test measures time: the notification path is told apart from the poll
path by the waiter's own count, with polls made too rare to finish the wait
within the test's patience."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any, Callable

import psycopg
import pytest

import fenceq
from fenceq.backends import open_async_backend, open_backend
from fenceq.backends.protocol import DONE_CHANNEL
from fenceq.ops import Arg, Op
from fenceq.waiting import Waiter, WaitTimeout
from helpers import claim, payloads_until_barrier, raises_code, wait_until_past

PATIENCE = 60.0  # seconds: bounds a failure, never measured

# Completes the fence given in argv once the parent writes a line.
COMPLETER = r"""
import json, sys
import fenceq
url, fence = sys.argv[1], fenceq.Fence(**json.loads(sys.argv[2]))
sys.stdin.readline()
with fenceq.connect(url) as client:
    assert client.complete(fence, {"by": "child"})
"""


def until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + PATIENCE
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)
    return value


class Observed:
    """A backend whose reads the test can watch: the status each read of
    the job answered, in order."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.statuses: list[str | None] = []
        self.listeners = 0

    def run(self, op: Op) -> Any:
        job = self.backend.run(op)
        self.statuses.append(job and job.status)
        return job

    def listener(self, channels):
        self.listeners += 1
        return self.backend.listener(channels)


class AsyncObserved(Observed):
    async def run(self, op: Op) -> Any:
        job = await self.backend.run(op)
        self.statuses.append(job and job.status)
        return job


def completer(db, fence: fenceq.Fence) -> subprocess.Popen:
    parts = {"job_id": fence.job_id, "owner_id": fence.owner_id, "generation": fence.generation,
             "claim_token": fence.claim_token}
    return subprocess.Popen([sys.executable, "-c", COMPLETER, db.url, json.dumps(parts)],
                            stdin=subprocess.PIPE)


def listens(db) -> bool:
    """Whether a wait on this database listens: PostgreSQL, unless the test
    run sends the db fixture through PgBouncer (`make test-pgbouncer`),
    where a wait only polls."""
    pooler = os.environ.get("FENCEQ_TEST_PGBOUNCER_PORT")
    return db.backend == "postgres" and not (pooler and f":{pooler}/" in db.url)


def waiter_for(db, notify_done: bool) -> Waiter:
    """Where a notification must wake the wait, polls too rare to end it in time."""
    return Waiter(first_poll=3600.0) if listens(db) and notify_done else Waiter()


def reads_before_waiting(db) -> int:
    """The first read finds the job running; where the wait listens a second
    one follows the LISTEN, and a completion after it is heard."""
    return 2 if listens(db) else 1


def check_woken(db, waiter: Waiter, notify_done: bool, job: fenceq.Job | None, statuses: list) -> None:
    assert job is not None and (job.status, job.result) == ("completed", {"by": "child"})
    assert statuses[:reads_before_waiting(db)] == ["claimed"] * reads_before_waiting(db), "it did wait"
    assert waiter.notified == (1 if listens(db) and notify_done else 0)


def wait_while_a_process_completes(db, backend: Any, notify_done: bool, can_listen: bool = True) -> None:
    """Wait on ``backend`` for a job that a child process completes once the
    wait is waiting; check how the wait was woken."""
    expected_reads = reads_before_waiting(db) if can_listen else 1
    with db.connect() as client:
        client.create_queue("q")
        client.set_queue_notify_done("q", notify_done)
        job_id = client.submit("q", "t")
        child = completer(db, claim(client, "q").fence)
    observed = Observed(backend)
    waiter = waiter_for(db, notify_done) if can_listen else Waiter()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(waiter.wait, observed, job_id, PATIENCE)
        until(lambda: len(observed.statuses) >= expected_reads, "the wait is waiting")
        child.communicate(b"go\n", timeout=PATIENCE)
        job = waiting.result(PATIENCE)
    assert child.returncode == 0
    check_woken(db, waiter, notify_done and can_listen, job, observed.statuses)


@pytest.mark.parametrize("notify_done", [True, False], ids=["notify_done", "polling"])
def test_wait_returns_the_job_another_process_completes(db, notify_done):
    with contextlib.closing(open_backend(db.url)) as backend:
        wait_while_a_process_completes(db, backend, notify_done)


def test_a_client_on_a_pool_listens_on_a_connection_of_its_own(pg):
    """The pool's one connection stays free for the wait's reads."""
    from psycopg_pool import ConnectionPool

    with ConnectionPool(pg.url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool, \
            contextlib.closing(open_backend(pool=pool)) as backend:
        wait_while_a_process_completes(pg, backend, notify_done=True)


def test_a_client_on_the_callers_connection_polls(pg):
    with psycopg.connect(pg.url, autocommit=True) as connection, \
            contextlib.closing(open_backend(connection=connection)) as backend:
        with backend.listener([DONE_CHANNEL]) as listener:
            assert listener is None
        wait_while_a_process_completes(pg, backend, notify_done=True, can_listen=False)


@pytest.mark.parametrize("notify_done", [True, False], ids=["notify_done", "polling"])
async def test_async_wait_returns_the_job_another_process_completes(db, notify_done):
    client, backend = await db.connect_async(), await open_async_backend(db.url)
    try:
        await client.create_queue("q")
        await client.set_queue_notify_done("q", notify_done)
        job_id = await client.submit("q", "t")
        fence = (await client.claim_next(["q"], "w", fenceq.new_claim_token())).fence
        child = completer(db, fence)
        observed, waiter = AsyncObserved(backend), waiter_for(db, notify_done)
        waiting = asyncio.create_task(waiter.wait_async(observed, job_id, PATIENCE))
        deadline = time.monotonic() + PATIENCE
        while len(observed.statuses) < reads_before_waiting(db):
            assert time.monotonic() < deadline and not waiting.done()
            await asyncio.sleep(0.01)
        await asyncio.to_thread(child.communicate, b"go\n", PATIENCE)
        job = await asyncio.wait_for(waiting, PATIENCE)
    finally:
        await client.close()
        await backend.close()
    assert child.returncode == 0
    check_woken(db, waiter, notify_done, job, observed.statuses)


def test_a_wait_times_out_with_the_job_named(client):
    client.create_queue("q")
    job_id = client.submit("q", "t")
    with pytest.raises(TimeoutError) as info:
        client.wait(job_id, timeout=0.05)
    assert isinstance(info.value, WaitTimeout) and info.value.job_id == job_id
    assert job_id not in str(info.value)
    with pytest.raises(TimeoutError):
        client.submit_and_wait("q", "t", {"n": 1}, timeout=timedelta(0), priority=3)
    assert client.get_job(job_id).status == "pending", "waiting changes nothing"


async def test_an_async_wait_times_out(db):
    client = await db.connect_async()
    try:
        await client.create_queue("q")
        with pytest.raises(TimeoutError) as info:
            await client.submit_and_wait("q", "t", timeout=0.05)
        assert (await client.get_job(info.value.job_id)).status == "pending"
    finally:
        await client.close()


def test_a_finished_or_unknown_job_is_answered_without_listening(db):
    with db.connect() as client, contextlib.closing(open_backend(db.url)) as backend:
        client.create_queue("q")
        client.submit("q", "t")
        done = claim(client, "q")
        assert client.complete(done.fence, 7)
        observed = Observed(backend)
        job = Waiter().wait(observed, done.job_id, timeout=0)
        assert (job.status, job.result) == ("completed", 7)
        assert Waiter().wait(observed, "no-such-job") is None
        assert observed.listeners == 0 and observed.statuses == ["completed", None]
        assert client.wait(done.job_id).status == "completed"


@pytest.mark.parametrize("timeout", [-1, "1", True, timedelta(seconds=-1)])
def test_a_bad_timeout_is_refused(client, timeout):
    with raises_code("QF105"):
        client.wait("job", timeout=timeout)


def test_submit_and_wait_returns_the_finished_job(db):
    """A worker in another process would finish it; here the test does, on
    a thread, after the wait began."""
    with db.connect() as client:
        client.create_queue("q")
        client.set_queue_notify_done("q", True)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.submit_and_wait, "q", "t", {"n": 1}, timeout=PATIENCE,
                                  submission_id="s-1")
            with db.connect() as worker:
                work = until(lambda: worker.claim_next(["q"], "w", fenceq.new_claim_token()), "a job to claim")
                assert worker.complete(work.fence, {"n": 2})
            job = waiting.result(PATIENCE)
    assert (job.job_id, job.status, job.payload, job.result, job.submission_id) == (
        work.job_id, "completed", {"n": 1}, {"n": 2}, "s-1")


# The switch -------------------------------------------------------------------------

def test_set_queue_notify_done_answers_whether_the_flag_changed(client):
    client.create_queue("q")
    assert client.set_queue_notify_done("q", False) is False, "off by default"
    assert client.set_queue_notify_done("q", True) is True
    assert client.set_queue_notify_done("q", True) is False
    assert client.set_queue_notify_done("q", False) is True
    with raises_code("QF101"):
        client.set_queue_notify_done("nope", True)
    with raises_code("QF102"):
        client.set_queue_notify_done("", True)
    with raises_code("QF100"):
        client.set_queue_notify_done("q", 1)


@pytest.mark.parametrize("sqlstate, args", [
    ("QF102", (Arg("queue", "text", ""), Arg("notify", "boolean", True))),
    ("QF100", (Arg("queue", "text", "q"), Arg("notify", "boolean", None))),
    ("QF101", (Arg("queue", "text", "nope"), Arg("notify", "boolean", True))),
])
def test_the_sql_refuses_what_the_client_would(client, sqlstate, args):
    client.create_queue("q")
    with raises_code(sqlstate):
        client._backend.run(Op("set_queue_notify_done", args, "scalar", bool))
    assert client.set_queue_notify_done("q", True) is True, "nothing changed"


def test_notifications_follow_the_switch_and_every_terminal_transition(pg):
    short = timedelta(milliseconds=300)
    with pg.connect() as client, psycopg.connect(pg.url, autocommit=True) as listener:
        listener.execute("LISTEN fenceq_done")
        for queue in ("q", "quiet"):
            client.create_queue(queue, max_attempts=1, backoff_base=timedelta(0))
        quiet = client.submit("quiet", "t")
        assert client.complete(claim(client, "quiet").fence)
        early = client.submit("q", "t")
        assert client.complete(claim(client, "q").fence)
        assert payloads_until_barrier(listener, DONE_CHANNEL, "off") == [], "the switch is off by default"

        client.set_queue_notify_done("q", True)
        done = []
        done.append(client.submit("q", "t"))                                     # complete
        assert client.complete(claim(client, "q").fence)
        batch = [client.submit("q", "t") for _ in range(2)]                      # complete_batch
        done += batch
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in batch])
        assert client.complete_batch([c.fence for c in claims], [1, 2]) == [True, True]
        done.append(client.submit("q", "t", max_attempts=2))                     # fail, for good
        assert client.fail(claim(client, "q").fence, "retry first", retry=True)  # not terminal
        assert client.fail(claim(client, "q").fence, "and now for good", retry=False)
        done.append(client.submit("q", "t"))                                     # cancel, pending
        assert client.cancel(done[-1]) == "cancelled"
        done.append(client.submit("q", "t"))                                     # cancel, forced
        assert client.cancel(claim(client, "q").job_id, force=True) == "cancelled"
        done.append(client.submit("q", "t"))                                     # acknowledge_cancel
        acknowledged = claim(client, "q")
        assert client.cancel(acknowledged.job_id) == "cancel_requested"
        assert client.acknowledge_cancel(acknowledged.fence)
        done.append(client.submit("q", "bulk"))                                  # cancel_matching
        assert client.cancel_matching("q", task="bulk") == 1
        parent = client.submit("q", "t")                                         # a dependency that fails,
        child = client.submit("q", "t", depends_on=[parent])                     # its dependent cancelled
        grandchild = client.submit("quiet", "t", depends_on=[child])             # (another queue: silent)
        assert client.cancel(parent) == "cancelled"
        done += [parent, child]
        assert client.get_job(grandchild).status == "cancelled"
        done.append(client.submit("q", "t", active_key="k"))                     # forced replacement
        replacement = client.submit("q", "t", active_key="k", force=True)
        assert client.cancel(replacement) == "cancelled"
        done.append(replacement)
        released = client.submit("q", "t")                                       # release: not terminal
        assert client.release(claim(client, "q").fence)
        assert client.cancel(released) == "cancelled"
        done.append(released)
        done.append(client.submit("q", "t"))                                     # reap: failed
        lapsed = [claim(client, "q", lease=short)]
        done.append(client.submit("q", "t"))                                     # reap: cancelled
        lapsed.append(claim(client, "q", lease=short))
        assert client.cancel(lapsed[-1].job_id) == "cancel_requested"
        done.append(client.submit("q", "t", expires_at=lapsed[-1].lease_expires_at))  # reap: expired
        wait_until_past(max(c.lease_expires_at for c in lapsed))
        assert client.reap() == fenceq.ReapResult(requeued=0, failed=1, cancelled=1, expired=1)
        payloads = payloads_until_barrier(listener, DONE_CHANNEL, "on")
        statuses = {client.get_job(job_id).status for job_id in done}
    assert sorted(payloads) == sorted(done) and len(payloads) == len(done), "one per terminal transition"
    assert quiet not in payloads and early not in payloads and grandchild not in payloads
    assert statuses == {"completed", "failed", "cancelled", "expired"}
