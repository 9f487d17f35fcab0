"""``ctx.progress`` against an in-memory backend and a manual clock: reports
ride on the heartbeat schedule (one write per job per beat, the latest
report winning), a report whose write was lost is sent again, and a refused
report loses the claim as a refused heartbeat does."""

from __future__ import annotations

import asyncio
import json

import pytest

from fenceq.testing.backend import MemoryBackend as FakeBackend
from fenceq.worker import App, LeaseLost, Worker
from fenceq.worker.runtime import Runtime
from fenceq.testing.clock import ManualClock, settle, until

STEP = 1 / 8   # seconds: a clock step that adds up exactly
LEASE = 3.0    # a beat every second
RENEWALS = ("progress", "heartbeat", "heartbeat_batch")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake(clock: ManualClock) -> FakeBackend:
    return FakeBackend(clock)


def runtime_of(app: App, fake: FakeBackend, clock: ManualClock) -> Runtime:
    async def open_backend() -> FakeBackend:
        return fake

    # control_poll: claim_state reads must not find a lost claim before the beat does.
    settings = Worker(app, url="sqlite:///never-opened.db", queues=["q"], owner_id="w", reap_interval=None,
                      lease=LEASE, drain_timeout=0.1, control_poll=60.0).settings
    return Runtime(app, settings, open_backend=open_backend, clock=clock)


async def run_for(clock: ManualClock, seconds: float) -> None:
    for _ in range(round(seconds / STEP)):
        clock.advance(STEP)
        await settle()


def renewals(fake: FakeBackend) -> list[tuple[str, float, dict]]:
    return [(name, at, arguments) for name, at, arguments in fake.calls if name in RENEWALS]


async def stop(runtime: Runtime, task: asyncio.Task, clock: ManualClock) -> None:
    runtime.request_stop()
    await until(task.done, clock, step=STEP)
    task.result()


async def test_a_tight_loop_of_reports_costs_one_write_per_heartbeat_interval(fake, clock):
    app = App(queues=["q"])
    reported: list[int] = []

    @app.task("busy")
    async def busy(ctx):
        while not ctx.stopping.is_set():
            reported.append(len(reported) + 1)
            ctx.progress({"n": reported[-1]})
            await asyncio.sleep(0)

    job_id = fake.submit("busy")
    runtime = runtime_of(app, fake, clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: reported)
    await run_for(clock, 10.0)  # ten heartbeat intervals
    writes = renewals(fake)
    assert [(name, at) for name, at, _ in writes] == [("progress", float(n)) for n in range(1, 11)], \
        "each beat writes the report in place of the heartbeat, and nothing else is written"
    sent = [json.loads(arguments["progress"])["n"] for _, _, arguments in writes]
    assert sent == sorted(set(sent)) and len(reported) > 10 * sent[0], "the latest report at each beat"
    assert fake.rows[job_id].progress == {"n": sent[-1]}
    assert fake.rows[job_id].lease_expires_at > fake.now()
    await stop(runtime, task, clock)
    assert fake.rows[job_id].status == "completed" and fake.rows[job_id].progress == {"n": sent[-1]}, \
        "the report still waiting when the handler returned was not written"


async def test_a_report_whose_write_was_lost_is_sent_again_and_then_heartbeats_resume(fake, clock):
    app = App(queues=["q"])

    @app.task("once")
    async def once(ctx):
        ctx.progress("half way")
        await ctx.stopping.wait()

    job_id = fake.submit("once")
    fake.drop("progress")  # the first write never arrives
    runtime = runtime_of(app, fake, clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: fake.called("progress"), clock, step=STEP)
    await run_for(clock, 3.0)
    names = [name for name, _, _ in renewals(fake)]
    assert names[:2] == ["progress", "progress"] and set(names[2:]) == {"heartbeat"}, names
    assert fake.rows[job_id].progress == "half way" and fake.rows[job_id].status == "claimed"
    await stop(runtime, task, clock)


async def test_a_refused_report_loses_the_claim(fake, clock):
    app = App(queues=["q"])
    seen: dict[str, object] = {}

    @app.task("doomed")
    async def doomed(ctx):
        ctx.progress(1)
        await ctx.lost.wait()
        try:
            ctx.progress(2)
        except LeaseLost:
            seen["raised"] = True
        raise LeaseLost()

    job_id = fake.submit("doomed")
    runtime = runtime_of(app, fake, clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: fake.rows[job_id].status == "claimed")
    fake.rows[job_id].generation += 1  # taken over meanwhile
    await until(lambda: seen, clock, step=STEP)
    assert [name for name, _, _ in renewals(fake)] == ["progress"], "told at the first beat"
    assert fake.rows[job_id].progress is None and runtime.counts["completed"] == 0
    await stop(runtime, task, clock)
