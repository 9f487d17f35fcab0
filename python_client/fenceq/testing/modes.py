"""The three ways ``fenceq.testing`` runs an App's tasks in a test
(docs/testing-your-tasks.md). Each is a context manager that takes over the
App's submissions while it is open and gives them back after.

- ``InlineMode``: a submit runs the job at once, one claim, and answers a
  handle whose result is ready, or raises its ``TaskError``.
- ``MemoryMode``: submissions wait in a ``MemoryBackend`` until ``drain()``
  runs everything due; time is a ``ManualClock`` the test moves.
- ``DatabaseMode``: a real database (a throwaway one in tests) and a real
  ``Worker`` in a thread.

The in-process modes run the worker's own ``Runtime`` over the in-memory
backend, on an event loop in a thread of their own, so that sync tests and
async tests (on their own loops) call them alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from ..backends import open_async_backend
from ..client import AsyncClient, Client, connect
from ..errors import config_error
from ..tasks import DatabaseClients, Submitter, TaskFailed, outcome
from ..waiting import WaitTimeout
from ..worker import Worker
from ..worker.runtime import Runtime
from .backend import MemoryBackend
from .clock import ManualClock

OWNER = "fenceq-testing"
RETRY_BACKOFF = timedelta(seconds=1)  # a queue's default backoff_base
PATIENCE = 60.0  # seconds a DatabaseMode waits for its worker to start or stop: bounds a failure only


def served_queues(app: Any) -> list[str]:
    """The App's queues and every declared task's queue."""
    queues = list(app.queues)
    for task in app.declared.values():
        if task.defaults["queue"] not in queues:
            queues.append(task.defaults["queue"])
    return queues


class LoopThread:
    """An event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fenceq-testing", daemon=True)
        self._thread.start()

    def call(self, coroutine: Awaitable[Any]) -> Any:
        """Run a coroutine there and wait for it (from any other thread)."""
        if threading.current_thread() is self._thread:
            if inspect.iscoroutine(coroutine):
                coroutine.close()
            raise config_error("QF100", "a sync call from an async handler would block its own event loop: "
                               "use the _async method (submit_async, wait_async)")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()  # type: ignore[arg-type]

    async def call_async(self, coroutine: Awaitable[Any]) -> Any:
        if asyncio.get_running_loop() is self.loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _OverLoop:
    """An async backend that lives on a ``LoopThread`` as a client's
    backend, called from any thread or loop."""

    def __init__(self, backend: Any, thread: LoopThread):
        self._backend = backend
        self._thread = thread
        self.name = backend.name

    def _refused(self) -> Exception:
        return config_error("QF100", "no transactions on a testing mode's own client: open a transaction on "
                            "a client of your own (the database mode), or test it against a database")


class _SyncOverLoop(_OverLoop):
    def run(self, op: Any) -> Any:
        return self._thread.call(self._backend.run(op))

    def close(self) -> None:
        pass  # the mode owns the backend

    @contextlib.contextmanager
    def listener(self, channels: Any) -> Iterator[None]:
        yield None

    def transaction(self) -> Any:
        raise self._refused()


class _AsyncOverLoop(_OverLoop):
    async def run(self, op: Any) -> Any:
        return await self._thread.call_async(self._backend.run(op))

    async def close(self) -> None:
        pass

    @contextlib.asynccontextmanager
    async def listener(self, channels: Any) -> AsyncIterator[None]:
        yield None

    def transaction(self, own_connection: bool = False) -> Any:
        raise self._refused()


