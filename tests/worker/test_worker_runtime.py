"""In-process worker behaviour on both backends: lost acknowledgements,
checkpoints, retries and dead letters, cancellation, heartbeats, wake-ups."""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import timedelta

import pytest

import fenceq
from conftest import async_wait_for, read_trace, running
from fenceq.worker import App, LeaseLost, Worker
from fq_worker_apps import app as tasks_app

FAST = dict(reap_interval=0.2, poll_interval=0.05, control_poll=0.2, drain_timeout=2)


class LoseAcks:
    """Wraps an AsyncClient: the named calls run (and commit) and then raise
    PersistenceFailed, as if the connection dropped before the answer came
    back. ``before=True`` raises instead of sending (the call never ran)."""

    def __init__(self, names: set[str], times: int = 1, before: bool = False):
        self.names, self.times, self.before, self.hits = set(names), times, before, []

    def __call__(self, client):
        return _Wrapped(client, self)


class _Wrapped:
    def __init__(self, client, faults: LoseAcks):
        self._client, self._faults = client, faults

    def __getattr__(self, name):
        attribute = getattr(self._client, name)
        faults = self._faults
        if name not in faults.names:
            return attribute

        async def call(*args, **kwargs):
            if faults.times > 0:
                faults.times -= 1
                faults.hits.append(name)
                if not faults.before:
                    await attribute(*args, **kwargs)
                raise fenceq.PersistenceFailed()
            return await attribute(*args, **kwargs)

        return call


async def job_of(client, job_id):
    return await client.get_job(job_id)


async def wait_status(client, job_id, status, timeout=10.0):
    return await async_wait_for(
        lambda: _status_is(client, job_id, status), timeout, f"job {job_id} to become {status}")


async def _status_is(client, job_id, status):
    job = await client.get_job(job_id)
    return job if job is not None and job.status == status else None


@pytest.fixture
async def aclient(db):
    client = await db.connect_async()
    yield client
    await client.close()


# Lost acknowledgements -----------------------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 3])
async def test_lost_ack_on_claim_is_recovered_with_the_same_nonce(db, work_queue, aclient, trace_file,
                                                                   concurrency):
    ids = [await aclient.submit(work_queue, "quick", {"trace": str(trace_file)}) for _ in range(concurrency)]
    faults = LoseAcks({"claim_next", "claim_batch"})
    recovered = []
    faults_wrap = faults

    def wrap(client):
        wrapped = faults_wrap(client)
        original = client.recover_claim

        async def recover_claim(owner_id, claim_token):
            claim = await original(owner_id, claim_token)
            recovered.append(claim)
            return claim

        wrapped.recover_claim = recover_claim
        return wrapped

    worker = Worker(tasks_app, url=db.url, queues=[work_queue], concurrency=concurrency, wrap_client=wrap, **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(aclient, job_id, "completed")
    assert faults.hits and recovered and all(c is not None for c in recovered)
    assert worker.counts["recovered_claims"] == len(recovered)
    for job_id in ids:
        job = await aclient.get_job(job_id)
        assert job.generation == 1 and job.attempts == 1, "no second claim for an uncertain one"
        assert [a.generation for a in await aclient.attempts(job_id)] == [1]
    assert sorted(e["job"] for e in read_trace(trace_file) if e["event"] == "start") == sorted(ids)


async def test_claim_that_never_ran_is_not_recovered_and_work_goes_on(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "quick", {"trace": str(trace_file)})
    faults = LoseAcks({"claim_next"}, before=True)
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], wrap_client=faults, **FAST)
    async with running(worker):
        job = await wait_status(aclient, job_id, "completed")
    assert faults.hits == ["claim_next"]
    assert job.generation == 1 and worker.counts["recovered_claims"] == 0


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_lost_ack_on_complete_is_resolved_without_double_work(db, work_queue, aclient, trace_file,
                                                                    concurrency):
    ids = [await aclient.submit(work_queue, "quick", {"trace": str(trace_file), "seconds": 0.05})
           for _ in range(concurrency)]
    faults = LoseAcks({"complete", "complete_batch"})
    # With 4 jobs, a 0.2 s window gathers their completions into one complete_batch.
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], concurrency=concurrency,
                    wrap_client=faults, complete_window=0.2 if concurrency > 1 else 0.0, **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(aclient, job_id, "completed")
    assert faults.hits == ["complete" if concurrency == 1 else "complete_batch"]
    assert worker.counts["completed"] == concurrency and worker.counts["refused"] == 0
    for job_id in ids:
        job = await aclient.get_job(job_id)
        assert job.generation == 1 and job.result["gen"] == 1
    assert len([e for e in read_trace(trace_file) if e["event"] == "start"]) == concurrency


