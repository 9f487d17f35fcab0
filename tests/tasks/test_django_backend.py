"""fenceq.contrib.django (docs/integrations.md#django): Django's task
framework enqueues fenceq jobs, a fenceq worker runs them, and get_result
answers from the job (both engines); an enqueue joins the transaction of
Django's PostgreSQL database (its test database from pytest-postgresql,
as Django's test runner would point it there); Django's migrate installs
fenceq; the example project passes its own tests. Skipped where neither
Django 6's django.tasks nor the django-tasks package is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

django = pytest.importorskip("django")
try:
    import django.tasks as tasks_framework
except ImportError:
    tasks_framework = pytest.importorskip("django_tasks")

from conftest import PG_PORT, pg_url  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.db.transaction import TransactionManagementError  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

import fenceq  # noqa: E402
from fenceq.testing import DatabaseMode  # noqa: E402

BACKEND = {"BACKEND": "fenceq.contrib.django.FenceqBackend", "QUEUES": ["default", "emails"]}
UNSET = "fenceq_django_unset"  # Django's default database until a test points it at its own
if not settings.configured:
    settings.configure(
        USE_TZ=True, INSTALLED_APPS=["fenceq.contrib.django"], TASKS={"default": BACKEND},
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "HOST": "127.0.0.1",
                               "PORT": str(PG_PORT), "USER": "postgres", "NAME": UNSET},
                   "sqlite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})
    django.setup()

import mailer_tasks  # noqa: E402 - its @task needs the settings above
from fenceq.backends.migrations import migration_ids  # noqa: E402
from fenceq.contrib.django import DjangoTasksApp, FenceqBackend, TaskResultDoesNotExist, worker_app  # noqa: E402
from fenceq.contrib.django.databases import database_url  # noqa: E402

PATIENCE = 60.0  # seconds: bounds a failure only
ROOT = Path(__file__).resolve().parents[2]

Status = tasks_framework.TaskResultStatus


@pytest.fixture
def backend(db):
    """The backend on the test's database, and a fenceq worker running its tasks."""
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": {"URL": db.url}}}), \
            DatabaseMode(worker_app(), db.url):
        yield tasks_framework.task_backends["default"]
        tasks_framework.task_backends.close_all()


def finished(result, db):
    with db.connect() as client:
        client.wait(result.id, timeout=PATIENCE)
    result.refresh()
    return result


def test_a_task_is_enqueued_as_a_job_and_its_result_read_back(backend, db):
    assert isinstance(backend, FenceqBackend)
    result = mailer_tasks.send_welcome.enqueue("a@example.com", greeting="Hi")
    assert (result.status, result.backend, result.args, result.kwargs) == \
        (Status.READY, "default", ["a@example.com"], {"greeting": "Hi"})
    with db.connect() as client:
        job = client.get_job(result.id)
    assert (job.queue, job.task, job.priority) == ("emails", "mailer_tasks.send_welcome", 10)
    assert job.payload == {"args": ["a@example.com"], "kwargs": {"greeting": "Hi"}}
    assert finished(result, db).return_value == {"sent": "Hi, a@example.com"}
    again = mailer_tasks.send_welcome.get_result(result.id)
    assert (again.status, again.attempts, again.return_value) == (Status.SUCCESSFUL, 1, {"sent": "Hi, a@example.com"})
    assert again.worker_ids and again.finished_at is not None and again.started_at is not None


def test_context_async_tasks_and_deferral(backend, db):
    with_context = mailer_tasks.attempts_so_far.enqueue("first")
    assert finished(with_context, db).return_value == ["first", 1, with_context.id]
    assert finished(mailer_tasks.shout.enqueue("quiet"), db).return_value == "QUIET"
    deferred = mailer_tasks.send_welcome.using(run_after=django.utils.timezone.now() + timedelta(hours=1))
    later = deferred.enqueue("b@example.com")
    with db.connect() as client:
        assert client.get_job(later.id).run_at > django.utils.timezone.now() + timedelta(minutes=59)
    assert later.status == Status.READY


def test_a_failure_carries_its_exception_class_and_traceback(backend, db):
    with db.connect() as client:
        client.alter_queue("emails", max_attempts=1)
    result = finished(mailer_tasks.bounce.enqueue("nobody@example.com"), db)
    assert result.status == Status.FAILED
    assert result.errors[0].exception_class is mailer_tasks.Bounced
    assert "Bounced: nobody@example.com" in result.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value


async def test_async_enqueue_and_get_result(backend, db):
    result = await mailer_tasks.shout.aenqueue("async")
    with db.connect() as client:
        client.wait(result.id, timeout=PATIENCE)
    assert (await mailer_tasks.shout.aget_result(result.id)).return_value == "ASYNC"


def test_an_unknown_result_does_not_exist(backend):
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("00000000-0000-0000-0000-000000000000")


