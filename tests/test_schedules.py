"""Periodic schedules on both engines (docs/guarantees.md §14): set_schedule,
drop_schedule, tick and the schedules view; racing ticks with real
concurrent sessions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from fenceq import canonical, cron
from fenceq.backends.sqlite import database_path
from fenceq.backends.sqlite_schedules import submission_id
from fenceq.ops import Arg, Op, Shape
from helpers import claim, raises_code

# Occurrences a year apart: a tick's answer never depends on the minute it
# runs in (only a test running across New Year could see another one due).
YEARLY = "0 0 1 1 *"
THREE_YEARS = timedelta(days=3 * 366)


def move_back(db, schedule: str, by: timedelta = THREE_YEARS) -> None:
    """Pretend the schedule's next occurrences came and went: its next_run_at
    moves back (by default past three of them)."""
    if db.backend == "postgres":
        db.sql("UPDATE fenceq._schedules SET next_run_at = next_run_at - %s WHERE schedule = %s", (by, schedule))
    else:
        db.sql("UPDATE fenceq__schedules SET next_run_at = next_run_at - ? WHERE schedule = ?",
               (by // timedelta(microseconds=1), schedule))


def schedule_of(client, name: str) -> fenceq.Schedule:
    return next(s for s in client.schedules() if s.schedule == name)


def jobs_of(db, schedule: str) -> list[tuple]:
    table = "fenceq.jobs" if db.backend == "postgres" else "fenceq_jobs"
    mark = "%s" if db.backend == "postgres" else "?"
    return db.sql(f"SELECT job_id, submission_id FROM {table} WHERE submission_id LIKE {mark} ORDER BY job_id",
                  (f"fenceq:schedule:{schedule}:%",))


def test_set_schedule_creates_then_answers_false_for_the_same_definition(client, queue):
    before = datetime.now(timezone.utc)
    assert client.set_schedule("nightly", queue, "report", "30 2 * * *", {"full": True},
                               time_zone="Europe/Berlin", priority=5, max_attempts=2, active_key="report") is True
    after = datetime.now(timezone.utc)
    [shown] = client.schedules()
    assert shown == fenceq.Schedule(
        schedule="nightly", queue=queue, task="report", cron="30 2 * * *", time_zone="Europe/Berlin",
        payload={"full": True}, priority=5, max_attempts=2, active_key="report", paused=False,
        next_run_at=shown.next_run_at, last_run_at=None, last_job_id=None)
    berlin, nightly = cron.zone("Europe/Berlin"), cron.parse("30 2 * * *")
    # The first occurrence after the call's clock, whenever within the call that was.
    assert shown.next_run_at in {cron.next_after(nightly, berlin, before), cron.next_after(nightly, berlin, after)}
    assert client.set_schedule("nightly", queue, "report", "30 2 * * *", {"full": True},
                               time_zone="Europe/Berlin", priority=5, max_attempts=2, active_key="report") is False
    assert client.schedules() == [shown]


@pytest.mark.parametrize("change", [
    {"task": "other"}, {"cron": "30 3 * * *"}, {"cron": "30  2 * * *"}, {"time_zone": "America/New_York"},
    {"payload": {"full": False}}, {"payload": None}, {"priority": 6}, {"max_attempts": None},
    {"active_key": None}, {"paused": True}])
def test_any_change_replaces_the_definition_and_keeps_the_last_run(db, client, queue, change):
    definition = dict(schedule="s", queue=queue, task="report", cron="30 2 * * *", payload={"full": True},
                      time_zone="Europe/Berlin", priority=5, max_attempts=2, active_key="report")
    client.set_schedule(**definition)
    move_back(db, "s", timedelta(days=2))
    assert client.tick() == 1
    ran = schedule_of(client, "s")
    assert client.set_schedule(**{**definition, **change}) is True
    shown = schedule_of(client, "s")
    for field, value in {**definition, **change}.items():
        assert getattr(shown, field) == value, field
    assert (shown.last_run_at, shown.last_job_id) == (ran.last_run_at, ran.last_job_id)
    if change == {"paused": True}:
        assert shown.next_run_at is None  # a paused schedule has no next occurrence
    else:
        expression, zone = cron.parse(shown.cron), cron.zone(shown.time_zone)
        assert shown.next_run_at == cron.next_after(expression, zone, shown.next_run_at - timedelta(seconds=1))
        assert shown.next_run_at > ran.last_run_at


BAD_SCHEDULES = [
    ("QF101", {"queue": "nope"}),
    ("QF100", {"cron": "0 0 30 2 *"}),  # never fires
    ("QF100", {"cron": "0 0 31 4,6,9,11 *"}),
    ("QF100", {"cron": "* * * *"}),
    ("QF100", {"cron": "60 * * * *"}),
    ("QF100", {"cron": "*/0 * * * *"}),
    ("QF100", {"cron": "5/15 * * * *"}),
    ("QF100", {"cron": "5-1 * * * *"}),
    ("QF100", {"cron": "0 0 * JAN-FOO *"}),
    ("QF100", {"cron": "MON * * * *"}),
    ("QF100", {"cron": "0 0 L * *"}),
    ("QF100", {"cron": "@reboot"}),
    ("QF100", {"cron": "0 0 * * 8"}),
    ("QF100", {"cron": "0\u00a00 * * *"}),
    ("QF100", {"cron": ""}),
    ("QF100", {"time_zone": "Europe/Nowhere"}),
    ("QF100", {"time_zone": "europe/berlin"}),  # names compare exactly
    ("QF100", {"time_zone": "EST5EDT,M3.2.0,M11.1.0"}),  # a POSIX rule, not a zone name
    ("QF102", {"schedule": "s" * 219}),
    ("QF102", {"schedule": ""}),
    ("QF102", {"task": ""}),
    ("QF102", {"active_key": "k" * 256}),
    ("QF104", {"max_attempts": 0}),
    ("QF104", {"priority": 2**31}),
    ("QF103", {"payload": float("nan")}),
]


def test_a_refused_schedule_changes_nothing(client, queue):
    client.set_schedule("s", queue, "t", "0 * * * *")
    before = client.schedules()
    for sqlstate, bad in BAD_SCHEDULES:
        definition = {"schedule": "s", "queue": queue, "task": "t", "cron": "*/5 * * * *", **bad}
        for name in (["s"] if "schedule" in bad else ["s", "new"]):  # a replacement, a creation
            with pytest.raises(fenceq.FenceqError) as info:
                client.set_schedule(**{**definition, "schedule": bad.get("schedule", name)})
            assert info.value.sqlstate == sqlstate, (bad, str(info.value))
    assert client.schedules() == before


def _call(name: str, **values) -> Op:
    kinds = {"schedule": "text", "queue": "text", "task": "text", "cron": "text", "time_zone": "text",
             "payload": "jsonb", "paused": "boolean", "max_rows": "integer", "max_attempts": "integer"}
    return Op(name, tuple(Arg(k, kinds[k], v) for k, v in values.items()), Shape.SCALAR, bool)


@pytest.mark.parametrize("sqlstate, op", [
    ("QF100", _call("set_schedule", schedule="s", queue="q", task="t", cron="0 0 30 2 *", time_zone="UTC",
                    paused=False)),
    ("QF100", _call("set_schedule", schedule="s", queue="q", task="t", cron="* * * *", time_zone="UTC",
                    paused=False)),
    ("QF100", _call("set_schedule", schedule="s", queue="q", task="t", cron="* * * * *", time_zone="Mars/Olympus",
                    paused=False)),
    ("QF101", _call("set_schedule", schedule="s", queue="nope", task="t", cron="* * * * *", time_zone="UTC",
                    paused=False)),
    ("QF102", _call("set_schedule", schedule="s" * 219, queue="q", task="t", cron="* * * * *", time_zone="UTC",
                    paused=False)),
    ("QF104", _call("set_schedule", schedule="s", queue="q", task="t", cron="* * * * *", time_zone="UTC",
                    paused=False, max_attempts=0)),
    ("QF102", _call("drop_schedule", schedule="")),
    ("QF104", _call("tick", max_rows=0)),
], ids=lambda value: value if isinstance(value, str) else value.name)
def test_the_engine_refuses_what_the_client_would(client, sqlstate, op):
    """Values past the client's own checks get the same codes from each engine."""
    client.create_queue("q")
    with raises_code(sqlstate):
        client._backend.run(op)
    assert client.schedules() == []


