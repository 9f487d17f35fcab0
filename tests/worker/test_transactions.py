"""``ctx.transaction()`` (docs/transactions.md) on both backends: a handler's
own writes and follow-up jobs commit with its fenced completion, or not at
all. Real worker processes for the faults (SIGSTOP past the lease inside the
block, a cancel request), in-process workers for lost COMMIT answers. Every
test ends by counting the effect rows in the handler's own table: exactly
one per completed job, none for the others."""

from __future__ import annotations

import contextlib
import signal
from datetime import datetime, timezone

import pytest

import fenceq
from conftest import PATIENCE, SHORT_LEASE, async_wait_for, read_trace, running, wait_for
from fenceq.worker import App, Worker
from fq_worker_apps import LEDGER
from fq_worker_apps import app as tasks_app

SHORT = ("--lease", f"{SHORT_LEASE}s")
FAST = dict(reap_interval=0.2, poll_interval=0.05, control_poll=0.2, drain_timeout=2)
SIDE = "side"  # follow-up jobs go here: no worker serves it


@pytest.fixture
def ledger(db, work_queue):
    for statement in LEDGER:
        db.sql(statement)
    with db.connect() as client:
        client.create_queue(SIDE)
    return db


def effects(db) -> list[tuple[str, int]]:
    return sorted((job_id, generation) for job_id, generation, _ in db.sql("SELECT * FROM effects"))


def balances(db) -> dict[str, int]:
    return dict(db.sql("SELECT id, balance FROM accounts"))


def follow_ups(client) -> list[dict]:
    return [job.payload for job in client.pending_jobs(SIDE)]


def test_writes_follow_ups_and_completion_commit_together(ledger, work_queue, trace_file, spawn_worker):
    db = ledger
    with db.connect() as client:
        ids = [client.submit(work_queue, task, {"trace": str(trace_file), "follow_up": SIDE})
               for task in ("transfer", "atransfer", "transfer", "atransfer")]
        # An exception inside the block rolls it all back; the retry commits.
        retried = [client.submit(work_queue, task, {"trace": str(trace_file), "follow_up": SIDE, "fail_in": 1})
                   for task in ("transfer", "atransfer")]
        spawn_worker("a", concurrency=2)
        done = {job_id: wait_for(lambda j=job_id: (x := client.get_job(j)).status == "completed" and x,
                                 what=f"{job_id} completes") for job_id in ids + retried}
        assert [done[j].generation for j in ids] == [1, 1, 1, 1]
        assert [done[j].generation for j in retried] == [2, 2]
        assert all("trouble inside the transaction" in done[j].last_error for j in retried)
        assert done[ids[0]].result["gen"] == 1 and done[ids[1]].result == {"gen": 1, "async": True}
        assert effects(db) == sorted([(j, 1) for j in ids] + [(j, 2) for j in retried])
        assert balances(db) == {"alice": 1000 - 60, "bob": 60}
        assert sorted((p["after"], p["gen"]) for p in follow_ups(client)) == sorted(
            [(j, 1) for j in ids] + [(j, 2) for j in retried])


def test_frozen_past_its_lease_inside_the_block_writes_nothing(ledger, work_queue, trace_file, tmp_path,
                                                                spawn_worker):
    db = ledger
    hold = tmp_path / "hold-in"
    # Direct, not through PgBouncer: while a's frozen transaction and b's
    # blocked one each pin a server connection, a pool of two has none left.
    with db.connect_direct() as client:
        job_id = client.submit(work_queue, "transfer", {"trace": str(trace_file), "follow_up": SIDE,
                                                        "hold_in": str(hold)})
        a = spawn_worker("a", "--no-reap", *SHORT)
        wait_for(lambda: any(e["event"] == "written" for e in read_trace(trace_file)),
                 what="a writes inside its transaction")
        a.signal(signal.SIGSTOP)  # inside the block, its writes uncommitted (on SQLite: holding the write lock)
        b = spawn_worker("b")
        if db.backend == "postgres":
            # b takes the job over; its transfer waits for the rows a's open transaction locked.
            wait_for(lambda: len(client.attempts(job_id)) == 2, what="b claims the job")
        else:
            # Differs from PostgreSQL in that nobody can write while a holds the write lock:
            # wait (on the machine's clock, which is the database's) until a's lease lapsed.
            lease_end = client.get_job(job_id).lease_expires_at
            wait_for(lambda: datetime.now(timezone.utc) > lease_end, what="a's lease lapses")
        hold.touch()
        a.signal(signal.SIGCONT)
        assert a.wait_event("lease_lost", job_id=job_id)
        done = wait_for(lambda: (j := client.get_job(job_id)).status == "completed" and j,
                        what="b completes the job")
        assert done.generation == 2
        # On SQLite a, awake again, may claim the job anew as well as b.
        owner = {"a": a, "b": b}[done.owner_id]
        assert owner is b or db.backend == "sqlite"
        assert owner.wait_event("completed", job_id=job_id)["in_transaction"] is True
        assert not a.find("completed", job_id=job_id, generation=1)
        assert effects(db) == [(job_id, 2)]
        assert balances(db) == {"alice": 990, "bob": 10}
        assert [(p["after"], p["gen"]) for p in follow_ups(client)] == [(job_id, 2)]
        assert [e["event"] for e in read_trace(trace_file) if e["gen"] == 1] == ["start", "written"]
        a.signal(signal.SIGTERM)
        assert a.wait() == 0


