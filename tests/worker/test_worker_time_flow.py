"""The worker and time on both engines (docs/guarantees.md §13). With a
one-hour poll interval and no notification, a delayed job and a retry still
run, and the claimer's idle wait was computed from ``next_due``'s answer
(the exact wake-up times are the unit tests', on a manual clock:
tests/unit/test_worker_time.py); on PostgreSQL a job submitted for later
while the worker sleeps wakes it to ask ``next_due``. ``ctx.extend`` grows the claim's budget in
the database, from a thread handler and from an async one. Nothing here
measures time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import async_wait_for, running
from fenceq.worker import App, Worker
from test_worker_runtime import aclient, wait_status  # noqa: F401 - a fixture

HOUR = 3600.0


class RecordNextDue:
    """Wraps the worker's clients: every answer ``next_due`` gave."""

    def __init__(self) -> None:
        self.answers: list[datetime | None] = []

    def __call__(self, client):
        recorder = self

        class Recorded:
            def __getattr__(self, name):
                return getattr(client, name)

            async def next_due(self, queues):
                answer = await client.next_due(queues)
                recorder.answers.append(answer)
                return answer

        return Recorded()


def marking_app(fail_first: bool = False) -> App:
    app = App(queues=["later"])

    @app.task("mark")
    def mark(ctx):
        if fail_first and ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")

    return app


@pytest.fixture
async def later(aclient):  # noqa: F811
    await aclient.create_queue("later", lease=timedelta(seconds=60), max_attempts=3,
                               backoff_base=timedelta(seconds=1), backoff_max=timedelta(seconds=1))
    await aclient.set_queue_notify("later", False)
    return "later"


def idle_worker(db, app: App, recorder: RecordNextDue) -> Worker:
    """A worker whose idle waits may last an hour: it polls only as it backs
    off, and no notification comes."""
    return Worker(app, url=db.url, poll_interval=HOUR, reap_interval=None, wrap_client=recorder)


async def test_a_delayed_job_runs_when_it_falls_due(db, aclient, later):  # noqa: F811
    job_id = await aclient.submit(later, "mark", run_at=datetime.now(timezone.utc) + timedelta(seconds=1))
    recorder = RecordNextDue()
    async with running(idle_worker(db, marking_app(), recorder)):
        job = await wait_status(aclient, job_id, "completed")
    assert job.run_at in recorder.answers, "the idle wait was computed from the job's due time"


async def test_a_retry_runs_when_its_backoff_ends(db, aclient, later):  # noqa: F811
    job_id = await aclient.submit(later, "mark")
    recorder = RecordNextDue()
    async with running(idle_worker(db, marking_app(fail_first=True), recorder)):
        job = await wait_status(aclient, job_id, "completed")
    assert job.attempts == 2 and job.run_at in recorder.answers, "the retry's due time, from next_due"


@pytest.mark.parametrize("handler", ["thread", "async"])
async def test_ctx_extend_grows_the_claims_budget(db, aclient, later, handler):  # noqa: F811
    app, seen = App(queues=[later]), []

    if handler == "thread":
        @app.task("extends")
        def extends(ctx):
            seen.append((ctx.extend(timedelta(minutes=10)), ctx.fence_live))
    else:
        @app.task("extends")
        async def extends(ctx):
            seen.append((await ctx.extend(600), ctx.fence_live))

    job_id = await aclient.submit(later, "extends")
    async with running(Worker(app, url=db.url, budget=30, reap_interval=None)):
        job = await wait_status(aclient, job_id, "completed")
    [attempt] = await aclient.attempts(job_id)
    assert seen == [(True, True)]
    assert job.budget_expires_at >= attempt.claimed_at + timedelta(minutes=10), "from 30 s to 10 minutes"


async def test_an_idle_worker_hears_of_a_job_due_before_its_next_poll(pg):
    """PostgreSQL, with notifications: a job submitted for later while the
    worker sleeps through a long idle wait is announced (version 4), the
    worker asks next_due at once, and the job runs when due rather than when
    the wait ends. The job is submitted once the worker's waits have grown
    to 2.56 s, to fall due 1 s later: had the worker slept on, it would have
    found the job already due and claimed it with no next_due naming its due
    time in between. (A stalled test could only submit too late and pass
    without proving this; it can never fail for it.)"""
    client = await pg.connect_async()
    try:
        await client.create_queue("soon", lease=timedelta(seconds=60))
        recorder = RecordNextDue()
        app = App(queues=["soon"])

        @app.task("mark")
        def mark(ctx):
            pass

        async with running(Worker(app, url=pg.url, poll_interval=HOUR, reap_interval=None, wrap_client=recorder)):
            await async_wait_for(lambda: len(recorder.answers) >= 6, what="the idle waits to grow to 2.56 s")
            job_id = await client.submit("soon", "mark", run_at=datetime.now(timezone.utc) + timedelta(seconds=1))
            job = await wait_status(client, job_id, "completed")
        assert job.run_at in recorder.answers, "woken by the notification, the worker asked next_due"
    finally:
        await client.close()
