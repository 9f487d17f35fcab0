"""The worker and time (docs/guarantees.md §13), on the in-memory backend and
a manual clock: an idle claimer never sleeps past the moment ``next_due``
names, so a delayed job or a retry starts when it falls due, with a one-hour
poll interval and no notification; a notification of a job due later
ends an idle wait with one claim and a fresh ``next_due``, also one that
``next_due`` had cut short; ``ctx.extend`` moves the worker's own budget
deadline. Time moves only when a test moves it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from fenceq.testing.backend import MemoryBackend as FakeBackend
from fenceq.backends.protocol import JOBS_CHANNEL
from fenceq.errors import ConfigError
from fenceq.worker import App
from fenceq.worker.claimer import NEXT_DUE_FROM, Claimer
from fenceq.worker.runtime import Runtime
from fenceq.testing.clock import ManualClock, settle, until
from test_worker_protocols import STEP, clock, fake, opener, settings_of, stopped, units  # noqa: F401 - fixtures

HOUR = 3600.0


async def test_the_idle_wait_ends_when_the_next_job_falls_due(fake: FakeBackend, clock: ManualClock):
    state, pool, _ = await units(fake, clock, poll_interval=HOUR)
    claimer = Claimer(state, pool, lambda claim, sent: None)
    assert await claimer.idle_wait(HOUR) == HOUR, "nothing pending: the backoff"
    fake.submit("t", run_at=fake.now() + timedelta(seconds=2))
    assert await claimer.idle_wait(HOUR) == 2.0
    assert await claimer.idle_wait(1.5) == 1.5, "never longer than the backoff"
    clock.advance(2.0)
    assert await claimer.idle_wait(HOUR) == HOUR, "due but not claimed (taken elsewhere): the backoff"
    asked = len(fake.called("next_due"))
    assert await claimer.idle_wait(NEXT_DUE_FROM) == NEXT_DUE_FROM
    assert len(fake.called("next_due")) == asked, "a short wait is not worth asking"


async def test_a_database_without_next_due_is_polled_as_before(fake: FakeBackend, clock: ManualClock):
    def refuse(queues):
        raise ConfigError("fenceq: no function matches", reason="undefined_function", sqlstate="42883")

    fake.next_due = refuse
    state, pool, _ = await units(fake, clock, poll_interval=HOUR)
    claimer = Claimer(state, pool, lambda claim, sent: None)
    fake.submit("t", run_at=fake.now() + timedelta(seconds=2))
    assert [await claimer.idle_wait(HOUR) for _ in range(3)] == [HOUR] * 3
    assert len(fake.called("next_due")) == 1, "asked once, then no more"


def recording_starts(clock: ManualClock, fail_first: bool = False) -> tuple[App, list[float]]:
    """An app whose task "mark" records when each attempt starts (and fails
    its first attempt with ``fail_first``)."""
    app, started = App(queues=["q"]), []

    @app.task("mark")
    async def mark(ctx):
        started.append(clock.now)
        if fail_first and ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    return app, started


async def test_a_delayed_job_starts_when_it_falls_due_not_at_the_next_poll(fake: FakeBackend, clock: ManualClock):
    app, started = recording_starts(clock)
    runtime = Runtime(app, settings_of(poll_interval=HOUR), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    fake.submit("mark", run_at=fake.now() + timedelta(seconds=3))
    await until(lambda: started, clock, step=STEP)
    assert started == [3.0], "claimed at its due time, with no notification and a one-hour poll"
    assert fake.called("next_due")
    await stopped(runtime, task, clock)


async def test_a_retry_starts_when_its_backoff_ends(fake: FakeBackend, clock: ManualClock):
    app, started = recording_starts(clock, fail_first=True)
    fake.retry_backoff = timedelta(seconds=2)
    job_id = fake.submit("mark")
    runtime = Runtime(app, settings_of(poll_interval=HOUR), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: fake.rows[job_id].status == "completed", clock, step=STEP)
    [failed_at] = [at for name, at, _ in fake.calls if name == "fail"]
    assert started == [0.0, failed_at + 2.0]
    await stopped(runtime, task, clock)


def claims_between(fake: FakeBackend, start: float, end: float) -> list[float]:
    """When the claims from ``start`` to before ``end`` were made."""
    return [at for name, at, _ in fake.calls if name in ("claim_next", "claim_batch") and start <= at < end]


async def idle_runtime(fake: FakeBackend, clock: ManualClock, app: App) -> tuple[Runtime, asyncio.Task]:
    """A running worker with a one-hour poll interval, settled into an idle
    wait that only a notification or a job falling due can end."""
    runtime = Runtime(app, settings_of(poll_interval=HOUR), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(runtime.started.is_set)
    for _ in range(24):  # every backoff step from 10 ms doubling: the claimer now waits a whole poll interval
        clock.advance(HOUR)
        await settle()
    clock.advance(STEP)  # and has been waiting a while
    await settle()
    return runtime, task


async def test_a_notification_of_a_job_due_later_ends_an_idle_wait_at_its_due_time(clock: ManualClock):
    fake = FakeBackend(clock, notifications=True)
    app, started = recording_starts(clock)
    runtime, task = await idle_runtime(fake, clock, app)
    submitted = clock.now
    fake.submit("mark", run_at=fake.now() + timedelta(seconds=3))
    fake.notify(JOBS_CHANNEL, "q")
    await until(lambda: started, clock, step=STEP)
    assert started == [submitted + 3.0], "at its due time, not at the next poll an hour away"
    assert claims_between(fake, submitted, submitted + 3.0) == [submitted], "one claim, on the notification"
    await stopped(runtime, task, clock)


async def test_a_notification_during_a_wait_cut_short_by_next_due_asks_next_due_again(clock: ManualClock):
    """Woken before the due time next_due named, the claimer does not start
    polling from 10 ms again: it claims once and asks next_due."""
    fake = FakeBackend(clock, notifications=True)
    app, started = recording_starts(clock)
    runtime, task = await idle_runtime(fake, clock, app)
    fake.submit("mark", run_at=fake.now() + timedelta(seconds=100))
    fake.notify(JOBS_CHANNEL, "q")
    await settle()  # claimed nothing; now waiting for the job due in 100 s, as next_due said
    clock.advance(STEP)
    await settle()
    submitted = clock.now
    fake.submit("mark", run_at=fake.now() + timedelta(seconds=3))
    fake.notify(JOBS_CHANNEL, "q")
    await until(lambda: started, clock, step=STEP)
    assert started == [submitted + 3.0]
    assert claims_between(fake, submitted, submitted + 3.0) == [submitted], "one claim, then next_due"
    await stopped(runtime, task, clock)


def long_running(contexts: list) -> App:
    app = App(queues=["q"])

    @app.task("long")
    async def long(ctx):
        contexts.append(ctx)
        await asyncio.Event().wait()

    return app


async def test_extend_moves_the_workers_own_budget_deadline(fake: FakeBackend, clock: ManualClock):
    contexts: list = []
    job_id = fake.submit("long")
    runtime = Runtime(long_running(contexts), settings_of(lease=3.0, budget=5.0, drain_timeout=0.1),
                      open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    [ctx] = await until(lambda: contexts)
    assert await ctx.extend(timedelta(seconds=10))
    assert fake.rows[job_id].budget_expires_at == fake.now() + timedelta(seconds=10)
    assert await ctx.extend(2.0), "a shorter budget is accepted and takes nothing away"
    while clock.now < 10.0:
        assert ctx.fence_live and not ctx.lost.is_set(), "the budget of 5 s no longer ends the claim"
        clock.advance(STEP)
        await settle()
    assert not ctx.fence_live, "the new budget ends it"
    await stopped(runtime, task, clock)


async def test_a_refused_extend_tells_the_handler(fake: FakeBackend, clock: ManualClock):
    contexts: list = []
    job_id = fake.submit("long")
    runtime = Runtime(long_running(contexts), settings_of(drain_timeout=0.1), open_backend=opener(fake),
                      clock=clock)
    task = asyncio.create_task(runtime.run())
    [ctx] = await until(lambda: contexts)
    fake.rows[job_id].generation = 2  # taken over meanwhile
    assert await ctx.extend(60) is False
    assert ctx.lost.is_set() and fake.rows[job_id].budget_expires_at is None
    await stopped(runtime, task, clock)