def test_tick_submits_the_latest_due_occurrence_once_and_skips_missed_ones(db, client, queue):
    client.set_schedule("every", queue, "ping", YEARLY, {"n": 1}, priority=3)
    assert client.tick() == 0  # nothing due yet
    move_back(db, "every")  # three occurrences missed
    now = datetime.now(timezone.utc)
    assert client.tick() == 1
    assert client.tick() == 0
    shown = schedule_of(client, "every")
    # The latest occurrence at the tick's clock, and the next one after it.
    assert shown.last_run_at == datetime(now.year, 1, 1, tzinfo=timezone.utc)
    assert shown.next_run_at == datetime(now.year + 1, 1, 1, tzinfo=timezone.utc)
    job = client.get_job(shown.last_job_id)
    assert (job.queue, job.task, job.payload, job.priority, job.status, job.run_at) == (
        queue, "ping", {"n": 1}, 3, "pending", shown.last_run_at)
    assert job.max_attempts == 5  # the queue's default
    assert job.submission_id == f"fenceq:schedule:every:{shown.last_run_at:%Y-%m-%dT%H:%M:%S}Z"
    assert jobs_of(db, "every") == [(job.job_id, job.submission_id)]
    # It is an ordinary submission: the same request replays the same job.
    assert client.submit(queue, "ping", {"n": 1}, submission_id=job.submission_id, priority=3,
                         run_at=job.run_at) == job.job_id
    assert job.fingerprint == canonical.fingerprint(
        queue=queue, task="ping", payload={"n": 1}, submission_id=job.submission_id, job_id=None, priority=3,
        run_at=job.run_at, expires_at=None, max_attempts=None, active_key=None, force=False)
    assert claim(client, queue).job_id == job.job_id


