"""Typed tasks on a real database, both engines (docs/tasks.md): a producer
submits through the task, a real Worker runs it, the handle's wait answers
its result or raises its TaskError; a payload that does not fit the handler
(sent by another producer) fails without retry."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import timedelta

import psycopg
import pytest

import fenceq
from fenceq.backends.sqlite import database_path
from fenceq.tasks import TaskFailed
from fenceq.testing import DatabaseMode

PATIENCE = 60.0  # seconds: bounds a failure only

app = fenceq.App(queues=["media", "mail"])


@dataclasses.dataclass
class Box:
    width: int
    height: int = 1


@app.task(queue="media", max_attempts=3)
def resize(ctx, url: str, width: int = 256, box: Box | None = None) -> dict:
    area = box.width * box.height if box else None
    return {"url": url, "width": width, "area": area, "attempt": ctx.attempt, "task": ctx.task}


@app.task(queue="media", max_attempts=1)
async def broken(ctx, reason: str) -> None:
    raise ValueError(reason)


@app.task("send_mail", queue="mail", aliases=["mail.send"])
def send_mail(ctx, to: str) -> str:
    return f"sent to {to}"


@app.task
def legacy(ctx):
    return {"payload": ctx.payload}


@pytest.fixture
def bound(db):
    """The App's submissions to the test's database, where its worker runs."""
    with DatabaseMode(app, db.url, queue_options={"lease": timedelta(seconds=60), "backoff_base": timedelta(0),
                                                   "backoff_max": timedelta(0)}):
        yield app


def test_submit_then_wait_answers_the_result(bound):
    job = resize.submit(url="https://example.com/a.png", width=128, box=Box(3, 2))
    assert job.wait(timeout=PATIENCE) == {"url": "https://example.com/a.png", "width": 128, "area": 6,
                                          "attempt": 1, "task": resize.name}
    assert job.status() == "completed"
    assert job.read().payload == {"url": "https://example.com/a.png", "width": 128, "box": {"width": 3, "height": 2}}


def test_options_reach_the_job(bound, db):
    upload = resize.options(priority=5, submission_id="upload-17", active_key="u-17")
    job, again = upload.submit(url="u"), upload.submit(url="u")
    assert again.id == job.id  # the same submission: the same job
    assert job.wait(timeout=PATIENCE)["width"] == 256
    stored = job.read()
    assert (stored.priority, stored.submission_id, stored.max_attempts, stored.queue) == (5, "upload-17", 3, "media")


def test_delay_and_depends_on(bound):
    first = send_mail.submit(to="a@example.com")
    later = resize.options(delay=timedelta(0), depends_on=[first.id]).submit(url="u")
    assert later.wait(timeout=PATIENCE)["url"] == "u"
    assert first.status() == "completed"


def test_a_failed_job_raises_its_error(bound):
    job = broken.submit(reason="no such image")
    with pytest.raises(TaskFailed) as raised:
        job.wait(timeout=PATIENCE)
    assert raised.value.job_id == job.id and raised.value.status == "failed"
    assert "ValueError: no such image" in raised.value.last_error


def test_a_payload_that_does_not_fit_fails_without_retry(bound, db):
    with db.connect() as other_producer:
        job_id = other_producer.submit("media", resize.name, {"url": 17})
        job = other_producer.wait(job_id, timeout=PATIENCE)
    assert (job.status, job.attempts) == ("failed", 1)  # max_attempts 3: NonRetryable spent one
    assert f"NonRetryable: the payload does not fit {resize.name}: url: expected str, got int" in job.last_error


def test_batches_aliases_and_plain_handlers(bound, db):
    jobs = resize.submit_batch([{"url": "a"}, {"url": "b", "width": 2}])
    assert [job.wait(timeout=PATIENCE)["width"] for job in jobs] == [256, 2]
    assert legacy.submit({"any": ["json"]}).wait(timeout=PATIENCE) == {"payload": {"any": ["json"]}}
    with db.connect() as old_producer:  # jobs queued under the task's old name still run
        job = old_producer.wait(old_producer.submit("mail", "mail.send", {"to": "b@example.com"}), timeout=PATIENCE)
    assert job.result == "sent to b@example.com"


def test_using_the_callers_transaction(bound, db):
    with db.connect() as client:
        with pytest.raises(RuntimeError), client.transaction() as tx:
            rolled_back = send_mail.using(tx).submit(to="never")
            raise RuntimeError("roll back")
        assert client.get_job(rolled_back.id) is None
        with client.transaction() as tx:
            committed = send_mail.using(tx).submit(to="c@example.com")
    assert committed.wait(timeout=PATIENCE) == "sent to c@example.com"


def test_using_a_driver_connection(bound, db):
    if db.backend == "postgres":
        with psycopg.connect(db.url) as connection:  # leaving the block commits
            job = send_mail.using(connection).submit(to="d@example.com")
    else:
        connection = sqlite3.connect(database_path(db.url), isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        job = send_mail.using(connection).submit(to="d@example.com")
        connection.execute("COMMIT")
        connection.close()
    assert job.wait(timeout=PATIENCE) == "sent to d@example.com"


async def test_submit_async_and_wait_async(bound):
    job = await resize.submit_async(url="async", width=3)
    assert (await job.wait_async(timeout=PATIENCE))["width"] == 3
    assert await job.status_async() == "completed"
    jobs = await send_mail.options(priority=1).submit_batch_async([{"to": "x"}, {"to": "y"}])
    assert [await job.wait_async(timeout=PATIENCE) for job in jobs] == ["sent to x", "sent to y"]


async def test_a_producer_needs_no_worker_and_closes_its_clients(db, monkeypatch):
    producer = fenceq.App(queues=["uploads"], url=db.url)

    @producer.task
    def scan(ctx, path: str) -> None:
        pass

    with db.connect() as client:
        client.create_queue("uploads")
    sync_job, async_job = scan.submit(path="a"), await scan.submit_async(path="b")
    assert [sync_job.status(), await async_job.status_async()] == ["pending", "pending"]
    await producer.aclose()
    monkeypatch.setenv("FENCEQ_DATABASE_URL", db.url)  # without url=, the client's rule
    from_environment = fenceq.App(queues=["uploads"])
    assert from_environment.task(scan.fn).submit(path="c").status() == "pending"
    from_environment.close()
