"""Typed tasks (docs/tasks.md): ``@app.task`` answers a ``Task``, whose
``submit`` checks the call against the handler's signature, sends it as a
job and answers a ``JobHandle`` (``id``, ``status()``, ``wait()``).

Submissions go through the App's ``Submitter``: ``DatabaseClients`` (a sync
``Client`` and an ``AsyncClient`` per event loop, opened when first used)
unless a ``fenceq.testing`` mode has put its own in place.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import weakref
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from .client import AsyncClient, Client, Transaction, connect, connect_async, resolve_url
from .errors import config_error
from .signatures import TaskSignature
from .types import Job

# The keywords of ``Task.options`` that are ``Client.submit``'s own.
SUBMIT_OPTIONS = frozenset({"submission_id", "job_id", "priority", "run_at", "expires_at", "max_attempts",
                            "active_key", "force", "concurrency_key", "depends_on"})
# Options that name one job: a batch cannot share them.
ONE_JOB_OPTIONS = frozenset({"submission_id", "job_id", "active_key"})


class TaskError(Exception):
    """A job that did not complete, as ``JobHandle.wait`` reports it: the
    ``job`` (None when it is gone), its ``job_id``, ``status`` and
    ``last_error`` (the error text the worker stored). In the in-process
    testing modes the handler's own exception is the ``__cause__``."""

    def __init__(self, job_id: str, job: Job | None):
        self.job_id = job_id
        self.job = job
        self.status = job.status if job else None
        self.last_error = job.last_error if job else None
        reason = (self.last_error or "").split("\n", 1)[0]
        super().__init__(f"fenceq: job {job_id} {self.status or 'does not exist'}" + (f": {reason}" if reason else ""))


class TaskFailed(TaskError):
    """The job failed (its attempts are spent, or it raised ``NonRetryable``)."""


class TaskCancelled(TaskError):
    """The job was cancelled."""


class TaskExpired(TaskError):
    """The job expired before it ran (its ``expires_at`` passed)."""


class TaskMissing(TaskError):
    """There is no such job: never submitted there, or purged."""


_OUTCOME_ERRORS = {"failed": TaskFailed, "cancelled": TaskCancelled, "expired": TaskExpired}


def outcome(job_id: str, job: Job | None, cause: BaseException | None = None) -> Any:
    """A finished job's result, or its ``TaskError``."""
    if job is None:
        raise TaskMissing(job_id, None)
    if job.status == "completed":
        return job.result
    raise _OUTCOME_ERRORS[job.status](job_id, job) from cause