def test_the_worker_app_loads_from_the_command_lines_spelling():
    from fenceq.worker.app import load_app

    app = load_app("fenceq.contrib.django")
    assert isinstance(app, DjangoTasksApp) and app.queues == ["default", "emails"]
    assert app.handler("mailer_tasks.no_such_task") is None and app.handler("mailer_tasks.Bounced") is None
    assert app.handler("mailer_tasks.send_welcome") is app.handler("mailer_tasks.send_welcome")


# Enqueues in Django's transaction -----------------------------------------------------


class Rollback(Exception):
    pass


def point_django_at(dbname: str) -> None:
    """Django's default database is ``dbname``, as Django's test runner
    points it at its test database."""
    connections["default"].close()
    settings.DATABASES["default"]["NAME"] = connections["default"].settings_dict["NAME"] = dbname


@pytest.fixture
def django_db(pg):
    point_django_at(psycopg.conninfo.conninfo_to_dict(pg.url)["dbname"])
    yield pg
    connections.close_all()
    point_django_at(UNSET)


@pytest.fixture
def joined(django_db):
    """The backend with DATABASE "default" (Django's default database is
    the test's PostgreSQL database), and a fenceq worker running its tasks."""
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": {"DATABASE": "default"}}}), \
            DatabaseMode(worker_app(), django_db.url, concurrency=1):
        yield tasks_framework.task_backends["default"]
        tasks_framework.task_backends.close_all()


def with_queues(db):
    with db.connect() as client:
        for queue in BACKEND["QUEUES"]:
            client.create_queue(queue)
    return db


def job_seen_from_outside(db, job_id):
    """The job as another connection sees it: committed, or None."""
    with db.connect() as client:
        return client.get_job(job_id)


def test_the_backend_joins_djangos_database_and_reaches_it_by_its_settings(joined, django_db):
    assert joined.transaction_database == "default"
    assert joined.url == database_url(connections["default"].settings_dict)
    assert psycopg.conninfo.conninfo_to_dict(joined.url) == {
        "dbname": psycopg.conninfo.conninfo_to_dict(django_db.url)["dbname"], "user": "postgres",
        "host": "127.0.0.1", "port": str(PG_PORT)}
    assert joined.check() == []


def test_an_enqueue_in_an_atomic_block_that_rolls_back_leaves_no_job(joined, django_db):
    with pytest.raises(Rollback), transaction.atomic():
        result = mailer_tasks.send_welcome.enqueue("rolled@example.com")
        assert job_seen_from_outside(django_db, result.id) is None  # not committed yet
        raise Rollback
    assert job_seen_from_outside(django_db, result.id) is None
    with pytest.raises(TaskResultDoesNotExist):
        mailer_tasks.send_welcome.get_result(result.id)


def test_an_enqueue_in_an_atomic_block_that_commits_is_run_and_read_back(joined, django_db):
    with transaction.atomic():
        result = mailer_tasks.send_welcome.enqueue("kept@example.com", greeting="Welcome")
        assert job_seen_from_outside(django_db, result.id) is None
    assert finished(result, django_db).return_value == {"sent": "Welcome, kept@example.com"}
    again = mailer_tasks.send_welcome.get_result(result.id)
    assert (again.status, again.args, again.return_value) == \
        (Status.SUCCESSFUL, ["kept@example.com"], {"sent": "Welcome, kept@example.com"})


def test_outside_an_atomic_block_the_enqueue_commits_at_once(joined, django_db):
    result = mailer_tasks.send_welcome.enqueue("autocommit@example.com")
    assert job_seen_from_outside(django_db, result.id) is not None


def test_a_savepoint_rolled_back_takes_only_its_own_job(joined, django_db):
    with transaction.atomic():
        kept = mailer_tasks.send_welcome.enqueue("outer@example.com")
        with pytest.raises(Rollback), transaction.atomic():
            dropped = mailer_tasks.send_welcome.enqueue("inner@example.com")
            raise Rollback
    assert job_seen_from_outside(django_db, kept.id) is not None
    assert job_seen_from_outside(django_db, dropped.id) is None


def test_a_transaction_marked_for_rollback_refuses_the_enqueue_as_it_refuses_a_query(joined):
    with transaction.atomic():
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            mailer_tasks.send_welcome.enqueue("broken@example.com")


async def test_aenqueue_commits_at_once_on_fenceqs_own_connection(joined, django_db):
    result = await mailer_tasks.shout.aenqueue("async")
    assert job_seen_from_outside(django_db, result.id) is not None
    with django_db.connect() as client:
        client.wait(result.id, timeout=PATIENCE)
    assert (await mailer_tasks.shout.aget_result(result.id)).return_value == "ASYNC"


async def test_a_joined_enqueue_from_async_code_is_refused_as_a_query_is(joined):
    from django.core.exceptions import SynchronousOnlyOperation

    with pytest.raises(SynchronousOnlyOperation):
        mailer_tasks.shout.enqueue("sync from async")


def test_a_sync_task_leaves_no_django_connection_open_for_the_next(joined, django_db):
    first = finished(mailer_tasks.reuses_a_django_connection.enqueue(), django_db)
    second = finished(mailer_tasks.reuses_a_django_connection.enqueue(), django_db)
    assert (first.return_value, second.return_value) == (False, False)