def test_an_occurrence_due_exactly_at_next_run_at_is_submitted(db, client, queue):
    """The boundary: the latest occurrence due is next_run_at itself (due
    means at or before the tick's clock, and next_run_at is that occurrence)."""
    client.set_schedule("every", queue, "ping", YEARLY)
    upcoming = schedule_of(client, "every").next_run_at
    move_back(db, "every", upcoming - upcoming.replace(year=upcoming.year - 1))  # exactly one occurrence
    due = schedule_of(client, "every").next_run_at
    assert client.tick() == 1
    shown = schedule_of(client, "every")
    assert (shown.last_run_at, shown.next_run_at) == (due, upcoming)
    assert client.get_job(shown.last_job_id).run_at == due


def test_an_occurrence_already_submitted_is_never_submitted_again(db, client, queue):
    client.set_schedule("every", queue, "ping", YEARLY)
    move_back(db, "every")
    assert client.tick() == 1
    first = schedule_of(client, "every")
    # As if the schedule's advance were lost: its next occurrence is the one submitted.
    move_back(db, "every", first.next_run_at - first.last_run_at)
    assert client.tick() == 0
    again = schedule_of(client, "every")
    assert (again.last_job_id, again.next_run_at) == (first.last_job_id, first.next_run_at)
    assert len(jobs_of(db, "every")) == 1


