"""fenceq.contrib.django (docs/integrations.md#django): Django's task
framework enqueues fenceq jobs, a fenceq worker runs them, and get_result
answers from the job. Both engines. Skipped where neither Django 6's
django.tasks nor the django-tasks package is installed."""

from __future__ import annotations

from datetime import timedelta

import pytest

django = pytest.importorskip("django")
try:
    import django.tasks as tasks_framework
except ImportError:
    tasks_framework = pytest.importorskip("django_tasks")

from django.conf import settings  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

from fenceq.testing import DatabaseMode  # noqa: E402

BACKEND = {"BACKEND": "fenceq.contrib.django.FenceqBackend", "QUEUES": ["default", "emails"]}
if not settings.configured:
    settings.configure(USE_TZ=True, INSTALLED_APPS=[], TASKS={"default": BACKEND})
    django.setup()

import mailer_tasks  # noqa: E402 - its @task needs the settings above
from fenceq.contrib.django import DjangoTasksApp, FenceqBackend, TaskResultDoesNotExist, worker_app  # noqa: E402

PATIENCE = 60.0  # seconds: bounds a failure only

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
