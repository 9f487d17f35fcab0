"""/healthz and /readyz of a worker run with a metrics port: liveness fails
while the event loop is blocked or the database stays silent past the
window and recovers after; readiness fails while draining. Each test waits
for a state, never for a time."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from fenceq.worker import App, Worker
from conftest import PATIENCE, async_wait_for, running
from observed import Faults, free_port, get

app = App(queues=["work"])
loop_release = threading.Event()
handler_release = threading.Event()


@app.task("hog")
async def hog(ctx):
    """Blocks the worker's event loop (what a careless async handler does)."""
    loop_release.wait(PATIENCE)


@app.task("hold")
def hold(ctx):
    handler_release.wait(PATIENCE)


@pytest.fixture
def work(client):
    client.create_queue("work")
    return "work"


async def probe(port: int, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, f"http://127.0.0.1:{port}{path}")


async def test_healthz_fails_while_the_event_loop_is_blocked(db, client, work):
    loop_release.clear()
    port = free_port()
    worker = Worker(app, url=db.url, metrics_port=port, poll_interval=0.05)
    async with running(worker):
        assert await probe(port, "/healthz") == (200, "ok\n")
        assert await probe(port, "/readyz") == (200, "ok\n")
        job_id = client.submit(work, "hog")
        # Probed from another thread: the loop is about to be blocked.
        answer = await asyncio.to_thread(_probe_until_unhealthy, port)
        assert answer == (503, "the event loop did not answer within 5s\n")
        await async_wait_for(lambda: _healthy(port), what="/healthz to recover")
    assert client.get_job(job_id).status == "completed"


def _probe_until_unhealthy(port: int) -> tuple[int, str]:
    try:
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            answer = get(f"http://127.0.0.1:{port}/healthz")
            if answer[0] != 200:
                return answer
        raise AssertionError("/healthz never failed")
    finally:
        loop_release.set()


async def test_healthz_fails_when_the_database_stays_silent_and_recovers(db, client, work):
    faults = Faults(on=False)
    port = free_port()
    worker = Worker(app, url=db.url, metrics_port=port, poll_interval=0.05, health_window=0.5,
                    wrap_client=faults)
    async with running(worker):
        assert (await probe(port, "/healthz"))[0] == 200
        faults.on = True
        status, body = await async_wait_for(lambda: _unhealthy(port), what="/healthz to fail")
        assert status == 503 and "the database has not answered for" in body
        faults.on = False
        await async_wait_for(lambda: _healthy(port), what="/healthz to recover")


async def _unhealthy(port: int):
    answer = await probe(port, "/healthz")
    return answer if answer[0] == 503 else None


async def _healthy(port: int) -> bool:
    return (await probe(port, "/healthz"))[0] == 200


async def test_readyz_fails_while_the_worker_drains(db, client, work):
    handler_release.clear()
    port = free_port()
    worker = Worker(app, url=db.url, metrics_port=port, poll_interval=0.05, drain_timeout=PATIENCE)
    job_id = client.submit(work, "hold")
    task = asyncio.create_task(worker.run_async())
    try:
        await async_wait_for(lambda: client.get_job(job_id).status == "claimed", what="the job to be claimed")
        assert await probe(port, "/readyz") == (200, "ok\n")
        worker.stop()
        assert await probe(port, "/readyz") == (503, "draining: the worker claims no more jobs\n")
        assert (await probe(port, "/healthz"))[0] == 200  # draining is alive
    finally:
        handler_release.set()
        await asyncio.wait_for(task, PATIENCE)
    assert client.get_job(job_id).status == "completed"


def test_fenceq_worker_serves_the_endpoints_on_loopback(work_queue, spawn_worker):
    worker = spawn_worker("probed", "--metrics-port", "0")
    listening = worker.wait_event("metrics_listening")
    assert listening["host"] == "127.0.0.1"
    port = listening["port"]
    assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
    assert get(f"http://127.0.0.1:{port}/readyz") == (200, "ok\n")
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and 'fenceq_queue_pending_jobs{queue="work"} 0.0' in text
    assert get(f"http://127.0.0.1:{port}/nothing")[0] == 404
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