def test_an_occurrence_whose_active_key_is_held_is_skipped_not_forced(db, client, queue):
    client.set_schedule("sync", queue, "sync", YEARLY, active_key="sync")
    holder = client.submit(queue, "manual", active_key="sync")
    move_back(db, "sync")
    assert client.tick() == 0
    skipped = schedule_of(client, "sync")
    assert skipped.last_job_id is None and skipped.next_run_at > datetime.now(timezone.utc)  # advanced
    assert client.get_job(holder).status == "pending"  # not cancelled
    assert client.cancel(holder) == "cancelled"  # the key is free again
    move_back(db, "sync")
    assert client.tick() == 1
    assert client.get_job(schedule_of(client, "sync").last_job_id).active_key == "sync"


def test_schedules_sharing_an_active_key_submit_one_job_per_tick(db, client, queue):
    for name in ("a", "b", "c"):
        client.set_schedule(name, queue, "t", YEARLY, active_key="shared")
        move_back(db, name)
    assert client.tick() == 1
    assert [s.last_job_id is not None for s in client.schedules()].count(True) == 1


def test_paused_schedules_are_not_ticked_and_resume_from_now(db, client, queue):
    client.set_schedule("s", queue, "t", YEARLY)
    move_back(db, "s")
    assert client.set_schedule("s", queue, "t", YEARLY, paused=True) is True
    assert schedule_of(client, "s").next_run_at is None
    assert client.tick() == 0
    before = datetime.now(timezone.utc)
    assert client.set_schedule("s", queue, "t", YEARLY) is True
    assert schedule_of(client, "s").next_run_at > before  # missed ones are not caught up
    assert client.tick() == 0


def test_drop_schedule_keeps_the_jobs_it_submitted(db, client, queue):
    client.set_schedule("s", queue, "t", YEARLY)
    move_back(db, "s")
    client.tick()
    job_id = schedule_of(client, "s").last_job_id
    assert client.drop_schedule("s") is True
    assert client.drop_schedule("s") is False
    assert client.schedules() == []
    assert client.get_job(job_id).status == "pending"
    assert client.tick() == 0


def test_tick_is_bounded_longest_due_first(db, client, queue):
    for n, name in enumerate(["a", "b", "c"]):
        client.set_schedule(name, queue, "t", YEARLY)
        move_back(db, name, THREE_YEARS + timedelta(hours=3 - n))  # a is the longest due
    assert client.tick(max_rows=2) == 2
    assert [s.schedule for s in client.schedules() if s.last_job_id] == ["a", "b"]
    assert client.tick(max_rows=2) == 1


async def test_the_async_client_has_the_schedule_methods(db, queue):
    client = await db.connect_async()
    try:
        assert await client.set_schedule("s", queue, "t", "@hourly") is True
        [shown] = await client.schedules()
        assert shown.cron == "@hourly" and shown.next_run_at.minute == 0
        assert await client.tick(max_rows=10) == 0
        assert await client.drop_schedule("s") is True
    finally:
        await client.close()


async def test_a_worker_ticks_schedules_with_its_reap_duty(db, queue):
    app = fenceq.App(queues=[queue])

    @app.task("scheduled")
    def scheduled(ctx):
        return {"ran": ctx.payload}

    with db.connect() as client:
        client.set_schedule("w", queue, "scheduled", YEARLY, {"n": 1})
        move_back(db, "w")
    worker = fenceq.Worker(app, url=db.url, queues=[queue], reap_interval=0.2, poll_interval=0.05)
    task = asyncio.create_task(worker.run_async())
    client = await db.connect_async()
    try:
        for _ in range(3000):  # a bound on failure only: the job completes as soon as it can
            [shown] = await client.schedules()
            job = shown.last_job_id and await client.get_job(shown.last_job_id)
            if job and job.status == "completed" or task.done():
                break
            await asyncio.sleep(0.02)
        assert job and (job.status, job.result, job.run_at) == ("completed", {"ran": {"n": 1}}, shown.last_run_at)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)
        await client.close()