class _Recording:
    """The App as the in-process runtime sees it: each handler's exception
    is kept by job id, to be the ``__cause__`` of the ``TaskError``."""

    def __init__(self, app: Any, queues: list[str]):
        self.app = app
        self.queues = queues
        self.errors: dict[str, BaseException] = {}
        self._handlers: dict[Any, Any] = {}  # the App's handler -> it, recording

    @property
    def tasks(self) -> Any:
        return self.app.tasks

    def handler(self, name: str) -> Any:
        fn = self.app.handler(name)
        if fn is not None and fn not in self._handlers:
            self._handlers[fn] = self._recording(fn)
        return None if fn is None else self._handlers[fn]

    def _recording(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        errors = self.errors
        if inspect.iscoroutinefunction(fn):
            async def handler(ctx: Any) -> Any:
                try:
                    return await fn(ctx)
                except Exception as error:
                    errors[ctx.job_id] = error
                    raise
        else:
            def handler(ctx: Any) -> Any:
                try:
                    return fn(ctx)
                except Exception as error:
                    errors[ctx.job_id] = error
                    raise
        return handler


def _not_open() -> Exception:
    return config_error("QF100", "this testing mode is not open: use it as `with …:`")


class _InProcess:
    """What the inline and in-memory modes share: the backend, its loop, the
    clients over it, and runs of a real ``Runtime`` until a condition holds."""

    in_process = True

    def __init__(self, app: Any, *, clock: ManualClock | None = None, concurrency: int = 1,
                 retry_backoff: timedelta = RETRY_BACKOFF):
        self.app = app
        self.clock = clock or ManualClock()
        self.backend = MemoryBackend(self.clock, notifications=True, retry_backoff=retry_backoff)
        self.concurrency = concurrency
        self._thread: LoopThread | None = None
        self._client: Client | None = None
        self._async_client: AsyncClient | None = None
        self._previous: Submitter | None = None
        self._errors: dict[str, BaseException] = {}

    def __enter__(self) -> Any:
        self._thread = LoopThread()
        self._client = Client(_SyncOverLoop(self.backend, self._thread))
        self._async_client = AsyncClient(_AsyncOverLoop(self.backend, self._thread))
        self._previous, self.app.submitter = self.app.submitter, self
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.submitter = self._previous
        assert self._thread is not None
        self._thread.close()

    @property
    def _loop_thread(self) -> LoopThread:
        if self._thread is None:
            raise _not_open()
        return self._thread

    # Submitter ------------------------------------------------------------------

    def client(self) -> Client:
        if self._client is None:
            raise _not_open()
        return self._client

    async def async_client(self) -> AsyncClient:
        if self._async_client is None:
            raise _not_open()
        return self._async_client

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.wall(), timezone.utc)

    def close(self) -> None:
        pass  # closing the App leaves the mode open; leaving the block closes it

    async def aclose(self) -> None:
        pass

    def finished(self, job_id: str, timeout: Any) -> Any:
        return self._loop_thread.call(self._finished(job_id))

    async def finished_async(self, job_id: str, timeout: Any) -> Any:
        return await self._loop_thread.call_async(self._finished(job_id))

    async def _finished(self, job_id: str) -> Any:
        """The job's outcome once this mode has run what it runs; a job still
        waiting then waits on the manual clock, which nothing moves but the
        test: ``WaitTimeout`` at once."""
        await self._before_reading()
        job = self.backend.get_job(job_id)
        if job is not None and job.status in ("pending", "claimed"):
            raise WaitTimeout(job_id)
        return outcome(job_id, job, self._errors.get(job_id))

    async def _before_reading(self) -> None:
        pass

    # Runs ----------------------------------------------------------------------

    def advance(self, seconds: float | timedelta) -> None:
        """Move the manual clock on (waking what sleeps on it)."""
        amount = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        self._loop_thread.call(self._advance(amount))

    async def _advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def _run_until(self, done: Callable[[], bool]) -> None:
        """Run a worker runtime over the backend until ``done()`` holds."""
        queues = served_queues(self.app)
        registry = _Recording(self.app, queues)
        settings = Worker(self.app, url="sqlite:///fenceq-testing-never-opened.db", queues=queues,
                          concurrency=self.concurrency, owner_id=OWNER, reap_interval=None).settings

        async def open_backend() -> MemoryBackend:
            return self.backend

        runtime = Runtime(registry, settings, open_backend=open_backend, clock=self.clock)
        running = asyncio.ensure_future(runtime.run())
        try:
            while not done() and not running.done():
                await asyncio.sleep(0.001)  # lets the runtime (and threads running handlers) on
        finally:
            runtime.request_stop()
            await running
            self._errors.update(registry.errors)


