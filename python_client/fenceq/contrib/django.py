"""Django's task framework on fenceq (docs/integrations.md#django):
``FenceqBackend`` enqueues ``@task`` functions as fenceq jobs and answers
``get_result`` from the job; a fenceq worker runs them with the App of
``worker_app`` (``fenceq worker fenceq.contrib.django``).

Django 6 ships the framework as ``django.tasks``; on Django 4.2 to 5.2 the
``django-tasks`` package provides the same API as ``django_tasks``, used
when ``django.tasks`` is absent.

    TASKS = {"default": {"BACKEND": "fenceq.contrib.django.FenceqBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"URL": "postgresql://app@db/app"}}}

A job's task is the Django task's module path, its payload
``{"args": [...], "kwargs": {...}}``, its queue the task's ``queue_name``,
its priority and ``run_at`` the task's ``priority`` and ``run_after``.
"""

from __future__ import annotations

import inspect
from typing import Any

from django.utils.module_loading import import_string
from django.utils.timezone import now

from ..tasks import DatabaseClients
from ..types import Job
from ..worker.app import App

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.base import Task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # before Django 6: the django-tasks package
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.base import Task
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

STATUSES = {"pending": TaskResultStatus.READY, "claimed": TaskResultStatus.RUNNING,
            "completed": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED,
            "cancelled": TaskResultStatus.FAILED, "expired": TaskResultStatus.FAILED}
# The checkpoint step where a failed attempt records its exception's class, for TaskError.exception_class.
EXCEPTION_STEP = "django.exception_class.{attempt}"


def _class_path(error: BaseException) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


class FenceqBackend(BaseTaskBackend):
    """A Django task backend whose tasks are fenceq jobs. ``OPTIONS``:
    ``URL`` (default: ``$FENCEQ_DATABASE_URL``, else ./fenceq.db)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self._clients = DatabaseClients(self.options.get("URL"))

    def _submission(self, task: Any, args: Any, kwargs: Any) -> tuple[tuple, dict[str, Any]]:
        self.validate_task(task)
        return ((task.queue_name, task.module_path, {"args": list(args), "kwargs": dict(kwargs)}),
                {"priority": task.priority, "run_at": task.run_after})

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        positional, options = self._submission(task, args, kwargs)
        job_id = self._clients.client().submit(*positional, **options)
        return self._enqueued(task, job_id, args, kwargs)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
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
        self._clients.close()


class DjangoTasksApp(App):
    """The App a fenceq worker runs Django tasks with: a job's task names a
    Django task by its module path, imported when first claimed."""

    def __init__(self, alias: str = "default"):
        backend = task_backends[alias]
        super().__init__(f"django:{alias}", queues=sorted(backend.queues) or ["default"],
                         url=backend.options.get("URL"))
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
                try:
                    return task.func(*context_of(ctx), *ctx.payload["args"], **ctx.payload["kwargs"])
                except Exception as error:
                    path = _class_path(error)
                    ctx.checkpoint(EXCEPTION_STEP.format(attempt=ctx.attempt), lambda: path)
                    raise
        return handler


def worker_app(alias: str = "default") -> DjangoTasksApp:
    """The App to run the tasks of the backend ``alias`` with (Django set up)."""
    return DjangoTasksApp(alias)


def __getattr__(name: str) -> Any:
    """``fenceq worker fenceq.contrib.django`` loads ``app``: the default
    backend's, after ``django.setup()`` ($DJANGO_SETTINGS_MODULE)."""
    if name != "app":
        raise AttributeError(name)
    import django

    django.setup()
    return worker_app()
