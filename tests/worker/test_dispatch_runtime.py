"""External execution on both engines: every crash window of the protocol
(docs/external-execution.md) ends with the job settled and the external
system (the example's fake farm, which records every start request by
idempotency key) asked to start its work exactly once.

A crashed dispatcher is played by direct calls under a claim with a short
lease that nobody renews; the repair is the example's reconciler and, where
the job must run again, an in-process worker with the example's handler.
Nothing measures time: the tests wait for the database's own lease times."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

import fenceq
from conftest import SHORT_LEASE, async_wait_for, running
from fenceq.worker.reconciler import Reconciled
from helpers import wait_until_past

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "external_dispatch"))

from fake_service import FakeService  # noqa: E402
from render import BACKEND, reconciler_for, render_app  # noqa: E402

QUEUE = "renders"
FAST = dict(reap_interval=0.2, poll_interval=0.05, control_poll=0.2, drain_timeout=2)


@pytest.fixture
def farm() -> FakeService:
    return FakeService()


@pytest.fixture
def client(db):
    with db.connect() as c:
        c.create_queue(QUEUE, lease=timedelta(seconds=60), backoff_base=timedelta(0), backoff_max=timedelta(0))
        yield c


@pytest.fixture
async def reconciler(db, farm):
    async_client = await db.connect_async()
    yield reconciler_for(farm, async_client, owner_id="reconciler", lease=SHORT_LEASE)
    await async_client.close()


def crashed_claim(client: fenceq.Client, payload: dict) -> fenceq.Claim:
    """A job claimed by a dispatcher that dies: its short lease is never renewed."""
    client.submit(QUEUE, "render", payload)
    claim = client.claim_next([QUEUE], "crashed", fenceq.new_claim_token(), lease=timedelta(seconds=SHORT_LEASE))
    assert claim is not None
    return claim


async def reconcile_until(reconciler: fenceq.Reconciler, job_id: str, decision: Reconciled) -> None:
    async def decided() -> bool:
        return (await reconciler.reconcile_once()).get(job_id) is decision

    await async_wait_for(decided, what=f"the reconciler: {decision.value}", interval=0.1)


async def finish_and_complete(reconciler, farm: FakeService, client, job_id: str, payload: dict) -> None:
    """The farm finishes the job's work; the reconciler completes the job
    with its result; the farm was asked to start it exactly once."""
    [work] = farm.started_for(payload)
    farm.finish(work.key, {"frames": 24})
    await reconcile_until(reconciler, job_id, Reconciled.COMPLETED)
    job = client.get_job(job_id)
    assert (job.status, job.result) == ("completed", {"frames": 24})
    assert farm.requests.count(work.key) == len(farm.requests) == 1


async def run_with_worker(db, farm, reconciler, client, job_id: str, payload: dict) -> None:
    """A worker runs the job (again): it dispatches it to the farm and
    leaves it running there; the reconciler completes it."""
    worker = fenceq.Worker(render_app(farm, QUEUE), url=db.url, lease=SHORT_LEASE, **FAST)
    async with running(worker):
        await async_wait_for(lambda: worker.counts["dispatched"], what="the handler dispatched")
    await finish_and_complete(reconciler, farm, client, job_id, payload)


async def test_crash_before_reserve_the_job_is_reaped_and_runs_once(db, farm, reconciler, client):
    payload = {"scene": "before-reserve"}
    claim = crashed_claim(client, payload)
    wait_until_past(claim.lease_expires_at)
    assert client.reap().requeued == 1, "no dispatch: an ordinary lapsed claim"
    await run_with_worker(db, farm, reconciler, client, claim.job_id, payload)


async def test_crash_between_reserve_and_call_the_reservation_is_released_and_the_job_runs_once(
        db, farm, reconciler, client):
    payload = {"scene": "before-call"}
    claim = crashed_claim(client, payload)
    assert client.reserve_dispatch(claim.fence, BACKEND, "never-sent")
    wait_until_past(claim.lease_expires_at)
    assert client.reap().requeued == 0 and client.get_job(claim.job_id).status == "claimed"
    await reconcile_until(reconciler, claim.job_id, Reconciled.RELEASED)
    assert client.get_job(claim.job_id).status == "pending" and farm.requests == []
    await run_with_worker(db, farm, reconciler, client, claim.job_id, payload)


async def test_crash_between_call_and_finalize_the_work_is_found_by_its_key(farm, reconciler, client):
    payload = {"scene": "before-finalize"}
    claim = crashed_claim(client, payload)
    assert client.reserve_dispatch(claim.fence, BACKEND, "key-1")
    work_id = farm.start("key-1", payload)
    wait_until_past(claim.lease_expires_at)
    await reconcile_until(reconciler, claim.job_id, Reconciled.RUNNING)
    [dispatch] = client.dispatches(backend=BACKEND)
    assert (dispatch.state, dispatch.reservation_ref, dispatch.execution_ref) == ("running", "key-1", work_id)
    assert dispatch.owner_id == "reconciler"
    await finish_and_complete(reconciler, farm, client, claim.job_id, payload)


async def test_crash_after_finalize_the_running_work_is_settled(farm, reconciler, client):
    payload = {"scene": "after-finalize"}
    claim = crashed_claim(client, payload)
    assert client.reserve_dispatch(claim.fence, BACKEND, "key-2")
    assert client.finalize_dispatch(claim.fence, "key-2", farm.start("key-2", payload))
    wait_until_past(claim.lease_expires_at)
    assert client.reap().requeued == 0
    await finish_and_complete(reconciler, farm, client, claim.job_id, payload)
    assert client.dispatches() == []


async def test_crash_during_adoption_another_reconciler_takes_over(farm, reconciler, client):
    payload = {"scene": "during-adoption"}
    claim = crashed_claim(client, payload)
    assert client.reserve_dispatch(claim.fence, BACKEND, "key-3")
    work_id = farm.start("key-3", payload)
    assert client.finalize_dispatch(claim.fence, "key-3", work_id)
    wait_until_past(claim.lease_expires_at)
    [candidate] = client.dispatch_repair_candidates(BACKEND)
    adopted = client.adopt_dispatch(claim.job_id, BACKEND, candidate.ref, "died-adopting", fenceq.new_claim_token(),
                                    lease=timedelta(seconds=SHORT_LEASE))
    assert adopted is not None and adopted.attempt == claim.attempt
    assert not client.finalize_dispatch(claim.fence, "key-3", work_id), "the old fence is dead"
    wait_until_past(adopted.lease_expires_at)
    await finish_and_complete(reconciler, farm, client, claim.job_id, payload)


async def test_a_start_whose_answer_was_lost_is_settled_by_its_key(db, farm, reconciler, client):
    payload = {"scene": "answer-lost"}
    job_id = client.submit(QUEUE, "render", payload)
    farm.lose_answer_next()  # the farm starts the work; the handler never hears its id
    await run_with_worker(db, farm, reconciler, client, job_id, payload)


async def test_a_refused_start_releases_its_reservation_and_the_retry_starts_once(db, farm, reconciler, client):
    payload = {"scene": "refused"}
    job_id = client.submit(QUEUE, "render", payload)
    farm.refuse_next()  # turned away before anything started
    worker = fenceq.Worker(render_app(farm, QUEUE), url=db.url, lease=SHORT_LEASE, **FAST)
    async with running(worker):
        await async_wait_for(lambda: worker.counts["dispatched"], what="the retry dispatched")
    refused, started = farm.requests
    assert [work.key for work in farm.started_for(payload)] == [started]
    farm.finish(started, {"frames": 24})
    await reconcile_until(reconciler, job_id, Reconciled.COMPLETED)
    assert client.get_job(job_id).attempts == 2
