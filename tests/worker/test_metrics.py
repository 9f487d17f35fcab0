"""The worker's /metrics while it drains jobs, on both engines: counters
and gauges equal what the database says, queue_stats is read once however
many scrape at once, and a refused stale write shows in its counter."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from fenceq.worker import App, NonRetryable, Worker
from conftest import async_wait_for, running
from observed import Faults, free_port, get, samples, value

LEASE = timedelta(seconds=60)
SHORT_LEASE = 1.0

app = App(queues=["work"])


@app.task("quick")
def quick(ctx):
    return {"n": ctx.payload["n"]}


@app.task("broken")
def broken(ctx):
    raise NonRetryable("this job cannot succeed")


def scrape(port: int) -> dict:
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return samples(text)


async def ascrape(port: int) -> dict:
    """A scrape from another thread: the worker's loop (this test's) must stay free."""
    return await asyncio.to_thread(scrape, port)


def count(db, status: str, task: str) -> int:
    """Jobs of a task in a status, as the database's view says."""
    view, mark = ("fenceq.jobs", "%s") if db.backend == "postgres" else ("fenceq_jobs", "?")
    return db.sql(f"SELECT count(*) FROM {view} WHERE status = {mark} AND task = {mark}", (status, task))[0][0]


@pytest.fixture
def work(client):
    client.create_queue("work", lease=LEASE, max_attempts=1)
    return "work"


async def test_counters_and_queue_gauges_follow_the_database(db, client, work):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    for n in range(6):
        client.submit(work, "quick", {"n": n})
    client.submit(work, "broken")
    for n in range(3):
        client.submit(work, "quick", {"n": n}, run_at=later)  # pending, not due: the worker leaves them
    port = free_port()
    worker = Worker(app, url=db.url, metrics_port=port, stats_interval=0.01, poll_interval=0.05, concurrency=2)
    async with running(worker):
        await async_wait_for(lambda: count(db, "completed", "quick") == 6 and count(db, "failed", "broken") == 1,
                             what="the due jobs to finish")
        scraped = await async_wait_for(lambda: _settled(port), what="the worker to settle what it ran")
        assert value(scraped, "fenceq_worker_jobs_completed_total", queue=work, task="quick") == 6
        assert value(scraped, "fenceq_worker_jobs_failed_total", queue=work, task="broken") == 1
        claimed = sum(value(scraped, "fenceq_worker_jobs_claimed_total", queue=work, task=t)
                      for t in ("quick", "broken"))
        assert claimed == 7 == sum(len(client.attempts(j.job_id)) for j in client.finished_jobs(
            datetime.now(timezone.utc) - timedelta(hours=1), queue=work))
        assert value(scraped, "fenceq_worker_handler_duration_seconds_count",
                     queue=work, task="quick", outcome="completed") == 6
        assert value(scraped, "fenceq_worker_stale_writes_refused_total",
                     queue=work, task="quick", write="complete") == 0
        assert value(scraped, "fenceq_worker_concurrency") == 2
        stats = {s.queue: s for s in client.stats()}[work]
        assert (stats.pending, stats.due, stats.claimed) == (3, 0, 0)
        assert value(scraped, "fenceq_queue_pending_jobs", queue=work) == 3
        assert value(scraped, "fenceq_queue_due_jobs", queue=work) == 0
        assert value(scraped, "fenceq_queue_paused", queue=work) == 0

        # The gauges move with the database: a paused queue keeps what is submitted to it.
        client.pause_queue(work)
        for n in range(4):
            client.submit(work, "quick", {"n": n})
        scraped = await async_wait_for(lambda: _when(port, "fenceq_queue_pending_jobs", 7, queue=work),
                                       what="the pending gauge to count the new jobs")
        assert value(scraped, "fenceq_queue_due_jobs", queue=work) == 4
        assert value(scraped, "fenceq_queue_paused", queue=work) == 1
        assert value(scraped, "fenceq_queue_oldest_due_age_seconds", queue=work) >= 0
        assert value(scraped, "fenceq_queue_stats_up") == 1


async def _settled(port: int) -> dict | None:
    scraped = await ascrape(port)
    return scraped if value(scraped, "fenceq_worker_jobs_in_flight") == 0 else None


async def _when(port: int, name: str, expected: float, **labels: str) -> dict | None:
    scraped = await ascrape(port)
    return scraped if value(scraped, name, **labels) == expected else None