def test_a_url_naming_djangos_database_joins_its_transactions(django_db):
    with_queues(django_db)
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": {"URL": django_db.url}}}):
        backend = tasks_framework.task_backends["default"]
        assert backend.transaction_database == "default"
        with pytest.raises(Rollback), transaction.atomic():
            result = mailer_tasks.send_welcome.enqueue("named@example.com")
            raise Rollback
        assert job_seen_from_outside(django_db, result.id) is None
        tasks_framework.task_backends.close_all()


def test_another_database_takes_the_enqueue_at_once_whatever_djangos_transaction_does(django_db, sqlite_db):
    with_queues(sqlite_db)
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": {"URL": sqlite_db.url}}}):
        assert tasks_framework.task_backends["default"].transaction_database is None
        with pytest.raises(Rollback), transaction.atomic():
            result = mailer_tasks.send_welcome.enqueue("elsewhere@example.com")
            raise Rollback
        assert job_seen_from_outside(sqlite_db, result.id) is not None
        tasks_framework.task_backends.close_all()


def test_a_database_that_cannot_be_joined_is_reported_by_the_checks(sqlite_db):
    with_queues(sqlite_db)
    options = {"DATABASE": "sqlite", "URL": sqlite_db.url}
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": options},
                                  "unknown": {**BACKEND, "OPTIONS": {"DATABASE": "nowhere"}}}):
        backend = tasks_framework.task_backends["default"]
        assert [message.id for message in backend.check()] == ["fenceq.W001"]
        assert [message.id for message in tasks_framework.task_backends["unknown"].check()] == ["fenceq.E001"]
        assert backend.transaction_database is None
        with pytest.raises(Rollback), transaction.atomic(using="sqlite"):
            result = mailer_tasks.send_welcome.enqueue("sqlite@example.com")
            raise Rollback
        assert job_seen_from_outside(sqlite_db, result.id) is not None
        tasks_framework.task_backends.close_all()


# Django's migrate, and the management command -------------------------------------------


@pytest.fixture
def empty_django_db(pg):
    """Django's default database is a new, empty one (no fenceq yet)."""
    name = "fenceq_django_empty_" + uuid.uuid4().hex[:12]
    pg.sql(f"CREATE DATABASE {name}")
    point_django_at(name)
    yield pg_url(name)
    connections.close_all()
    point_django_at(UNSET)
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def fenceq_installed(url: str) -> bool:
    with psycopg.connect(url) as connection:
        return connection.execute("SELECT to_regnamespace('fenceq') IS NOT NULL").fetchone()[0]


def steps_recorded(url: str) -> list[str]:
    """The steps applied as `fenceq migrate` records them."""
    with psycopg.connect(url) as connection:
        return [row[0] for row in connection.execute(
            "SELECT migration_id FROM fenceq_migrations._yoyo_migration ORDER BY migration_id")]


def test_djangos_migrate_installs_fenceq_and_the_backends_queues_and_migrates_back(empty_django_db):
    with override_settings(TASKS={"default": {**BACKEND, "OPTIONS": {"DATABASE": "default"}}}):
        call_command("migrate", "fenceq", verbosity=0)
        with fenceq.connect(empty_django_db) as client:
            assert all(check.ok for check in client.verify_schema())
            assert {queue.queue for queue in client.queue_overview()} == {"default", "emails"}
        assert steps_recorded(empty_django_db) == migration_ids("postgres")
        call_command("migrate", "fenceq", "zero", verbosity=0)
        assert not fenceq_installed(empty_django_db)
        tasks_framework.task_backends.close_all()


def test_the_django_migrations_reach_fenceqs_newest_schema_version():
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    newest = max((name for app, name in loader.disk_migrations if app == "fenceq"))
    operation, = loader.disk_migrations["fenceq", newest].operations
    assert operation.version == int(migration_ids("postgres")[-1].split("_", 1)[0])


def test_the_worker_command_refuses_a_backend_that_is_not_fenceqs():
    dummy = f"{tasks_framework.__name__}.backends.dummy.DummyBackend"
    with override_settings(TASKS={"default": BACKEND, "other": {"BACKEND": dummy}}):
        with pytest.raises(CommandError, match="not fenceq's"):
            call_command("fenceq_worker", "--backend", "other")
        with pytest.raises(CommandError, match="nowhere"):
            call_command("fenceq_worker", "--backend", "nowhere")


# The example project ----------------------------------------------------------------------


def test_the_example_project_passes_its_own_tests(pg):
    """examples/django's tests (Django's test runner and test client, its
    worker started as the README starts it) on the test server."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FENCEQ_", "DJANGO_"))}
    env.update(PGHOST="127.0.0.1", PGPORT=str(PG_PORT), PGUSER="postgres",
               PGDATABASE=f"fenceq_django_example_{os.getpid()}")
    example = ROOT / "examples" / "django"
    done = subprocess.run([sys.executable, "manage.py", "test", "signups", "--noinput"], cwd=example, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "Ran 2 tests" in done.stderr and "\nOK\n" in done.stderr, done.stderr