async def test_a_worker_refused_tick_stops_ticking_and_goes_on_reaping(pg, caplog):
    import logging
    import uuid

    from fenceq._worker_log import LOGGER_NAME

    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    name = f"app_worker_{uuid.uuid4().hex[:8]}"
    pg.sql(f"CREATE ROLE {name} LOGIN IN ROLE fenceq_worker")
    pg.sql("REVOKE EXECUTE ON FUNCTION fenceq.tick(integer) FROM fenceq_worker")  # in this database only
    try:
        with pg.connect() as admin:
            admin.create_queue("served")
            admin.create_queue("lapsing", backoff_base=timedelta(0))
            lapsing = admin.submit("lapsing", "t")
        worker = fenceq.Worker(fenceq.App(queues=["served"]), url=pg.url.replace("postgres@", f"{name}@", 1),
                               queues=["served"], reap_interval=0.2, poll_interval=0.05)
        task = asyncio.create_task(worker.run_async())
        client = await pg.connect_async()

        def events(name: str) -> int:
            return sum(getattr(record, "event", None) == name for record in caplog.records)

        async def until(condition) -> None:
            for _ in range(3000):  # a bound on failure only
                if await condition() or task.done():
                    return
                await asyncio.sleep(0.02)

        async def refused() -> bool:
            return events("tick_disabled") > 0

        async def reaped() -> bool:
            return (await client.get_job(lapsing)).status == "pending"

        try:
            await until(refused)
            # A lease that lapses after the refusal: the worker still reaps it.
            await client.claim_next(["lapsing"], "w", fenceq.new_claim_token(), lease=timedelta(milliseconds=200))
            await until(reaped)
            assert await reaped()
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)
            await client.close()
        assert events("tick_disabled") == 1 and events("reap_disabled") == 0
    finally:
        pg.sql(f"DROP OWNED BY {name} CASCADE")
        pg.sql(f"DROP ROLE {name}")


# Racing ticks: real concurrent sessions -------------------------------------

SCHEDULES = 24


def _due_schedules(db, client, queue) -> None:
    for n in range(SCHEDULES):
        client.set_schedule(f"s{n}", queue, "t", YEARLY, active_key=f"k{n % 3}" if n % 2 else None)
        move_back(db, f"s{n}")


def _one_job_per_occurrence(db, client, submitted: int) -> None:
    rows = [row for n in range(SCHEDULES) for row in jobs_of(db, f"s{n}")]
    assert len({sid for _, sid in rows}) == len(rows) == submitted
    shown = client.schedules()
    assert sorted(s.last_job_id for s in shown if s.last_job_id) == sorted(job_id for job_id, _ in rows)
    # Unkeyed schedules all ran; of those sharing a key, one per key.
    assert submitted == SCHEDULES // 2 + 3


def test_concurrent_ticks_make_one_job_per_occurrence(pg):
    with pg.connect() as client:
        client.create_queue("q")
        _due_schedules(pg, client, "q")
        start = threading.Barrier(8)

        def tick() -> int:
            with pg.connect() as own:
                start.wait(timeout=60)
                return sum(own.tick(max_rows=5) for _ in range(6))

        with ThreadPoolExecutor(8) as pool:
            submitted = sum(pool.map(lambda _: tick(), range(8)))
        _one_job_per_occurrence(pg, client, submitted)


def test_a_tick_skips_schedules_another_session_holds_instead_of_waiting(pg):
    with pg.connect() as client:
        client.create_queue("q")
        for name in ("held", "free", "keyed"):
            client.set_schedule(name, "q", "t", YEARLY)
            move_back(pg, name)
        keyed = schedule_of(client, "keyed")
        due = datetime(datetime.now(timezone.utc).year, 1, 1, tzinfo=timezone.utc)
        with psycopg.connect(pg.url) as holder, psycopg.connect(pg.url, autocommit=True) as ticker:
            holder.execute("SELECT 1 FROM fenceq._schedules WHERE schedule = 'held' FOR UPDATE")
            # The identity of keyed's occurrence, as a submit in flight would hold it.
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                           ("fenceq.submission:" + submission_id("keyed", due),))
            ticker.execute("SET lock_timeout = '30s'")  # a tick that waited would fail, not hang
            assert ticker.execute("SELECT fenceq.tick()").fetchone()[0] == 1
            assert schedule_of(client, "keyed").next_run_at == keyed.next_run_at  # still due
        assert client.tick() == 2
        assert all(s.last_job_id for s in client.schedules())