# Outcomes, retries, checkpoints ---------------------------------------------------

async def test_exceptions_retry_and_checkpoints_are_not_redone(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "flaky", {"trace": str(trace_file), "failures": 1})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        job = await wait_status(aclient, job_id, "completed")
    assert job.generation == 2 and job.attempts == 2
    assert job.result == {"checkpoint": {"computed_by": 1}, "attempt": 2}
    assert "transient trouble on attempt 1" in job.last_error
    events = [e["event"] for e in read_trace(trace_file)]
    assert events.count("expensive") == 1, "the recorded step was not run again"
    assert worker.counts["retried"] == 1 and worker.counts["completed"] == 1


async def test_non_retryable_fails_at_once_and_dead_letters(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "broken", {"trace": str(trace_file)})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        job = await wait_status(aclient, job_id, "failed")
    assert job.attempts == 1 and job.dlq_id is not None
    assert job.last_error.startswith("NonRetryable: bad input")
    [letter] = await aclient.dead_letters(queue=work_queue)
    assert letter.job_id == job_id


async def test_unknown_task_fails_with_retry(db, work_queue, aclient):
    job_id = await aclient.submit(work_queue, "no-such-task")
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        job = await wait_status(aclient, job_id, "failed")
    assert job.attempts == 3 and "no handler for task 'no-such-task'" in job.last_error


async def test_async_handlers_and_checkpoints(db, work_queue, aclient):
    ids = [await aclient.submit(work_queue, "aquick", {"seconds": 0.2}) for _ in range(4)]
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], concurrency=4, **FAST)
    started = time.monotonic()
    async with running(worker):
        for job_id in ids:
            job = await wait_status(aclient, job_id, "completed")
            assert job.result == {"async": True, "one": 1}
    assert time.monotonic() - started < 3.0


async def test_result_that_is_not_json_fails_the_job(db, work_queue, aclient):
    app = App(queues=[work_queue])
    app.task("bad")(lambda ctx: {"when": object()})
    job_id = await aclient.submit(work_queue, "bad")
    async with running(Worker(app, url=db.url, **FAST)):
        job = await wait_status(aclient, job_id, "failed")
    assert job.attempts == 1 and "could not be stored" in job.last_error


# Heartbeats and leases ------------------------------------------------------------

async def test_heartbeats_keep_a_job_past_its_lease(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "slow", {"trace": str(trace_file), "seconds": 2.5})
    first = Worker(tasks_app, url=db.url, queues=[work_queue], owner_id="first", **FAST)
    second = Worker(tasks_app, url=db.url, queues=[work_queue], owner_id="second", **FAST)
    async with running(first):
        await async_wait_for(lambda: read_trace(trace_file), what="first starts")
        async with running(second):
            job = await wait_status(aclient, job_id, "completed")
    assert (job.generation, job.owner_id) == (1, "first")
    assert len(await aclient.attempts(job_id)) == 1


async def test_lost_heartbeat_tells_the_handler_and_refuses_its_writes(db, work_queue, aclient):
    """The worker's heartbeats stop reaching the database (a partition): the
    lease lapses, another worker takes over; the handler sees fence_live turn
    false and its later checkpoint is refused."""
    seen = {}
    app = App(queues=[work_queue])

    @app.task("watch")
    def watch(ctx):
        if ctx.generation > 1:
            return "second"
        while ctx.fence_live:
            time.sleep(0.02)
        seen["told_after"] = time.monotonic()
        try:
            ctx.checkpoint("late", lambda: 1)
        except LeaseLost:
            seen["checkpoint"] = "refused"
        seen["lost"] = ctx.lost.is_set()
        return "first"

    job_id = await aclient.submit(work_queue, "watch")
    cut = LoseAcks({"heartbeat", "heartbeat_batch"}, times=10**6, before=True)
    partitioned = Worker(app, url=db.url, owner_id="partitioned", wrap_client=cut, reap_interval=None,
                         poll_interval=0.05)
    healthy = Worker(app, url=db.url, owner_id="healthy", **FAST)
    async with running(partitioned):
        await async_wait_for(lambda: _status_is(aclient, job_id, "claimed"), what="claimed")
        async with running(healthy):
            job = await wait_status(aclient, job_id, "completed")
            await async_wait_for(lambda: "lost" in seen, what="the first handler finishes")
    assert (job.generation, job.result) == (2, "second")  # whoever claimed it after the reap
    assert seen["checkpoint"] == "refused" and seen["lost"] is True
    assert partitioned.counts["refused"] >= 1


# Cancellation ---------------------------------------------------------------------

