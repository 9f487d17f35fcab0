"""In-process worker behaviour on both backends: lost acknowledgements,
checkpoints, retries and dead letters, cancellation, heartbeats, wake-ups.

Nothing here measures time: where a test once bounded an elapsed time, it
now waits for what only the behaviour under test can bring about (a
barrier all handlers must reach together, a worker whose idle waits never
time out, the database's own lease times). Exact schedules are the unit
tests' (tests/unit/, on a manual clock)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

import fenceq
from conftest import PATIENCE, SHORT_LEASE, async_wait_for, read_trace, running
from fenceq.backends import open_async_backend
from fenceq.worker import App, LeaseLost, Worker
from fenceq.worker.clock import SystemClock
from fenceq.worker.runtime import Runtime
from fq_worker_apps import app as tasks_app
from fq_worker_apps import trace

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


def recording_recoveries(faults: LoseAcks, recovered: list):
    """A wrap_client that loses the answers ``faults`` names and keeps, in
    ``recovered``, every claim recover_claims answers."""

    def wrap(client):
        wrapped = faults(client)
        original = client.recover_claims

        async def recover_claims(owner_id, claim_nonce):
            claims = await original(owner_id, claim_nonce)
            recovered.extend(claims)
            return claims

        wrapped.recover_claims = recover_claims
        return wrapped

    return wrap


async def job_of(client, job_id):
    return await client.get_job(job_id)


async def wait_status(client, job_id, status, timeout=PATIENCE):
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
    faults = LoseAcks({"claim_next", "claim_batch", "claim_jobs"})
    recovered = []
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], concurrency=concurrency,
                    wrap_client=recording_recoveries(faults, recovered), **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(aclient, job_id, "completed")
    assert faults.hits and recovered
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


def together_app(queue: str, jobs: int) -> App:
    """``together``: async handlers that return only once all ``jobs`` of them
    are running at once; they then return in one turn of the loop, so their
    completions queue up together."""
    app = App(queues=[queue])
    arrived: list[str] = []
    everyone = asyncio.Event()

    @app.task("together")
    async def together(ctx):
        trace(ctx, "start")
        one = await ctx.checkpoint("one", lambda: 1)
        arrived.append(ctx.job_id)
        if len(arrived) == jobs:
            everyone.set()
        await everyone.wait()
        return {"gen": ctx.generation, "async": True, "one": one}

    return app


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_lost_ack_on_complete_is_resolved_without_double_work(db, work_queue, aclient, trace_file,
                                                                    concurrency):
    ids = [await aclient.submit(work_queue, "together", {"trace": str(trace_file)}) for _ in range(concurrency)]
    faults = LoseAcks({"complete", "complete_batch"})
    # Completions go out as complete_batch (with 4 jobs, theirs queue up together in one).
    worker = Worker(together_app(work_queue, concurrency), url=db.url, concurrency=concurrency,
                    wrap_client=faults, **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(aclient, job_id, "completed")
    assert faults.hits == ["complete_batch"]
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
    """Four async handlers run at once on the loop: each returns only once all
    four are running."""
    ids = [await aclient.submit(work_queue, "together") for _ in range(4)]
    worker = Worker(together_app(work_queue, 4), url=db.url, concurrency=4, **FAST)
    async with running(worker):
        for job_id in ids:
            job = await wait_status(aclient, job_id, "completed")
            assert job.result == {"gen": 1, "async": True, "one": 1}


async def test_result_that_is_not_json_fails_the_job(db, work_queue, aclient):
    app = App(queues=[work_queue])
    app.task("bad")(lambda ctx: {"when": object()})
    job_id = await aclient.submit(work_queue, "bad")
    async with running(Worker(app, url=db.url, **FAST)):
        job = await wait_status(aclient, job_id, "failed")
    assert job.attempts == 1 and "could not be stored" in job.last_error


# Heartbeats and leases ------------------------------------------------------------

async def test_heartbeats_keep_a_job_past_its_lease(db, work_queue, aclient):
    """The handler runs until the database has renewed its lease at a time
    past the first lease's end, while a second worker reaps all along."""
    lease = timedelta(seconds=3)
    started = threading.Event()
    app = App(queues=[work_queue])

    @app.task("outlive")
    def outlive(ctx):
        with db.connect() as client:
            first_end = client.get_job(ctx.job_id).lease_expires_at
            started.set()
            while client.get_job(ctx.job_id).lease_expires_at < first_end + lease:
                time.sleep(0.05)
        return "outlived"

    job_id = await aclient.submit(work_queue, "outlive")
    first = Worker(app, url=db.url, owner_id="first", lease=lease, **FAST)
    second = Worker(app, url=db.url, owner_id="second", **FAST)
    async with running(first):
        await async_wait_for(started.is_set, what="first starts")
        async with running(second):
            job = await wait_status(aclient, job_id, "completed")
    assert (job.generation, job.owner_id) == (1, "first")
    assert len(await aclient.attempts(job_id)) == 1