def test_cancel_requested_before_the_commit_rolls_the_block_back(ledger, work_queue, trace_file, tmp_path,
                                                                  spawn_worker):
    db = ledger
    hold = tmp_path / "hold"
    # On PostgreSQL the cancel lands while the block is open; on SQLite no
    # other write can (the block holds the write lock), so it lands just before.
    where = "hold_in" if db.backend == "postgres" else "hold_before"
    with db.connect() as client:
        job_id = client.submit(work_queue, "transfer", {"trace": str(trace_file), "follow_up": SIDE,
                                                        where: str(hold)})
        a = spawn_worker("a")
        reached = "written" if where == "hold_in" else "start"
        wait_for(lambda: any(e["event"] == reached for e in read_trace(trace_file)), what="a reaches the hold")
        assert client.cancel(job_id) == "cancel_requested"
        hold.touch()
        done = wait_for(lambda: (j := client.get_job(job_id)).status == "cancelled" and j,
                        what="the worker acknowledges the cancel")
        assert done.generation == 1
        assert a.wait_event("transaction_rolled_back", job_id=job_id)
        assert a.wait_event("cancelled", job_id=job_id)
        assert effects(db) == [] and balances(db) == {"alice": 1000, "bob": 0} and follow_ups(client) == []
        assert "committed" not in [e["event"] for e in read_trace(trace_file)]


# Lost answers to COMMIT (in-process, as the other lost-acknowledgement tests) ---------

class LoseCommitAnswer:
    """Wraps the worker's clients: the first transaction that reaches its
    COMMIT commits and then raises PersistenceFailed, as if the connection
    dropped before the answer came back; with ``before=True`` it raises
    instead of committing (the connection dropped before COMMIT arrived)."""

    def __init__(self, before: bool = False):
        self.before, self.hits = before, 0

    def __call__(self, client):
        faults = self

        class Wrapped:
            def __getattr__(self, name):
                return getattr(client, name)

            @contextlib.asynccontextmanager
            async def transaction(self, **options):
                async with client.transaction(**options) as tx:
                    yield tx
                    if faults.before and not faults.hits:
                        faults.hits += 1
                        raise fenceq.PersistenceFailed()
                if not faults.before and not faults.hits:
                    faults.hits += 1
                    raise fenceq.PersistenceFailed()

        return Wrapped()


@pytest.mark.parametrize("task", ["transfer", "atransfer"])
@pytest.mark.parametrize("before", [False, True], ids=["answer-lost", "never-committed"])
async def test_lost_commit_answer_is_settled_by_the_job_row(ledger, work_queue, trace_file, task, before):
    db = ledger
    faults = LoseCommitAnswer(before)
    client = await db.connect_async()
    try:
        job_id = await client.submit(work_queue, task, {"trace": str(trace_file), "follow_up": SIDE})
        worker = Worker(tasks_app, url=db.url, queues=[work_queue], wrap_client=faults, **FAST)
        async with running(worker):
            done = await async_wait_for(lambda: _completed(client, job_id), PATIENCE, "the job completes")
        assert faults.hits == 1
        # Answer lost: the job row shows this claim's completion, so the writes landed
        # too. Never committed: the handler saw PersistenceFailed and the retry committed.
        assert done.generation == (2 if before else 1)
        assert worker.counts["completed"] == 1 and worker.counts["refused"] == 0
        assert effects(db) == [(job_id, done.generation)]
        assert balances(db) == {"alice": 990, "bob": 10}
        assert [(p["after"], p["gen"]) for p in [j.payload for j in await client.pending_jobs(SIDE)]] == [(job_id, done.generation)]
    finally:
        await client.close()


async def _completed(client, job_id):
    job = await client.get_job(job_id)
    return job if job.status == "completed" else None


async def test_a_result_that_cannot_be_stored_fails_without_retry_and_writes_nothing(ledger, work_queue):
    db = ledger
    app = App(queues=[work_queue])

    @app.task("unstorable")
    async def unstorable(ctx):
        async with ctx.transaction() as tx:
            await tx.execute("INSERT INTO effects VALUES ('unstorable', 1, 1)")
            tx.result = {"not json": object()}

    client = await db.connect_async()
    try:
        job_id = await client.submit(work_queue, "unstorable")
        async with running(Worker(app, url=db.url, **FAST)):
            job = await async_wait_for(lambda: _failed(client, job_id), PATIENCE, "the job fails")
        assert job.attempts == 1 and "could not be stored" in job.last_error
        assert effects(db) == []
    finally:
        await client.close()


async def _failed(client, job_id):
    job = await client.get_job(job_id)
    return job if job.status == "failed" else None


def test_transaction_of_a_client_on_your_own_connection_is_refused(pg):
    import psycopg

    with psycopg.connect(pg.url) as conn, fenceq.connect(connection=conn) as client:
        with pytest.raises(fenceq.ConfigError), client.transaction():
            pass