@pytest.mark.parametrize("task", ["cancellable", "acancellable"])
async def test_cancel_request_is_seen_and_acknowledged(db, work_queue, aclient, trace_file, task):
    job_id = await aclient.submit(work_queue, task, {"trace": str(trace_file)})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        await async_wait_for(lambda: read_trace(trace_file), what="start")
        assert await aclient.cancel(job_id) == "cancel_requested"
        job = await wait_status(aclient, job_id, "cancelled", timeout=5)
    assert job.generation == 1
    assert [e["event"] for e in read_trace(trace_file)] == ["start", "saw_cancel"]
    assert worker.counts["cancelled"] == 1


async def test_force_cancel_kills_the_fence_and_tells_the_handler(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "cancellable", {"trace": str(trace_file)})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        await async_wait_for(lambda: read_trace(trace_file), what="start")
        assert await aclient.cancel(job_id, force=True) == "cancelled"
        await async_wait_for(lambda: len(read_trace(trace_file)) == 2, timeout=5, what="handler told")
    [start, saw] = read_trace(trace_file)
    assert saw["event"] == "saw_cancel"
    assert (await aclient.get_job(job_id)).status == "cancelled"


# Drain ----------------------------------------------------------------------------

async def test_stop_releases_unfinished_async_handler(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "acancellable", {"trace": str(trace_file)})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **{**FAST, "drain_timeout": 0.3})
    async with running(worker):
        await async_wait_for(lambda: read_trace(trace_file), what="start")
    job = await aclient.get_job(job_id)
    assert (job.status, job.attempts, job.generation) == ("pending", 0, 1)
    assert worker.counts["released"] == 1


# Wake-ups, reap, purge --------------------------------------------------------------

async def test_notify_wakes_an_idle_worker_at_once(pg):
    """PostgreSQL: with polling set to 30 s, only NOTIFY can wake the worker."""
    aclient = await pg.connect_async()
    await aclient.create_queue("wake", lease=timedelta(seconds=5))
    starts: dict[str, float] = {}
    app = App(queues=["wake"])

    @app.task("mark")
    async def mark(ctx):
        starts[ctx.job_id] = time.monotonic()

    worker = Worker(app, url=pg.url, poll_interval=30, reap_interval=None)
    latencies = []
    async with running(worker):
        await asyncio.sleep(0.3)  # idle: the claim loop is asleep
        for _ in range(7):
            sent = time.monotonic()
            job_id = await aclient.submit("wake", "mark")
            await async_wait_for(lambda: job_id in starts, timeout=5, what="handler start", interval=0.001)
            latencies.append(starts[job_id] - sent)
            await asyncio.sleep(0.05)
    await aclient.close()
    assert statistics.median(latencies) < 0.1, latencies


async def test_idle_polling_is_bounded(db, work_queue, aclient, trace_file):
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], poll_interval=0.2, reap_interval=None)
    async with running(worker):
        await asyncio.sleep(0.6)  # long enough to back off to the bound
        sent = time.monotonic()
        job_id = await aclient.submit(work_queue, "quick", {"trace": str(trace_file)})
        await wait_status(aclient, job_id, "completed")
    assert time.monotonic() - sent < 1.0


async def test_retention_purge_runs_when_configured(db, work_queue, aclient):
    job_id = await aclient.submit(work_queue, "noop")
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], purge_after=timedelta(milliseconds=1),
                    purge_interval=0.1, **FAST)
    async with running(worker):
        # (not waiting for "completed": the purge may delete the job first)
        await async_wait_for(lambda: _gone(aclient, job_id), timeout=5, what="purge")
    assert worker.counts["completed"] == 1


async def _gone(client, job_id):
    return await client.get_job(job_id) is None


async def test_heartbeats_are_batched_across_in_flight_jobs(db, work_queue, aclient, trace_file):
    calls: list[tuple[str, int]] = []

    class Count:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            return getattr(self._client, name)

        async def heartbeat(self, fence, **kw):
            calls.append(("heartbeat", 1))
            return await self._client.heartbeat(fence, **kw)

        async def heartbeat_batch(self, fences, **kw):
            calls.append(("heartbeat_batch", len(fences)))
            return await self._client.heartbeat_batch(fences, **kw)

    ids = [await aclient.submit(work_queue, "slow", {"trace": str(trace_file), "seconds": 1.6})
           for _ in range(3)]
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], concurrency=3, wrap_client=Count, **FAST)
    async with running(worker):
        for job_id in ids:
            job = await wait_status(aclient, job_id, "completed")
            assert job.generation == 1
    batched = [n for name, n in calls if name == "heartbeat_batch"]
    assert batched and max(batched) == 3, calls
    assert sum(n for _, n in calls) <= 3 * 6  # about lease/3 each, never one call per job per tick