async def test_lost_heartbeat_tells_the_handler_and_refuses_its_writes(db, work_queue, aclient):
    """The worker's heartbeats stop reaching the database (a partition): the
    lease lapses, another worker takes over; the handler sees fence_live turn
    false and its checkpoint after the takeover is refused."""
    seen = {}
    taken_over = threading.Event()
    app = App(queues=[work_queue])

    @app.task("watch")
    def watch(ctx):
        if ctx.generation > 1:
            taken_over.set()
            return "second"
        while ctx.fence_live:
            time.sleep(0.02)
        # fence_live turns false a little before the database's lease ends:
        # write only once another worker holds the job.
        taken_over.wait(60)
        try:
            ctx.checkpoint("late", lambda: 1)
        except LeaseLost:
            seen["checkpoint"] = "refused"
        seen["lost"] = ctx.lost.is_set()
        return "first"

    job_id = await aclient.submit(work_queue, "watch")
    cut = LoseAcks({"heartbeat", "heartbeat_batch"}, times=10**6, before=True)
    partitioned = Worker(app, url=db.url, owner_id="partitioned", wrap_client=cut, reap_interval=None,
                         poll_interval=0.05, lease=SHORT_LEASE)
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
        job = await wait_status(aclient, job_id, "cancelled")
    assert job.generation == 1
    assert [e["event"] for e in read_trace(trace_file)] == ["start", "saw_cancel"]
    assert worker.counts["cancelled"] == 1


async def test_force_cancel_kills_the_fence_and_tells_the_handler(db, work_queue, aclient, trace_file):
    job_id = await aclient.submit(work_queue, "cancellable", {"trace": str(trace_file)})
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        await async_wait_for(lambda: read_trace(trace_file), what="start")
        assert await aclient.cancel(job_id, force=True) == "cancelled"
        await async_wait_for(lambda: len(read_trace(trace_file)) == 2, what="handler told")
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

class WakeOnly(SystemClock):
    """Waits end only when their event is set: an idle claimer never polls."""

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        await event.wait()
        return True


class CountClaims:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, client):
        counter = self

        class Counted:
            def __getattr__(self, name):
                return getattr(client, name)

            async def claim_next(self, *args, **kwargs):
                counter.calls += 1
                return await client.claim_next(*args, **kwargs)

        return Counted()