class InlineMode(_InProcess):
    """A submit runs its job at once (its delay and dependencies not waited
    for), as one claim: a handle whose result is ready, or the job's
    ``TaskError`` raised (``TaskFailed`` for an error, even with attempts
    left), with the handler's exception as its ``__cause__``."""

    def __init__(self, app: Any, **options: Any):
        super().__init__(app, **options)
        self.backend.new_claims_left = 0  # held until the submit runs it

    def submitted(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._loop_thread.call(self._run_now(job_id))

    async def submitted_async(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            await self._loop_thread.call_async(self._run_now(job_id))

    async def _run_now(self, job_id: str) -> None:
        row = self.backend.rows[job_id]
        if row.status != "pending":
            return  # a replayed submission's job, or one cancelled with its dependency
        row.claims_left, row.run_at, row.depends_on = 1, None, ()
        await self._run_until(lambda: row.claims_left == 0 and row.status != "claimed")
        job = self.backend.get_job(job_id)
        assert job is not None
        if job.status != "completed":
            if job.status == "pending":  # failed with attempts left: still its error, here
                raise TaskFailed(job_id, job) from self._errors.get(job_id)
            outcome(job_id, job, self._errors.get(job_id))


class MemoryMode(_InProcess):
    """Submissions wait in memory; ``drain()`` runs everything due (retries
    and follow-up jobs included) until nothing is; ``advance(seconds)``
    moves the manual clock, so that retries, delays and leases come due.
    ``wait`` drains first."""

    def submitted(self, job_ids: list[str]) -> None:
        pass  # drain runs them

    async def submitted_async(self, job_ids: list[str]) -> None:
        pass

    def drain(self) -> None:
        self._loop_thread.call(self._drain())

    async def drain_async(self) -> None:
        await self._loop_thread.call_async(self._drain())

    async def _drain(self) -> None:
        queues = served_queues(self.app)
        self.backend.reap()  # leases that lapsed while the clock moved
        await self._run_until(lambda: self.backend.idle(queues))

    async def _before_reading(self) -> None:
        await self._drain()


class DatabaseMode(DatabaseClients):
    """The App's submissions go to ``url``, where its queues are created
    (``queue_options`` are ``create_queue``'s) and a real ``Worker`` runs in
    a thread while the block is open (``worker_options`` are its own)."""

    def __init__(self, app: Any, url: str, *, queue_options: dict[str, Any] | None = None, **worker_options: Any):
        super().__init__(url)
        self.app = app
        self._queue_options = queue_options or {}
        self._worker = Worker(app, url=url, queues=served_queues(app), **{"concurrency": 2, **worker_options})
        self._worker_thread = threading.Thread(target=self._worker.run, kwargs={"install_signal_handlers": False},
                                               name="fenceq-testing-worker", daemon=True)
        self._loop_thread: LoopThread | None = None
        self._async_backend: Any = None
        self._previous: Submitter | None = None

    def __enter__(self) -> "DatabaseMode":
        with connect(self.url) as client:
            for queue in self._worker.queues:
                client.create_queue(queue, **self._queue_options)
        self._worker_thread.start()
        while not self._worker.started.wait(0.01):
            if not self._worker_thread.is_alive():  # it failed: its exception is logged by the thread
                raise RuntimeError("fenceq.testing: the worker stopped before it started")
        self._loop_thread = LoopThread()
        self._async_backend = self._loop_thread.call(open_async_backend(self.url))
        self._previous, self.app.submitter = self.app.submitter, self
        return self

    async def async_client(self) -> AsyncClient:
        """An async client on the mode's own loop, whichever loop asks (a
        test's loop closes before the mode does); it waits by polling."""
        if self._loop_thread is None:
            raise _not_open()
        return AsyncClient(_AsyncOverLoop(self._async_backend, self._loop_thread))

    def __exit__(self, *exc: object) -> None:
        self.app.submitter = self._previous
        self._worker.stop()
        self._worker_thread.join(PATIENCE)
        self.close()
        assert self._loop_thread is not None
        self._loop_thread.call(self._async_backend.close())
        self._loop_thread.close()

    @property
    def worker(self) -> Worker:
        return self._worker