class Submitter(Protocol):
    """Where an App's tasks are submitted and their jobs read."""

    in_process: bool  # a fenceq.testing mode: it takes every submission, using() ones too

    def client(self) -> Any: ...

    async def async_client(self) -> Any: ...

    def now(self) -> datetime:
        """The clock a ``delay`` counts from."""

    def submitted(self, job_ids: list[str]) -> None:
        """Called after a sync submission (inline testing runs the jobs here)."""

    async def submitted_async(self, job_ids: list[str]) -> None: ...

    def finished(self, job_id: str, timeout: Any) -> Any:
        """The job's result once it finished, or its ``TaskError``."""

    async def finished_async(self, job_id: str, timeout: Any) -> Any: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class DatabaseClients:
    """An App's clients to its database: a sync ``Client`` and one
    ``AsyncClient`` per event loop (an async connection belongs to the
    loop that opened it), each opened when first used."""

    in_process = False

    def __init__(self, url: str | None):
        self.url = url
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = \
            weakref.WeakKeyDictionary()

    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = connect(resolve_url(self.url))
            return self._client

    async def async_client(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            client = await connect_async(resolve_url(self.url))
            self._async_clients[loop] = client
        return client

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def submitted(self, job_ids: list[str]) -> None:
        pass  # a worker runs them

    async def submitted_async(self, job_ids: list[str]) -> None:
        pass

    def finished(self, job_id: str, timeout: Any) -> Any:
        return outcome(job_id, self.client().wait(job_id, timeout=timeout))

    async def finished_async(self, job_id: str, timeout: Any) -> Any:
        return outcome(job_id, await (await self.async_client()).wait(job_id, timeout=timeout))

    def close(self) -> None:
        """Close the sync client (an async one is closed by ``aclose`` on its loop)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close this loop's async client, and the sync one."""
        client = self._async_clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()
        self.close()


class JobHandle:
    """A submitted job: ``id``, ``status()`` / ``read()`` (the ``Job``), and
    ``wait(timeout)``, which answers its result once it completed or raises
    its ``TaskError`` (``WaitTimeout`` after ``timeout`` seconds). Each has an
    ``_async`` twin. The reads go through the App's own client, not the
    connection a submission was made on (whose transaction may not have
    committed yet)."""

    def __init__(self, job_id: str, task: "Task", submitter: Submitter):
        self.id = job_id
        self.task = task
        self._submitter = submitter

    def __repr__(self) -> str:
        return f"<JobHandle {self.task.name} {self.id}>"

    def read(self) -> Job | None:
        return self._submitter.client().get_job(self.id)

    async def read_async(self) -> Job | None:
        return await (await self._submitter.async_client()).get_job(self.id)

    def status(self) -> str | None:
        """The job's status now (None when there is no such job)."""
        job = self.read()
        return job.status if job else None

    async def status_async(self) -> str | None:
        job = await self.read_async()
        return job.status if job else None

    def wait(self, timeout: float | timedelta | None = None) -> Any:
        return self._submitter.finished(self.id, timeout)

    async def wait_async(self, timeout: float | timedelta | None = None) -> Any:
        return await self._submitter.finished_async(self.id, timeout)


class Submission:
    """A task with options bound (``Task.options``) and, optionally, the
    connection to submit on (``Task.using``)."""

    def __init__(self, task: "Task", options: Mapping[str, Any], target: Any = None):
        self.task = task
        self._options = dict(options)
        self._target = target

    def options(self, *, queue: str | None = None, delay: timedelta | float | None = None,
                **options: Any) -> "Submission":
        """These options on top of the bound ones: ``queue``, ``delay``
        (seconds or a timedelta from now: the job's ``run_at``) and
        ``Client.submit``'s keywords (``priority``, ``submission_id``,
        ``active_key``, ``depends_on``, ``run_at``, ``max_attempts``, …)."""
        unknown = sorted(set(options) - SUBMIT_OPTIONS)
        if unknown:
            raise config_error("QF100", f"{self.task.name}: {unknown[0]!r} is not a submit option")
        if delay is not None and "run_at" in options:
            raise config_error("QF100", f"{self.task.name}: give delay or run_at, not both")
        extra = {key: value for key, value in (("queue", queue), ("delay", delay)) if value is not None}
        return Submission(self.task, {**self._options, **extra, **options}, self._target)

    def using(self, connection: Any) -> "Submission":
        """Submit on ``connection``, inside its current transaction: the job
        exists only if that transaction commits. A psycopg ``Connection`` /
        ``AsyncConnection`` (or pool), a ``sqlite3.Connection`` with a
        transaction open (``BEGIN IMMEDIATE``), or anything with fenceq's
        ``submit`` (a ``Client``, ``client.transaction()``'s ``tx``, a
        handler's ``ctx.transaction()`` block)."""
        return Submission(self.task, self._options, connection)

    # Submitting -----------------------------------------------------------------

    def _queue_and_options(self, submitter: Submitter) -> tuple[str, dict[str, Any]]:
        """The queue, and ``submit``'s keywords but the payload."""
        options = {**self.task.defaults, **self._options}
        queue = options.pop("queue")
        delay = options.pop("delay", None)
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise config_error("QF105", f"{self.task.name}: delay must be a non-negative duration")
            options["run_at"] = submitter.now() + timedelta(seconds=seconds)
        return queue, options

    def _batch(self, submitter: Submitter, calls: Iterable[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        shared = sorted(ONE_JOB_OPTIONS & set(self._options))
        if shared:
            raise config_error("QF100", f"{self.task.name}: {shared[0]} names one job: submit those one by one")
        queue, options = self._queue_and_options(submitter)
        requests = []
        for call in calls:
            if not isinstance(call, Mapping):
                raise config_error("QF100", f"{self.task.name}: each call of a batch is a dict of arguments")
            requests.append({"task": self.task.name, "payload": self.task.payload((), dict(call)), **options})
        return queue, requests

    def _sync_target(self, submitter: Submitter) -> Any:
        target = self._target
        if target is None or submitter.in_process:
            return submitter.client()
        if type(target).__module__ == "sqlite3":  # a sqlite3.Connection (drivers are imported in backends/ only)
            from .backends.sqlite import SqliteTransaction

            return Transaction(SqliteTransaction(target))
        if hasattr(target, "submit"):
            return target
        return connect(connection=target) if not _is_pool(target) else connect(pool=target)

    async def _async_target(self, submitter: Submitter) -> Any:
        target = self._target
        if target is None or submitter.in_process:
            return await submitter.async_client()
        if hasattr(target, "submit"):
            return target
        return await (connect_async(connection=target) if not _is_pool(target) else connect_async(pool=target))

    def submit(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Check the arguments against the handler's signature and submit
        one job; its handle."""
        submitter = self.task.app.submitter
        queue, options = self._queue_and_options(submitter)
        payload = self.task.payload(args, kwargs)
        job_id = _sent(self._sync_target(submitter).submit(queue, self.task.name, payload, **options))
        submitter.submitted([job_id])
        return JobHandle(job_id, self.task, submitter)

    async def submit_async(self, *args: Any, **kwargs: Any) -> JobHandle:
        submitter = self.task.app.submitter
        queue, options = self._queue_and_options(submitter)
        payload = self.task.payload(args, kwargs)
        job_id = await (await self._async_target(submitter)).submit(queue, self.task.name, payload, **options)
        await submitter.submitted_async([job_id])
        return JobHandle(job_id, self.task, submitter)

    def submit_batch(self, calls: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        """One job per dict of arguments, in one ``submit_batch`` call."""
        submitter = self.task.app.submitter
        queue, requests = self._batch(submitter, calls)
        job_ids = _sent(self._sync_target(submitter).submit_batch(queue, requests))
        submitter.submitted(job_ids)
        return [JobHandle(job_id, self.task, submitter) for job_id in job_ids]

    async def submit_batch_async(self, calls: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        submitter = self.task.app.submitter
        queue, requests = self._batch(submitter, calls)
        job_ids = await (await self._async_target(submitter)).submit_batch(queue, requests)
        await submitter.submitted_async(job_ids)
        return [JobHandle(job_id, self.task, submitter) for job_id in job_ids]


def _is_pool(target: Any) -> bool:
    return type(target).__name__ in ("ConnectionPool", "AsyncConnectionPool")


def _sent(answer: Any) -> Any:
    """A sync submission's answer; an async client's coroutine is a mistake."""
    if inspect.isawaitable(answer):
        if inspect.iscoroutine(answer):
            answer.close()
        raise config_error("QF100", "an async client or connection: use submit_async")
    return answer


class Task:
    """A registered handler, as ``@app.task`` answers it: callable as the
    function itself, and the producer's way to submit it.

    A typed task (a handler with parameters after ``ctx``) takes those
    parameters as ``submit``'s arguments; a plain ``fn(ctx)`` task takes its
    payload as ``submit``'s one argument."""

    def __init__(self, app: Any, fn: Callable[..., Any], name: str, *, queue: str | None,
                 aliases: Sequence[str], defaults: Mapping[str, Any]):
        parameters = list(inspect.signature(fn).parameters.values())
        self.app = app
        self.fn = fn
        self.name = name
        self.aliases = tuple(aliases)
        self.signature = TaskSignature(fn) if len(parameters) > 1 else None
        self.defaults = {"queue": queue or (app.queues[0] if app.queues else "default"), **defaults}
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    @property
    def typed(self) -> bool:
        return self.signature is not None

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def payload(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call's payload: checked against a typed task's signature; a
        plain task's one argument as it is."""
        if self.signature is not None:
            return self.signature.payload(self.name, args, kwargs)
        if kwargs or len(args) > 1:
            raise config_error("QF100", f"{self.name}: a task without parameters after ctx takes its "
                               "payload as its one argument")
        return args[0] if args else None

    def options(self, **options: Any) -> Submission:
        return Submission(self, {}).options(**options)

    def using(self, connection: Any) -> Submission:
        return Submission(self, {}, connection)

    def submit(self, *args: Any, **kwargs: Any) -> JobHandle:
        return Submission(self, {}).submit(*args, **kwargs)

    async def submit_async(self, *args: Any, **kwargs: Any) -> JobHandle:
        return await Submission(self, {}).submit_async(*args, **kwargs)

    def submit_batch(self, calls: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        return Submission(self, {}).submit_batch(calls)

    async def submit_batch_async(self, calls: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        return await Submission(self, {}).submit_batch_async(calls)


__all__ = ["DatabaseClients", "JobHandle", "Submission", "Submitter", "Task", "TaskCancelled", "TaskError",
           "TaskExpired", "TaskFailed", "TaskMissing", "outcome"]