async def test_notify_wakes_an_idle_worker(pg):
    """PostgreSQL: the worker's idle waits never time out, so only NOTIFY can
    wake it for each new job."""
    aclient = await pg.connect_async()
    await aclient.create_queue("wake", lease=timedelta(seconds=5))
    started: set[str] = set()
    app = App(queues=["wake"])

    @app.task("mark")
    async def mark(ctx):
        started.add(ctx.job_id)

    claims = CountClaims()
    settings = Worker(app, url=pg.url, reap_interval=None).settings
    runtime = Runtime(app, settings, open_backend=lambda: open_async_backend(pg.url), wrap_client=claims,
                      clock=WakeOnly())
    task = asyncio.create_task(runtime.run())
    try:
        await async_wait_for(lambda: runtime.started.is_set() and claims.calls, what="the worker idles")
        for _ in range(7):
            job_id = await aclient.submit("wake", "mark")
            await async_wait_for(lambda: job_id in started, what="a notification wakes the worker")
    finally:
        runtime.request_stop()
        await asyncio.wait_for(task, 60)
        await aclient.close()


async def test_idle_polling_is_bounded(db, work_queue, aclient, trace_file):
    """Without notifications (SQLite; PostgreSQL with notify off) an idle
    worker, backed off to its bound, still finds new work by polling. The
    bound itself: tests/unit (test_an_idle_worker_polls_no_less_often_than_poll_interval)."""
    await aclient.set_queue_notify(work_queue, False)
    claims = CountClaims()
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], poll_interval=0.2, reap_interval=None,
                    wrap_client=claims)
    async with running(worker):
        # 10, 20, 40, 80, 160 ms, then the 200 ms bound
        await async_wait_for(lambda: claims.calls > 6, what="the idle worker backs off to its bound")
        job_id = await aclient.submit(work_queue, "quick", {"trace": str(trace_file)})
        await wait_status(aclient, job_id, "completed")


async def test_retention_purge_runs_when_configured(db, work_queue, aclient):
    job_id = await aclient.submit(work_queue, "noop")
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], purge_after=timedelta(milliseconds=1),
                    purge_interval=0.1, **FAST)
    async with running(worker):
        # (not waiting for "completed": the purge may delete the job first)
        await async_wait_for(lambda: _gone(aclient, job_id), what="purge")
    assert worker.counts["completed"] == 1


async def _gone(client, job_id):
    return await client.get_job(job_id) is None


async def test_heartbeats_are_batched_across_in_flight_jobs(db, work_queue, aclient):
    """Three jobs claimed together are renewed together: each heartbeat call
    carries all three fences, never one call per job."""
    calls: list[tuple[str, int]] = []
    two_rounds = threading.Event()

    class Count:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            return getattr(self._client, name)

        def _seen(self, name: str, fences: int) -> None:
            calls.append((name, fences))
            if len(calls) >= 2:
                two_rounds.set()

        async def heartbeat(self, fence, **kw):
            self._seen("heartbeat", 1)
            return await self._client.heartbeat(fence, **kw)

        async def heartbeat_batch(self, fences, **kw):
            self._seen("heartbeat_batch", len(fences))
            return await self._client.heartbeat_batch(fences, **kw)

    app = App(queues=[work_queue])

    @app.task("wait_for_beats")
    def wait_for_beats(ctx):
        two_rounds.wait(60)
        return {"gen": ctx.generation}

    ids = [await aclient.submit(work_queue, "wait_for_beats") for _ in range(3)]
    worker = Worker(app, url=db.url, concurrency=3, wrap_client=Count, lease=timedelta(seconds=3), **FAST)
    async with running(worker):
        for job_id in ids:
            job = await wait_status(aclient, job_id, "completed")
            assert job.generation == 1
    assert calls[:2] == [("heartbeat_batch", 3)] * 2, calls


async def test_maintenance_samples_the_queues_activity(db, work_queue, aclient):
    """The charts' series (docs/observability.md) fills itself where a
    worker reaps: its maintenance calls sample_activity, which writes the
    last closed minute with the queue's depth."""
    async def sampled():
        buckets = await aclient.activity(queue=work_queue, since=timedelta(minutes=5))
        return any(bucket.pending is not None for bucket in buckets)

    assert not await sampled()
    worker = Worker(tasks_app, url=db.url, queues=[work_queue], **FAST)
    async with running(worker):
        await async_wait_for(sampled, what="the worker's maintenance samples activity")