async def test_queue_stats_is_read_once_however_many_scrape_together(db, client, work):
    port = free_port()
    worker = Worker(app, url=db.url, metrics_port=port, stats_interval=3600, poll_interval=0.05)
    async with running(worker):
        scrapes = await asyncio.gather(*(asyncio.to_thread(scrape, port) for _ in range(8)))
        later = await ascrape(port)
    assert [value(s, "fenceq_queue_pending_jobs", queue=work) for s in scrapes] == [0] * 8
    assert value(later, "fenceq_worker_queue_stats_reads_total") == 1


async def test_a_refused_stale_write_shows_in_its_counter(db, client, work):
    """The worker's heartbeats stop reaching the database; its lease lapses,
    the job is reaped and completed by another owner; the first handler
    then returns, and its completion is refused under the stale fence."""
    taken_over = threading.Event()
    late_app = App(queues=[work])

    @late_app.task("late")
    def late(ctx):
        assert taken_over.wait(60)
        return "late"

    client.create_queue("retrying", lease=LEASE, max_attempts=3, backoff_base=timedelta(0),
                        backoff_max=timedelta(0))
    job_id = client.submit("retrying", "late")
    port = free_port()
    cut = Faults({"heartbeat", "heartbeat_batch"})
    worker = Worker(late_app, url=db.url, queues=["retrying"], owner_id="partitioned", wrap_client=cut,
                    lease=SHORT_LEASE, reap_interval=None, poll_interval=0.05, metrics_port=port)
    try:
        async with running(worker):
            first = await async_wait_for(lambda: (j := client.get_job(job_id)) and j.status == "claimed" and j,
                                         what="the worker to claim the job")
            await asyncio.sleep(max(0.0, (first.lease_expires_at - datetime.now(timezone.utc)).total_seconds()))
            await async_wait_for(lambda: client.reap().requeued == 1, what="the lapsed claim to be reaped")
            second = client.claim_next(["retrying"], "other", fenceq.new_claim_token())
            assert second.generation == 2
            assert client.complete(second.fence, "second")
            taken_over.set()
            scraped = await async_wait_for(lambda: _when(port, "fenceq_worker_stale_writes_refused_total", 1,
                                                         queue="retrying", task="late", write="complete"),
                                           what="the refused completion to be counted")
    finally:
        taken_over.set()
    labels = dict(queue="retrying", task="late")
    assert value(scraped, "fenceq_worker_stale_writes_refused_total", **labels, write="complete") == 1
    assert value(scraped, "fenceq_worker_leases_lost_total", **labels) == 1
    assert value(scraped, "fenceq_worker_jobs_completed_total", **labels) == 0
    job = client.get_job(job_id)
    assert (job.status, job.generation, job.owner_id, job.result) == ("completed", 2, "other", "second")


def test_queue_stats_columns_of_a_newer_schema_become_gauges():
    """Limits a later schema adds to queue_stats are exported as they come:
    numbers and flags as gauges, intervals in seconds, text left out."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from fenceq.backends.protocol import QueueOverview
    from fenceq.observability.metrics import QueueCollector, QueueFigures

    row = QueueOverview(queue="work", pending=3, due=2, claimed=1, cancel_requested=0, oldest_due_age=None,
                        paused=False, notify=True, concurrency_limit=4, rate_period=timedelta(minutes=1),
                        limit_note="text is no figure")
    other = QueueOverview(queue="elsewhere", pending=9, due=9, claimed=0, cancel_requested=0,
                          oldest_due_age=timedelta(seconds=5), paused=True, notify=True)
    registry = CollectorRegistry()
    figures = QueueFigures(lambda: [row, other], 60, Counter("reads", "reads", registry=None))
    registry.register(QueueCollector(figures, ["work"]))
    scraped = samples(generate_latest(registry).decode())
    assert value(scraped, "fenceq_queue_concurrency_limit", queue="work") == 4
    assert value(scraped, "fenceq_queue_rate_period_seconds", queue="work") == 60
    assert value(scraped, "fenceq_queue_oldest_due_age_seconds", queue="work") == 0
    assert value(scraped, "fenceq_queue_due_jobs", queue="work") == 2
    assert not any(name == "fenceq_queue_limit_note" or ("queue", "elsewhere") in labels
                   for name, labels in scraped)
