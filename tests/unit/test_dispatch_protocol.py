"""External execution's runtime logic against an in-memory backend and a
manual clock: ``ctx.dispatch`` (reserve, call, finalize or release),
``fenceq.Dispatched``, and the ``Reconciler``'s decisions. The database's
own rules for these calls are tested on both engines
(tests/worker/test_dispatch_runtime.py and the conformance suite)."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

import fenceq
from fenceq.client import AsyncClient
from fenceq.testing.backend import MemoryBackend
from fenceq.testing.clock import ManualClock, until
from fenceq.types import new_claim_token
from fenceq.worker import App
from fenceq.worker.reconciler import Reconciled
from fenceq.worker.runtime import Runtime

from test_worker_protocols import STEP, clock, opener, settings_of, stopped  # noqa: F401 - a fixture

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "external_dispatch"))

from fake_service import FakeService  # noqa: E402
from render import BACKEND, reconciler_for  # noqa: E402

LEASE = 3.0  # seconds


@pytest.fixture
def fake(clock: ManualClock) -> MemoryBackend:
    return MemoryBackend(clock)


@pytest.fixture
def service() -> FakeService:
    return FakeService()


async def run_until(app: App, fake: MemoryBackend, clock: ManualClock, done: Callable[[Runtime], Any]) -> Runtime:
    """Run a worker until ``done(runtime)`` holds, then stop it."""
    runtime = Runtime(app, settings_of(lease=LEASE), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: done(runtime), clock, step=STEP)
    await stopped(runtime, task, clock)
    return runtime


def dispatched(runtime: Runtime) -> bool:
    return runtime.counts["dispatched"] > 0


def dispatching_app(service: FakeService, then=None) -> App:
    """A handler that dispatches its job to the service and returns what ``then`` makes of the ref."""
    app = App(queues=["q"])

    @app.task("t")
    async def dispatching(ctx):
        execution_ref = await ctx.dispatch(BACKEND, lambda key: service.start(key, ctx.job_id))
        return fenceq.Dispatched(execution_ref) if then is None else then(ctx, execution_ref)

    return app


# ctx.dispatch ----------------------------------------------------------------------

async def test_a_dispatched_job_stays_claimed_unrenewed_and_reap_leaves_it(fake, clock, service):
    job_id = fake.submit("t")
    runtime = await run_until(dispatching_app(service), fake, clock, dispatched)
    [work] = service.started_for(job_id)
    dispatch = fake.dispatch_rows[job_id]
    assert (dispatch.state, dispatch.reservation_ref, dispatch.execution_ref) == ("running", work.key, work.work_id)
    assert fake.rows[job_id].status == "claimed" and runtime.counts["dispatched"] == 1
    clock.advance(LEASE)  # nobody renews it: the lease lapses
    assert fake.reap().requeued == 0 and fake.rows[job_id].status == "claimed"
    assert [c.job_id for c in fake.dispatch_repair_candidates(BACKEND)] == [job_id]


async def test_a_thread_handler_dispatches_in_its_own_thread(fake, clock, service):
    app = App(queues=["q"])

    @app.task("t")
    def dispatching(ctx):
        return fenceq.Dispatched(ctx.dispatch(BACKEND, lambda key: service.start(key, ctx.job_id)))

    job_id = fake.submit("t")
    await run_until(app, fake, clock, dispatched)
    assert len(service.started_for(job_id)) == 1 and fake.dispatch_rows[job_id].state == "running"


async def test_a_call_that_raises_releases_its_reservation_and_the_job_retries(fake, clock, service):
    service.refuse_next()
    job_id = fake.submit("t")
    await run_until(dispatching_app(service), fake, clock, dispatched)
    refused, started = service.requests
    assert [call["reservation_ref"] for call in fake.called("release_dispatch")] == [refused]
    assert fake.rows[job_id].attempts == 2 and fake.dispatch_rows[job_id].reservation_ref == started
    assert [work.key for work in service.started_for(job_id)] == [started]


async def test_a_reservation_refused_after_a_cancel_request_cancels_the_job_unstarted(fake, clock, service):
    app = App(queues=["q"])

    @app.task("t")
    async def dispatching(ctx):
        fake.cancel(ctx.job_id)  # requested while the handler runs, before the worker hears of it
        return await ctx.dispatch(BACKEND, lambda key: service.start(key, ctx.job_id))

    job_id = fake.submit("t")
    await run_until(app, fake, clock, lambda _: fake.rows[job_id].status == "cancelled")
    assert service.requests == [] and job_id not in fake.dispatch_rows


async def test_a_reservation_refused_to_a_stale_fence_starts_nothing_and_writes_nothing(fake, clock, service):
    app = App(queues=["q"])

    @app.task("t")
    async def dispatching(ctx):
        fake.rows[ctx.job_id].claim_token = "taken-over"  # another claim holds the job now
        return await ctx.dispatch(BACKEND, lambda key: service.start(key, ctx.job_id))

    job_id = fake.submit("t")
    await run_until(app, fake, clock, lambda runtime: runtime.counts["lost"])
    assert service.requests == [] and job_id not in fake.dispatch_rows
    assert not fake.called("complete") and not fake.called("fail")


async def test_a_refused_finalize_leaves_the_reservation_for_the_reconciler(fake, clock, service):
    app = App(queues=["q"])

    @app.task("t")
    async def dispatching(ctx):
        def start(key):
            work_id = service.start(key, ctx.job_id)
            clock.advance(2 * LEASE)  # the call outlived the lease
            return work_id

        return fenceq.Dispatched(await ctx.dispatch(BACKEND, start))

    job_id = fake.submit("t")
    await run_until(app, fake, clock, lambda runtime: runtime.counts["lost"])
    dispatch = fake.dispatch_rows[job_id]
    assert (dispatch.state, dispatch.reservation_ref) == ("reserved", service.requests[0])
    assert fake.rows[job_id].status == "claimed", "never reaped, never failed"
    assert fake.reap().requeued == 0


async def test_a_handler_that_raises_after_dispatching_leaves_the_job_to_the_reconciler(fake, clock, service):
    def explode(ctx, execution_ref):
        raise RuntimeError("after the external call")

    job_id = fake.submit("t")
    await run_until(dispatching_app(service, explode), fake, clock, dispatched)
    assert fake.rows[job_id].status == "claimed" and not fake.called("fail")
    assert len(service.started_for(job_id)) == 1


async def test_dispatched_without_a_dispatch_fails_the_job_for_good(fake, clock):
    app = App(queues=["q"])

    @app.task("t")
    async def pretending(ctx):
        return fenceq.Dispatched("made-up")

    job_id = fake.submit("t")
    await run_until(app, fake, clock, lambda _: fake.rows[job_id].status == "failed")
    assert "without a dispatch" in fake.rows[job_id].last_error


# The reconciler ---------------------------------------------------------------------

def dispatched_job(fake: MemoryBackend, service: FakeService, *, started: bool, finalized: bool,
                   lease: float = LEASE) -> tuple[str, str]:
    """A job a crashed dispatcher left behind: claimed, reserved, maybe
    started and finalized. Its job id and reservation ref."""
    job_id = fake.submit("t")
    claim = fake.claim_next(["q"], "crashed", new_claim_token(), lease=timedelta(seconds=lease))
    key = f"key-{job_id}"
    assert fake.reserve_dispatch(*astuple(claim.fence), BACKEND, key)
    if started:
        work_id = service.start(key, job_id)
        if finalized:
            assert fake.finalize_dispatch(*astuple(claim.fence), key, work_id)
    return job_id, key


def astuple(fence: fenceq.Fence) -> tuple:
    return fence.job_id, fence.owner_id, fence.generation, fence.claim_token


def reconciler(fake: MemoryBackend, clock: ManualClock, service: FakeService, **options) -> fenceq.Reconciler:
    return reconciler_for(service, AsyncClient(fake), owner_id="reconciler", clock=clock, **options)


async def test_nothing_is_adopted_while_the_dispatching_claim_is_live(fake, clock, service):
    dispatched_job(fake, service, started=True, finalized=True)
    assert await reconciler(fake, clock, service).reconcile_once() == {}


async def test_a_reservation_the_service_never_saw_is_released_and_the_job_runs_again(fake, clock, service):
    job_id, _ = dispatched_job(fake, service, started=False, finalized=False)
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.RELEASED}
    row = fake.rows[job_id]
    assert (row.status, row.attempts) == ("pending", 0) and job_id not in fake.dispatch_rows


async def test_a_reservation_the_service_knows_is_finalized_and_left_running(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=False)
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.RUNNING}
    dispatch, row = fake.dispatch_rows[job_id], fake.rows[job_id]
    assert (dispatch.state, dispatch.execution_ref) == ("running", service.works[key].work_id)
    assert (row.status, row.owner_id, row.generation, row.attempts) == ("claimed", "reconciler", 2, 1)
    assert len(service.requests) == 1, "the reconciler never starts work"


async def test_finished_work_completes_the_job_with_its_result(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    service.finish(key, {"frames": 24})
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.COMPLETED}
    assert (fake.rows[job_id].status, fake.rows[job_id].result) == ("completed", {"frames": 24})


async def test_failed_work_fails_the_job(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    service.break_down(key, "out of memory")
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.FAILED}
    assert (fake.rows[job_id].status, fake.rows[job_id].last_error) == ("failed", "out of memory")


async def test_running_work_the_service_does_not_know_is_left_as_it_is(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    del service.works[key]  # the service lost its record
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.UNKNOWN}
    assert fake.rows[job_id].status == "claimed" and fake.dispatch_rows[job_id].state == "running"


async def test_running_work_is_checked_again_once_its_adopted_claim_lapses(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    clock.advance(LEASE)
    checker = reconciler(fake, clock, service, lease=LEASE)
    assert await checker.reconcile_once() == {job_id: Reconciled.RUNNING}
    assert await checker.reconcile_once() == {}, "the adopted claim is live"
    service.finish(key, "ok")
    clock.advance(LEASE)
    assert await checker.reconcile_once() == {job_id: Reconciled.COMPLETED}
    assert fake.rows[job_id].generation == 3 and fake.rows[job_id].attempts == 1


async def test_work_the_service_moved_gets_its_new_ref_recorded(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    moved_to = service.move(key)
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.RUNNING}
    assert fake.dispatch_rows[job_id].execution_ref == moved_to


async def test_a_cancel_request_stops_the_external_work_then_is_acknowledged(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    fake.cancel(job_id)
    clock.advance(LEASE)
    assert fake.reap().cancelled == 0, "reap leaves a dispatched job to the reconciler, cancel or not"
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.CANCELLED}
    assert service.works[key].state == "cancelled" and fake.rows[job_id].status == "cancelled"


async def test_a_poll_that_raises_leaves_the_adopted_claim_to_lapse(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    clock.advance(LEASE)
    failing = fenceq.Reconciler(AsyncClient(fake), BACKEND, lambda ref: 1 / 0, owner_id="r", clock=clock)
    assert await failing.reconcile_once() == {job_id: Reconciled.ERROR}
    service.finish(key)
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.COMPLETED}


async def test_a_reconciler_crashed_during_adoption_is_taken_over_after_its_lease(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    clock.advance(LEASE)
    [candidate] = fake.dispatch_repair_candidates(BACKEND)
    assert fake.adopt_dispatch(job_id, BACKEND, candidate.ref, "died", new_claim_token(),
                               lease=timedelta(seconds=LEASE)) is not None
    assert await reconciler(fake, clock, service).reconcile_once() == {}
    service.finish(key)
    clock.advance(LEASE)
    assert await reconciler(fake, clock, service).reconcile_once() == {job_id: Reconciled.COMPLETED}
    assert len(service.requests) == 1


async def test_run_reconciles_in_rounds_until_stopped(fake, clock, service):
    job_id, key = dispatched_job(fake, service, started=True, finalized=True)
    service.finish(key, 7)
    looping = reconciler(fake, clock, service, interval=1.0)
    task = asyncio.create_task(looping.run_async())
    await until(lambda: fake.rows[job_id].status == "completed", clock, step=STEP)
    looping.stop()
    await until(task.done, clock, step=STEP)
    assert fake.rows[job_id].result == 7