def test_processes_ticking_at_once_make_one_job_per_occurrence(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("q")
        _due_schedules(sqlite_db, client, "q")
        script = ("import sys, fenceq\n"
                  "with fenceq.connect(sys.argv[1]) as c:\n"
                  "    print(sum(c.tick(max_rows=5) for _ in range(6)))\n")
        processes = [subprocess.Popen([sys.executable, "-c", script, sqlite_db.url], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(4)]
        submitted = 0
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            submitted += int(out)
        _one_job_per_occurrence(sqlite_db, client, submitted)


def test_sqlite_tick_leaves_an_element_alone_when_its_schedule_changed_since_it_was_read(sqlite_db):
    """A caller that read the due schedules before another tick or a
    set_schedule (tick.sql compares revision and next_run_at)."""
    import contextlib
    import sqlite3

    from fenceq.backends.sqlite import load_script

    with sqlite_db.connect() as client:
        client.create_queue("q")
        client.set_schedule("s", "q", "t", YEARLY)
        move_back(sqlite_db, "s")
    with contextlib.closing(sqlite3.connect(database_path(sqlite_db.url), isolation_level=None)) as conn:
        [due] = [dict(zip([d[0] for d in cursor.description][3:], row[3:]))
                 for cursor in [conn.execute(load_script("tick_due")[0].sql, {"max_rows": 10})]
                 for row in cursor.fetchall()]
        now = datetime.fromisoformat(due["now"])
        occurrence = datetime(now.year, 1, 1, tzinfo=timezone.utc)
        element = {"schedule": "s", "revision": due["revision"], "next_run_at": due["next_run_at"],
                   "occurrence": canonical.utc_text(occurrence),
                   "following": canonical.utc_text(occurrence.replace(year=now.year + 1)),
                   "fingerprint": canonical.fingerprint(
                       queue="q", task="t", payload=None, submission_id=submission_id("s", occurrence),
                       job_id=None, priority=None, run_at=occurrence, expires_at=None, max_attempts=None,
                       active_key=None, force=False)}

        def run(ticks) -> int:
            conn.execute("BEGIN IMMEDIATE")
            for statement in load_script("tick"):
                cursor = conn.execute(statement.sql, {"max_rows": 10, "ticks": json.dumps(ticks)})
            row = cursor.fetchone()
            conn.execute("COMMIT")
            assert row[0] is None, row
            return row[3]

        assert run([{**element, "revision": due["revision"] + 1}]) == 0
        assert run([{**element, "next_run_at": element["following"]}]) == 0
        assert run([{**element, "occurrence": canonical.utc_text(now + timedelta(hours=1))}]) == 0
        assert run([element, element]) == 1  # one element per schedule counts
        assert run([element]) == 0  # already advanced
    with sqlite_db.connect() as client:
        assert len(jobs_of(sqlite_db, "s")) == 1


# Roles (PostgreSQL) -----------------------------------------------------------

def test_workers_tick_and_read_schedules_and_only_admins_set_them(pg):
    import uuid

    with pg.connect() as admin:
        admin.create_queue("q")
        admin.set_schedule("s", "q", "t", YEARLY)
    name = f"app_worker_{uuid.uuid4().hex[:8]}"
    pg.sql(f"CREATE ROLE {name} LOGIN IN ROLE fenceq_worker")
    try:
        with fenceq.connect(pg.url.replace("postgres@", f"{name}@", 1)) as worker:
            assert worker.tick() == 0
            assert [s.schedule for s in worker.schedules()] == ["s"]
            with raises_code("42501"):
                worker.set_schedule("s", "q", "t", "@daily")
            with raises_code("42501"):
                worker.drop_schedule("s")
    finally:
        pg.sql(f"DROP OWNED BY {name} CASCADE")
        pg.sql(f"DROP ROLE {name}")
