"""Django's task framework on fenceq (docs/integrations.md#django):
``FenceqBackend`` enqueues ``@task`` functions as fenceq jobs, in the
transaction of Django's PostgreSQL connection when it has one, and answers
``get_result`` from the job; a fenceq worker runs them with the App of
``worker_app`` (``manage.py fenceq_worker``, or ``fenceq worker
fenceq.contrib.django``). As an installed app (``"fenceq.contrib.django"``,
label ``fenceq``) it brings that command and Django migrations that apply
fenceq's own (``schema.py``).

Django 6 ships the framework as ``django.tasks``; on Django 4.2 to 5.2 the
``django-tasks`` package provides the same API as ``django_tasks``, used
when ``django.tasks`` is absent.

    TASKS = {"default": {"BACKEND": "fenceq.contrib.django.FenceqBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"DATABASE": "default"}}}

A job's task is the Django task's module path, its payload
``{"args": [...], "kwargs": {...}}``, its queue the task's ``queue_name``,
its priority and ``run_at`` the task's ``priority`` and ``run_after``.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

from django.core import checks
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string
from django.utils.timezone import now

from ...client import connect, resolve_url
from ...tasks import DatabaseClients
from ...types import Job
from ...worker.app import App
from .databases import connection_in_transaction, database_named_by, database_url, joinable

try:
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.base import Task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # before Django 6: the django-tasks package
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.base import Task
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

STATUSES = {"pending": TaskResultStatus.READY, "claimed": TaskResultStatus.RUNNING,
            "completed": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED,
            "cancelled": TaskResultStatus.FAILED, "expired": TaskResultStatus.FAILED}
# The checkpoint step where a failed attempt records its exception's class, for TaskError.exception_class.
EXCEPTION_STEP = "django.exception_class.{attempt}"
# The TASKS alias whose tasks `fenceq worker fenceq.contrib.django` runs (manage.py fenceq_worker sets it).
BACKEND_VARIABLE = "FENCEQ_DJANGO_BACKEND"


def _class_path(error: BaseException) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


class FenceqBackend(BaseTaskBackend):
    """A Django task backend whose tasks are fenceq jobs. ``OPTIONS``:

    - ``DATABASE``: a Django database alias. When it is PostgreSQL (psycopg
      3), ``enqueue`` submits on its connection, in the atomic block open
      there (else in autocommit, committed at once, as a row would be).
    - ``URL``: fenceq's database for fenceq's own connections (``get_result``,
      ``aenqueue``, the worker, and ``enqueue`` when no transaction can be
      joined). Default: the ``DATABASE``'s when it is PostgreSQL, else
      ``$FENCEQ_DATABASE_URL``, else ./fenceq.db. Without ``DATABASE``,
      enqueues join the transactions of the PostgreSQL database of
      ``DATABASES`` that this URL names (``databases.database_named_by``).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @functools.cached_property
    def transaction_database(self) -> str | None:
        """The alias of the Django database whose transactions enqueues join;
        None: they commit on fenceq's own connection."""
        alias = self.options.get("DATABASE")
        if alias is None:
            return database_named_by(self.url)
        return alias if joinable(alias) else None

    @functools.cached_property
    def url(self) -> str:
        """fenceq's database, for fenceq's own connections."""
        alias = self.options.get("DATABASE")
        if self.options.get("URL") or alias is None or not joinable(alias):
            return resolve_url(self.options.get("URL"))
        return database_url(connections[alias].settings_dict)

    @functools.cached_property
    def _clients(self) -> DatabaseClients:
        return DatabaseClients(self.url)

    def queue_names(self) -> list[str]:
        """The queues its tasks go to: ``QUEUES`` (Django's default: "default")."""
        return sorted(self.queues) or [DEFAULT_TASK_QUEUE_NAME]

    def _submission(self, task: Any, args: Any, kwargs: Any) -> tuple[tuple, dict[str, Any]]:
        self.validate_task(task)
        return ((task.queue_name, task.module_path, {"args": list(args), "kwargs": dict(kwargs)}),
                {"priority": task.priority, "run_at": task.run_after})

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        positional, options = self._submission(task, args, kwargs)
        alias = self.transaction_database
        if alias is None:
            job_id = self._clients.client().submit(*positional, **options)
        else:
            with connect(connection=connection_in_transaction(alias)) as client:
                job_id = client.submit(*positional, **options)
        return self._enqueued(task, job_id, args, kwargs)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """On fenceq's own async connection, committed at once: Django's
        connections are sync, and async code holds no transaction to join."""
        positional, options = self._submission(task, args, kwargs)
        job_id = await (await self._clients.async_client()).submit(*positional, **options)
        return self._enqueued(task, job_id, args, kwargs)

    def _enqueued(self, task: Any, job_id: str, args: Any, kwargs: Any) -> Any:
        result = TaskResult(task=task, id=job_id, status=TaskResultStatus.READY, enqueued_at=now(), started_at=None,
                            finished_at=None, last_attempted_at=None, args=list(args), kwargs=dict(kwargs),
                            backend=self.alias, errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        client = self._clients.client()
        job = client.get_job(result_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        checkpoints = client.checkpoints(result_id) if STATUSES[job.status] is TaskResultStatus.FAILED else []
        return self._result(job, client.attempts(result_id), checkpoints)

    async def aget_result(self, result_id: str) -> Any:
        client = await self._clients.async_client()
        job = await client.get_job(result_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        failed = STATUSES[job.status] is TaskResultStatus.FAILED
        return self._result(job, await client.attempts(result_id),
                            await client.checkpoints(result_id) if failed else [])

    def _result(self, job: Job, attempts: list, checkpoints: list) -> Any:
        status = STATUSES[job.status]
        errors = []
        if status is TaskResultStatus.FAILED:
            recorded = {checkpoint.step: checkpoint.value for checkpoint in checkpoints}
            path = recorded.get(EXCEPTION_STEP.format(attempt=job.attempts), "builtins.Exception")
            errors.append(TaskError(exception_class_path=path, traceback=job.last_error or job.status))
        payload = job.payload or {}
        result = TaskResult(task=import_string(job.task), id=job.job_id, status=status,
                            enqueued_at=job.created_at,
                            started_at=attempts[0].claimed_at if attempts else None,
                            finished_at=job.finished_at,
                            last_attempted_at=attempts[-1].claimed_at if attempts else None,
                            args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=self.alias,
                            errors=errors, worker_ids=[attempt.owner_id for attempt in attempts])
        if status is TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", job.result)
        return result

    def close(self) -> None:
        """Close the sync client (``task_backends.close_all()`` calls it)."""
        if "_clients" in self.__dict__:
            self._clients.close()

    def check(self, **kwargs: Any) -> list:
        """Django's system checks: a ``DATABASE`` that is not in ``DATABASES``,
        or whose transactions enqueues cannot join."""
        alias = self.options.get("DATABASE")
        if alias is None:
            return []
        if alias not in connections.settings:
            return [checks.Error(f"OPTIONS['DATABASE'] of the task backend {self.alias!r} names {alias!r}, "
                                 "which is not in DATABASES", id="fenceq.E001")]
        if not joinable(alias):
            return [checks.Warning(
                f"The database {alias!r} of the task backend {self.alias!r} is not PostgreSQL on psycopg 3: "
                "its enqueues commit at once on fenceq's own connection, outside that database's transactions",
                hint="docs/integrations.md#django", id="fenceq.W001")]
        return []


class DjangoTasksApp(App):
    """The App a fenceq worker runs Django tasks with: a job's task names a
    Django task by its module path, imported when first claimed."""

    def __init__(self, alias: str = "default"):
        backend = task_backends[alias]
        super().__init__(f"django:{alias}", queues=backend.queue_names(), url=backend.url)
        self.alias = alias

    def handler(self, name: str) -> Any:
        known = super().handler(name)
        if known is None:
            try:
                task = import_string(name)
            except ImportError:
                task = None
            if not isinstance(task, Task):
                return None  # the worker fails the job: no handler for it
            known = self._handler(task)
            self.register(name, known)
        return known

    def _handler(self, task: Any) -> Any:
        def context_of(ctx: Any) -> tuple:
            if not task.takes_context:
                return ()
            result = TaskResult(task=task, id=ctx.job_id, status=TaskResultStatus.RUNNING, enqueued_at=None,
                                started_at=None, finished_at=None, last_attempted_at=None,
                                args=ctx.payload["args"], kwargs=ctx.payload["kwargs"], backend=self.alias,
                                errors=[], worker_ids=[ctx.owner_id] * ctx.attempt)
            return (TaskContext(task_result=result),)

        if inspect.iscoroutinefunction(task.func):
            async def handler(ctx: Any) -> Any:
                try:
                    return await task.func(*context_of(ctx), *ctx.payload["args"], **ctx.payload["kwargs"])
                except Exception as error:
                    path = _class_path(error)
                    await ctx.checkpoint(EXCEPTION_STEP.format(attempt=ctx.attempt), lambda: path)
                    raise
        else:
            def handler(ctx: Any) -> Any:
                # As around a request: the handler thread's Django connections are
                # not kept past CONN_MAX_AGE, nor reused once broken.
                close_old_connections()
                try:
                    return task.func(*context_of(ctx), *ctx.payload["args"], **ctx.payload["kwargs"])
                except Exception as error:
                    path = _class_path(error)
                    ctx.checkpoint(EXCEPTION_STEP.format(attempt=ctx.attempt), lambda: path)
                    raise
                finally:
                    close_old_connections()
        return handler


def worker_app(alias: str = "default") -> DjangoTasksApp:
    """The App to run the tasks of the backend ``alias`` with (Django set up)."""
    return DjangoTasksApp(alias)


def __getattr__(name: str) -> Any:
    """``fenceq worker fenceq.contrib.django`` loads ``app``: the App of the
    backend ``$FENCEQ_DJANGO_BACKEND`` (default "default"), Django set up
    first when it is not ($DJANGO_SETTINGS_MODULE)."""
    if name != "app":
        raise AttributeError(name)
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()
    return worker_app(os.environ.get(BACKEND_VARIABLE, "default"))
