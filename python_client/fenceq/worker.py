"""The worker runtime: ``App`` (a task registry) and ``Worker``.

A worker claims jobs from named queues, runs the registered handler of each
job's task, and writes every outcome with the claim's fence, so that a
worker that was paused, partitioned or simply slow can never overwrite the
work of the worker that took its job over: the database refuses its writes.

    app = fenceq.App()

    @app.task("resize")
    def resize(ctx):                       # runs in a thread
        image = ctx.checkpoint("download", lambda: download(ctx.payload["url"]))
        if ctx.cancelled.is_set():
            raise fenceq.JobCancelled()
        return {"size": len(image)}

    @app.task("notify")
    async def notify(ctx):                 # runs on the event loop
        await send(ctx.payload)

    fenceq.Worker(app, url="postgresql://…", queues=["default"], concurrency=4).run()

What the worker guarantees, and how (docs/worker.md has the long version):

* Claims: a fresh nonce (``new_claim_token()``) is generated and kept before
  every claim call. When the call's outcome is unknown (``PersistenceFailed``)
  the worker asks ``recover_claim`` with that same nonce; it never claims
  anew for an uncertain claim and never reuses a nonce.
* Heartbeats run at a fraction of the lease, one ``heartbeat_batch`` for all
  in-flight jobs. The worker also keeps a local deadline per job (send time
  of the last renewal + lease), so after a pause it knows at once that its
  lease may be gone. A refused heartbeat (or checkpoint) sets ``ctx.lost``;
  ``ctx.fence_live`` turns false; ``ctx.checkpoint`` raises ``LeaseLost``.
* Completion and failure carry the fence. Completions are batched
  (``complete_batch``) opportunistically, optionally within a short window.
  An exception fails the job with retry; ``NonRetryable`` fails it without.
  After an uncertain write the worker re-sends the same fenced write
  (idempotent under the fence) and reads the job to tell "my write landed"
  from "refused".
* Cancellation: on PostgreSQL the worker LISTENs on ``fenceq_control`` and
  checks ``claim_state`` (polling as a fallback); on SQLite it polls
  ``claim_state``. The handler sees ``ctx.cancelled``; when it returns (or
  raises), the worker calls ``acknowledge_cancel``.
* Wake-ups: LISTEN ``fenceq_jobs`` on PostgreSQL; adaptive polling (bounded)
  on SQLite and as PostgreSQL's fallback.
* ``reap`` (and ``purge`` when configured) run periodically; on PostgreSQL
  each round takes ``pg_try_advisory_xact_lock`` so one worker of the fleet
  reaps at a time, and a paused worker cannot hold the duty.
* SIGINT/SIGTERM: stop claiming, wait up to ``drain_timeout``, then
  ``release`` what is unfinished (no attempt spent). A second signal skips
  the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import re
import secrets
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping

from ._worker_log import LOGGER_NAME
from .client import AsyncClient, connect_async, resolve_url
from .errors import ConfigError, PersistenceFailed
from .types import Claim, Fence, new_claim_token

log = logging.getLogger(LOGGER_NAME)
task_log = logging.getLogger("fenceq.task")

# pg_try_advisory_xact_lock key for the reaper duty (migrate uses 4_711_000_001).
REAPER_LOCK = 4_711_000_002
MAX_BATCH = 1000
_NAME = re.compile(r"^.{1,255}$", re.DOTALL)


# Exceptions a handler raises or sees --------------------------------------------

class NonRetryable(Exception):
    """Raise from a handler to fail the job without retry: it becomes
    ``failed`` at once (with a dead letter when its queue keeps them)."""


class LeaseLost(Exception):
    """The claim is no longer live: the database refused a fenced write or a
    heartbeat, or the worker released the job. Nothing the handler writes
    from now on is recorded; the job belongs to whoever claims it next."""


class JobCancelled(Exception):
    """Raise (or let ``ctx.raise_if_cancelled()`` raise) after a cancel
    request: the worker acknowledges the cancellation."""


# The registry --------------------------------------------------------------------

Handler = Callable[[Any], Any]


class App:
    """A registry of task handlers, and the queues its workers serve by default.

    ``@app.task("name")`` registers a handler ``fn(ctx)``: a plain function
    runs in a thread of its own, an ``async def`` on the worker's event loop.
    Its return value (JSON) becomes the job's result.
    """

    def __init__(self, name: str = "fenceq", *, queues: Iterable[str] = ("default",)):
        self.name = name
        self.queues = list(queues)
        self._tasks: dict[str, Handler] = {}

    def task(self, name: str | Handler | None = None) -> Any:
        """Decorator: ``@app.task("name")``, or bare ``@app.task`` to use the
        function's name."""
        if callable(name):
            self.register(name.__name__, name)
            return name

        def decorator(fn: Handler) -> Handler:
            self.register(name or fn.__name__, fn)
            return fn

        return decorator

    def register(self, name: str, fn: Handler) -> None:
        if not isinstance(name, str) or not _NAME.match(name) or "\x00" in name:
            raise ValueError("a task name must be a string of 1 to 255 characters")
        if not callable(fn):
            raise TypeError("a task handler must be callable")
        if name in self._tasks and self._tasks[name] is not fn:
            raise ValueError(f"task {name!r} is already registered")
        self._tasks[name] = fn

    def handler(self, name: str) -> Handler | None:
        return self._tasks.get(name)

    @property
    def tasks(self) -> Mapping[str, Handler]:
        return MappingProxyType(self._tasks)

    def worker(self, **options: Any) -> "Worker":
        return Worker(self, **options)


def load_app(spec: str) -> App:
    """``module:attribute`` (attribute defaults to ``app``) -> the App."""
    import importlib
    import sys

    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    app = getattr(module, attribute or "app")
    if not isinstance(app, App):
        raise TypeError(f"{spec} is not a fenceq.App")
    return app


# Handler context ------------------------------------------------------------------

class _Flag:
    """One condition, visible to thread handlers (threading.Event) and to
    async handlers (asyncio.Event). Set only from the worker's loop."""

    def __init__(self) -> None:
        self.thread = threading.Event()
        self.loop = asyncio.Event()

    def set(self) -> None:
        self.thread.set()
        self.loop.set()

    def is_set(self) -> bool:
        return self.thread.is_set()


@dataclass(eq=False)
class _Job:
    claim: Claim
    fence: Fence
    lease: float                      # seconds: the lease length in force
    deadline: float                   # monotonic: the lease is surely live before this
    budget_deadline: float            # monotonic (inf without a budget)
    next_heartbeat: float             # monotonic
    is_async: bool
    recorded: dict[str, Any]
    cancelled: _Flag = field(default_factory=_Flag)
    lost: _Flag = field(default_factory=_Flag)
    stopping: _Flag = field(default_factory=_Flag)
    task: asyncio.Task | None = None
    settling: bool = False            # the handler is done; the outcome is being written
    abandoned: bool = False           # drain timed out: the job is being released
    started: float = field(default_factory=time.monotonic)
    ctx: Any = None

    @property
    def fields(self) -> dict[str, Any]:
        return {"job_id": self.fence.job_id, "queue": self.claim.queue, "task": self.claim.task,
                "generation": self.fence.generation, "attempt": self.claim.attempt}


class _ContextBase:
    def __init__(self, worker: "Worker", job: _Job):
        self._worker = worker
        self._job = job
        claim = job.claim
        self.job_id: str = claim.job_id
        self.queue: str = claim.queue
        self.task: str = claim.task
        self.payload: Any = claim.payload
        self.attempt: int = claim.attempt
        self.max_attempts: int = claim.max_attempts
        self.generation: int = claim.generation
        self.owner_id: str = claim.owner_id
        self.submission_id: str | None = claim.submission_id
        self.log = logging.LoggerAdapter(task_log, {"fenceq": job.fields, "event": "task_log"})

    @property
    def fence(self) -> Fence:
        return self._job.fence

    @property
    def checkpoints(self) -> Mapping[str, Any]:
        """Steps recorded for this job so far (by this or earlier claims)."""
        return MappingProxyType(dict(self._job.recorded))

    @property
    def fence_live(self) -> bool:
        """False once the database refused this claim, or once the local
        lease deadline passed without a confirmed renewal (e.g. after a
        pause). Only the database can say yes for sure; this is the
        handler's cue to stop producing side effects."""
        return not self._job.lost.is_set() and time.monotonic() < self._job.deadline

    @property
    def cancel_requested(self) -> bool:
        return self._job.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        if self._job.cancelled.is_set():
            raise JobCancelled()

    def raise_if_lost(self) -> None:
        if not self.fence_live:
            raise LeaseLost()


class JobContext(_ContextBase):
    """What a plain (thread) handler receives. ``cancelled``, ``lost`` and
    ``stopping`` are ``threading.Event``s."""

    def __init__(self, worker: "Worker", job: _Job):
        super().__init__(worker, job)
        self.cancelled: threading.Event = job.cancelled.thread
        self.lost: threading.Event = job.lost.thread
        self.stopping: threading.Event = job.stopping.thread

    def _call(self, coroutine: Awaitable[Any]) -> Any:
        loop = self._worker._loop
        if loop is None or loop.is_closed() or self._job.abandoned:
            if inspect.iscoroutine(coroutine):
                coroutine.close()
            raise LeaseLost()
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()  # type: ignore[arg-type]

    def checkpoint(self, step: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` unless ``step`` is already recorded for this job, record
        its (non-null, JSON) value under the fence, and return the recorded
        value. Raises ``LeaseLost`` when the claim is no longer live."""
        if step in self._job.recorded:
            return self._job.recorded[step]
        if self._job.lost.is_set():
            raise LeaseLost()
        return self._call(self._worker._checkpoint(self._job, step, fn()))

    def heartbeat(self) -> bool:
        """Renew the lease now; False (and ``lost`` set) when refused."""
        return self._call(self._worker._heartbeat_one(self._job))


class AsyncJobContext(_ContextBase):
    """What an ``async def`` handler receives. ``cancelled``, ``lost`` and
    ``stopping`` are ``asyncio.Event``s."""

    def __init__(self, worker: "Worker", job: _Job):
        super().__init__(worker, job)
        self.cancelled: asyncio.Event = job.cancelled.loop
        self.lost: asyncio.Event = job.lost.loop
        self.stopping: asyncio.Event = job.stopping.loop

    async def checkpoint(self, step: str, fn: Callable[[], Any]) -> Any:
        """As ``JobContext.checkpoint``; ``fn`` may be sync or async."""
        if step in self._job.recorded:
            return self._job.recorded[step]
        if self._job.lost.is_set() or self._job.abandoned:
            raise LeaseLost()
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        return await self._worker._checkpoint(self._job, step, value)

    async def heartbeat(self) -> bool:
        return await self._worker._heartbeat_one(self._job)


# Client pool ----------------------------------------------------------------------

class _Pool:
    """A few async clients, each used by one coroutine at a time. A client
    whose call raised PersistenceFailed is closed and reopened on next use
    (its connection may be gone)."""

    def __init__(self, url: str, size: int, wrap: Callable[[AsyncClient], Any] | None):
        self.url = url
        self.size = size
        self._wrap = wrap
        self._free: asyncio.Queue = asyncio.Queue()
        self._all: list[Any] = []
        self.backend = "?"

    async def open(self) -> None:
        first = await self._new()
        self.backend = getattr(first, "backend", "?")
        self._free.put_nowait(first)
        for _ in range(self.size - 1):
            self._free.put_nowait(None)  # opened lazily

    async def _new(self) -> Any:
        client = await connect_async(self.url)
        if self._wrap is not None:
            client = self._wrap(client)
        self._all.append(client)
        return client

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        client = await self._free.get()
        try:
            if client is None:
                client = await self._new()
            yield client
        except PersistenceFailed:
            if client is not None:
                await self._discard(client)
            client = None
            raise
        finally:
            self._free.put_nowait(client)

    async def _discard(self, client: Any) -> None:
        with contextlib.suppress(Exception):
            self._all.remove(client)
        with contextlib.suppress(Exception):
            await client.close()

    async def close(self) -> None:
        for client in list(self._all):
            await self._discard(client)


# The worker -----------------------------------------------------------------------

def _seconds(value: timedelta | float | int | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"fenceq: {what} must be a positive duration", reason="invalid_request",
                          sqlstate="QF100")
    return float(value)


def default_owner_id() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{secrets.token_hex(3)}"


def _error_text(error: BaseException) -> str:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    head = f"{type(error).__name__}: {error}"
    if len(text) > 16000:
        text = text[:2000] + "\n…\n" + text[-12000:]
    return head + "\n\n" + text if text.strip() else head


class Worker:
    """Runs an ``App``'s handlers for jobs claimed from ``queues``.

    Options (durations are seconds or ``timedelta``):

    - ``concurrency``: jobs in flight at once (default 1).
    - ``lease`` / ``budget``: sent with every claim (default: the queue's
      lease, no budget). ``heartbeat_fraction``: heartbeat every
      lease × fraction (default 1/3).
    - ``drain_timeout``: how long a stop waits for running handlers before
      releasing their jobs (default 30).
    - ``poll_interval``: the longest idle wait between claim attempts
      (default 0.5 on SQLite, 5 on PostgreSQL where NOTIFY wakes the worker).
    - ``control_poll``: how often in-flight jobs' ``claim_state`` is read for
      cancel requests (default 0.5 on SQLite; 5 on PostgreSQL, as a fallback
      to LISTEN ``fenceq_control``).
    - ``reap_interval`` (default 2; ``None`` disables reaping here),
      ``purge_after`` (retention: purge terminal jobs older than this;
      default off), ``purge_submissions_after``, ``purge_interval`` (60).
    - ``complete_window``: wait this long to batch completions (default 0:
      batch only what queued up meanwhile); ``batch_completions=False``
      completes one by one.
    - ``cancel_grace``: after a cancel request, an ``async`` handler still
      running this long later is cancelled (default 10; ``None`` = never).
    - ``record_pid``: ``set_pid`` with this process id on every claim.
    - ``connections``: client connections (default 2 to 8 by concurrency).
    - ``wrap_client``: a function applied to every client the worker opens
      (instrumentation, fault injection in tests).
    """

    def __init__(self, app: App, *, url: str | None = None, queues: Iterable[str] | None = None,
                 concurrency: int = 1, owner_id: str | None = None,
                 lease: timedelta | float | None = None, budget: timedelta | float | None = None,
                 heartbeat_fraction: float = 1 / 3, drain_timeout: timedelta | float = 30.0,
                 poll_interval: timedelta | float | None = None,
                 control_poll: timedelta | float | None = None,
                 reap_interval: timedelta | float | None = 2.0,
                 purge_after: timedelta | None = None, purge_submissions_after: timedelta | None = None,
                 purge_interval: timedelta | float = 60.0, complete_window: float = 0.0,
                 batch_completions: bool = True, cancel_grace: timedelta | float | None = 10.0,
                 record_pid: bool = False, connections: int | None = None,
                 wrap_client: Callable[[AsyncClient], Any] | None = None):
        if not isinstance(app, App):
            raise TypeError("Worker needs a fenceq.App")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 10_000:
            raise ConfigError("fenceq: concurrency must be an integer from 1 to 10000",
                              reason="invalid_request", sqlstate="QF100")
        if not 0 < heartbeat_fraction < 1:
            raise ConfigError("fenceq: heartbeat_fraction must be between 0 and 1",
                              reason="invalid_request", sqlstate="QF100")
        self.app = app
        self.url = resolve_url(url)
        self.queues = list(queues if queues is not None else app.queues)
        if not self.queues:
            raise ConfigError("fenceq: a worker needs at least one queue", reason="invalid_request",
                              sqlstate="QF100")
        self.concurrency = concurrency
        self.owner_id = owner_id or default_owner_id()
        self.lease = _seconds(lease, "lease")
        self.budget = _seconds(budget, "budget")
        self.heartbeat_fraction = heartbeat_fraction
        self.drain_timeout = _seconds(drain_timeout, "drain_timeout") if drain_timeout else 0.0
        self._poll_option = _seconds(poll_interval, "poll_interval")
        self._control_option = _seconds(control_poll, "control_poll")
        self.reap_interval = _seconds(reap_interval, "reap_interval")
        self.purge_after = purge_after
        self.purge_submissions_after = purge_submissions_after
        self.purge_interval = _seconds(purge_interval, "purge_interval") or 60.0
        self.complete_window = max(0.0, float(complete_window))
        self.batch_completions = batch_completions
        self.cancel_grace = _seconds(cancel_grace, "cancel_grace")
        self.record_pid = record_pid
        self.connections = connections or max(2, min(concurrency, 8))
        self.wrap_client = wrap_client
        self.counts: dict[str, int] = {k: 0 for k in (
            "claimed", "completed", "failed", "retried", "cancelled", "released", "refused",
            "lost", "recovered_claims", "reaped")}

        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: _Pool | None = None
        self._inflight: dict[str, _Job] = {}
        self._wake: asyncio.Event | None = None
        self._heartbeat_wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._stop_requested = False
        self._hard_stop = False
        self._completions: asyncio.Queue | None = None
        self._listening: asyncio.Event | None = None
        self._background: list[asyncio.Task] = []
        self._side_tasks: set[asyncio.Task] = set()
        self.backend = "?"
        self.started = threading.Event()
        self._finished = False

    # Public control ----------------------------------------------------------------

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until stopped (SIGINT/SIGTERM, or ``stop()``)."""
        asyncio.run(self.run_async(install_signal_handlers=install_signal_handlers))

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: stop claiming, drain, release. Safe from
        any thread and from signal handlers. ``now`` skips the drain wait."""
        loop = self._loop
        if self._finished:
            return
        if loop is None or loop.is_closed():
            self._stop_requested = True
            self._hard_stop = self._hard_stop or now
            return
        try:
            if threading.get_ident() == getattr(self, "_loop_thread", None):
                self._request_stop(now)
            else:
                loop.call_soon_threadsafe(self._request_stop, now)
        except RuntimeError:
            pass

    def _request_stop(self, now: bool) -> None:
        first = not self._stop_requested
        self._stop_requested = True
        self._hard_stop = self._hard_stop or now or not first
        self._event("stopping", "stop requested: no new claims; draining" if first and not self._hard_stop
                    else "stop requested again: releasing unfinished jobs now",
                    in_flight=len(self._inflight), drain_timeout=self.drain_timeout)
        for job in self._inflight.values():
            job.stopping.set()
        if self._wake is not None:
            self._wake.set()
        if self._idle is not None and self._hard_stop:
            self._idle.set()

    # Main loop ---------------------------------------------------------------------

    async def run_async(self, *, install_signal_handlers: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._heartbeat_wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._completions = asyncio.Queue()
        self._listening = asyncio.Event()
        self._pool = _Pool(self.url, self.connections, self.wrap_client)
        installed: list[int] = []
        try:
            await self._pool.open()
            self.backend = self._pool.backend
            await self._check_schema()
            postgres = self.backend == "postgres"
            self.poll_interval = self._poll_option or (5.0 if postgres else 0.5)
            self.control_poll = self._control_option or (5.0 if postgres else 0.5)
            if install_signal_handlers:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(NotImplementedError, RuntimeError):
                        self._loop.add_signal_handler(signum, self._request_stop, False)
                        installed.append(signum)
            spawn = self._loop.create_task
            self._background = [spawn(self._guard("heartbeats", self._heartbeats)),
                                spawn(self._guard("control", self._control_poller))]
            if self.batch_completions:
                self._background.append(spawn(self._guard("completions", self._flusher)))
            if postgres:
                self._background.append(spawn(self._guard("listener", self._listener)))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._listening.wait(), timeout=5.0)
            if self.reap_interval:
                self._background.append(spawn(self._guard("reaper", self._reaper)))
            self._event("worker_started", "worker started", queues=self.queues,
                        concurrency=self.concurrency, backend=self.backend, pid=os.getpid(),
                        tasks=sorted(self.app.tasks))
            self.started.set()
            failure: BaseException | None = None
            try:
                await self._claim_loop()
            except Exception as error:  # noqa: BLE001 - drain first, then re-raise
                failure = error
                self._stop_requested = self._hard_stop = True
            await self._drain()
            if failure is not None:
                raise failure
        finally:
            for signum in installed:
                with contextlib.suppress(Exception):
                    self._loop.remove_signal_handler(signum)
            for task in self._background + list(self._side_tasks):
                task.cancel()
            for task in self._background + list(self._side_tasks):
                with contextlib.suppress(BaseException):
                    await task
            if self._pool is not None:
                await self._pool.close()
            self._finished = True
            self._event("worker_stopped", "worker stopped", **self.counts)

    async def _check_schema(self) -> None:
        """Fail fast, with a clear message, on a database without fenceq."""
        assert self._pool is not None
        missing = ConfigError("fenceq: fenceq is not installed in this database (run `fenceq migrate`)",
                              reason="schema_mismatch", sqlstate="QF901")
        try:
            async with self._pool.client() as client:
                version = await client.version()
        except PersistenceFailed as error:
            cause = error.__cause__
            if getattr(cause, "sqlstate", None) in ("3F000", "42883", "42P01") \
                    or "no such table" in str(cause or ""):
                raise missing from None
            raise
        if version in (None, "", "0"):
            raise missing

    # Claiming ----------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self._wake is not None
        idle = 0.01
        while not self._stop_requested:
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._wake.clear()
            try:
                claimed = await self._claim(min(free, MAX_BATCH))
            except ConfigError as error:
                self._event("claim_refused", f"claim refused: {error}", level=logging.ERROR,
                            reason=error.reason)
                raise
            except PersistenceFailed:
                claimed = []  # already logged; nothing was left uncertain
                idle = min(max(idle * 2, 0.1), self.poll_interval)
                await self._sleep_or_wake(idle)
                continue
            if claimed:
                idle = 0.01
                continue
            await self._sleep_or_wake(idle)
            idle = min(idle * 2, self.poll_interval)

    async def _sleep_or_wake(self, timeout: float) -> None:
        assert self._wake is not None
        if self._wake.is_set():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def _claim(self, count: int) -> list[_Job]:
        """Claim up to ``count`` jobs. The nonces are generated and kept
        before the call; an uncertain call is resolved with recover_claim."""
        assert self._pool is not None
        tokens = [new_claim_token() for _ in range(count)]
        sent = time.monotonic()
        lease = timedelta(seconds=self.lease) if self.lease else None
        budget = timedelta(seconds=self.budget) if self.budget else None
        try:
            async with self._pool.client() as client:
                if count == 1:
                    claim = await client.claim_next(self.queues, self.owner_id, tokens[0],
                                                    lease=lease, budget=budget)
                    claims = [claim] if claim is not None else []
                else:
                    claims = await client.claim_batch(self.queues, self.owner_id, tokens,
                                                      lease=lease, budget=budget)
        except PersistenceFailed:
            self._event("claim_uncertain", "claim outcome unknown; recovering it with the same nonce",
                        level=logging.WARNING, tokens=len(tokens))
            claims = await self._recover(tokens, sent)
        return [self._start(claim, sent) for claim in claims]

    async def _recover(self, tokens: list[str], sent: float) -> list[Claim]:
        assert self._pool is not None
        found: list[Claim] = []
        give_up = sent + max(2 * (self.lease or 30.0), 10.0)
        for token in tokens:
            delay = 0.05
            while True:
                try:
                    async with self._pool.client() as client:
                        claim = await client.recover_claim(self.owner_id, token)
                    break
                except PersistenceFailed:
                    if self._stop_requested or time.monotonic() > give_up:
                        self._event("claim_unrecovered", "could not reach the database to recover an "
                                    "uncertain claim; if it was made, its lease will lapse and reap "
                                    "will hand the job on", level=logging.ERROR)
                        claim = None
                        break
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            if claim is not None:
                self.counts["recovered_claims"] += 1
                self._event("claim_recovered", "uncertain claim recovered with its nonce",
                            level=logging.WARNING, job_id=claim.job_id, generation=claim.generation)
                found.append(claim)
        if not found:
            self._event("claim_not_made", "the uncertain claim did not take a job (or its lease "
                        "already lapsed)", level=logging.INFO, tokens=len(tokens))
        return found

    def _start(self, claim: Claim, sent: float) -> _Job:
        assert self._loop is not None
        now_wall = time.time()
        expires = claim.lease_expires_at.timestamp() if claim.lease_expires_at else now_wall
        # Lease length: the one we asked for, else the queue's as seen from
        # the claim (conservative: measured from receipt, not from sending).
        lease = self.lease or max(0.05, expires - now_wall)
        budget_deadline = float("inf")
        if claim.budget_expires_at is not None:
            budget_deadline = sent + max(0.0, claim.budget_expires_at.timestamp() - now_wall)
        deadline = min(sent + lease, budget_deadline)
        handler = self.app.handler(claim.task)
        job = _Job(claim=claim, fence=claim.fence, lease=lease, deadline=deadline,
                   budget_deadline=budget_deadline,
                   next_heartbeat=sent + lease * self.heartbeat_fraction,
                   is_async=handler is not None and inspect.iscoroutinefunction(handler),
                   recorded=dict(claim.checkpoints or {}))
        job.ctx = AsyncJobContext(self, job) if job.is_async else JobContext(self, job)
        if self._stop_requested:
            job.stopping.set()
        self._inflight[claim.job_id] = job
        self.counts["claimed"] += 1
        self._event("claimed", "job claimed", **job.fields, lease=round(lease, 3),
                    cancel_requested=claim.cancel_requested,
                    checkpoints=len(job.recorded))
        if claim.cancel_requested:
            job.cancelled.set()
        assert self._heartbeat_wake is not None
        self._heartbeat_wake.set()
        job.task = self._loop.create_task(self._execute(job, handler), name=f"fenceq-job-{claim.job_id}")
        return job

    # Running a handler -------------------------------------------------------------

    async def _execute(self, job: _Job, handler: Handler | None) -> None:
        try:
            if self.record_pid:
                self._spawn(self._set_pid(job))
            if handler is None:
                outcome: tuple = ("fail", f"no handler for task {job.claim.task!r} on this worker "
                                  f"(tasks: {', '.join(sorted(self.app.tasks)) or 'none'})", True)
                self._event("unknown_task", "no handler registered for this task", level=logging.ERROR,
                            **job.fields)
            else:
                outcome = await self._invoke(job, handler)
        except asyncio.CancelledError:
            if job.abandoned or self._hard_stop:
                return  # the drain releases it
            if job.cancelled.is_set():
                outcome = ("cancelled",)
            else:
                raise
        if job.abandoned:
            return
        job.settling = True
        try:
            await self._settle(job, outcome)
        except Exception:  # noqa: BLE001 - a bug must not leak the slot silently
            log.exception("writing the outcome failed", extra={"event": "settle_error",
                                                               "fenceq": {**job.fields, "worker": self.owner_id}})
        finally:
            self._finish(job)

    async def _invoke(self, job: _Job, handler: Handler) -> tuple:
        self._event("started", "handler started", level=logging.DEBUG, **job.fields)
        try:
            if job.is_async:
                result = await handler(job.ctx)
            else:
                result = await self._in_thread(job, handler)
        except NonRetryable as error:
            self._event("handler_error", f"handler raised NonRetryable: {error}", level=logging.WARNING,
                        **job.fields, retry=False)
            return ("fail", _error_text(error), False)
        except LeaseLost:
            return ("lost",)
        except JobCancelled:
            return ("cancelled",)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._event("handler_error", f"handler raised {type(error).__name__}: {error}",
                        level=logging.WARNING, **job.fields, retry=True)
            return ("fail", _error_text(error), True)
        return ("complete", result)

    async def _in_thread(self, job: _Job, handler: Handler) -> Any:
        assert self._loop is not None
        loop = self._loop
        future: asyncio.Future = loop.create_future()

        def deliver(ok: bool, value: Any) -> None:
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

        def target() -> None:
            try:
                value, ok = handler(job.ctx), True
            except BaseException as error:  # noqa: BLE001 - handed to the loop
                value, ok = error, False
            with contextlib.suppress(RuntimeError):  # the loop is gone: the job was released
                loop.call_soon_threadsafe(deliver, ok, value)

        threading.Thread(target=target, name=f"fenceq-job-{job.fence.job_id}", daemon=True).start()
        return await future

    def _finish(self, job: _Job) -> None:
        if self._inflight.get(job.fence.job_id) is job:
            del self._inflight[job.fence.job_id]
        assert self._wake is not None and self._idle is not None
        self._wake.set()
        if not self._inflight:
            self._idle.set()

    # Writing outcomes --------------------------------------------------------------

    async def _settle(self, job: _Job, outcome: tuple) -> None:
        kind = outcome[0]
        if job.cancelled.is_set() and kind != "lost":
            await self._acknowledge(job)
        elif kind == "complete":
            answer = await self._complete(job, outcome[1])
            if answer is True:
                self.counts["completed"] += 1
                self._event("completed", "job completed", **job.fields,
                            seconds=round(time.monotonic() - job.started, 3))
            elif answer is False:
                await self._refused(job, "complete")
        elif kind == "fail":
            await self._fail(job, outcome[1], outcome[2])
        elif kind == "lost":
            self.counts["lost"] += 1
            self._event("lease_lost", "handler stopped: the claim is no longer live (nothing written)",
                        level=logging.WARNING, **job.fields)
        elif kind == "cancelled":
            # JobCancelled without a cancel request we know of: ask the database.
            await self._refused(job, "cancel")

    async def _fail(self, job: _Job, error: str, retry: bool) -> None:
        answer = await self._write(job, "fail", lambda c: c.fail(job.fence, error, retry=retry),
                                   lambda j: j.generation == job.fence.generation
                                   and j.last_error == error[:65536]
                                   and j.status in ("pending", "failed"))
        if answer is False:
            await self._refused(job, "fail")
        if answer is not True:
            return
        after = await self._job_status(job)
        retried = retry and after is not None and (after.status != "failed"
                                                   or after.generation != job.fence.generation)
        if retried:
            self.counts["retried"] += 1
            self._event("retry_scheduled", "job failed; retry scheduled", level=logging.WARNING,
                        **job.fields, run_at=after.run_at.isoformat() if after.status == "pending" else None)
        else:
            self.counts["failed"] += 1
            dlq_id = None if after is None else after.dlq_id
            self._event("failed", "job failed for good" + (" and was dead-lettered" if dlq_id else ""),
                        level=logging.WARNING, **job.fields, retry=retry, dlq_id=dlq_id)

    async def _complete(self, job: _Job, result: Any) -> Any:
        """True, False (refused), or ABANDONED / HANDLED (nothing more to do)."""
        if self.batch_completions and self._completions is not None:
            future = asyncio.get_running_loop().create_future()
            self._completions.put_nowait((job, result, future))
            return await future
        return await self._complete_one(job, result)

    async def _complete_one(self, job: _Job, result: Any) -> Any:
        try:
            return await self._write(job, "complete", lambda c: c.complete(job.fence, result),
                                     self._completed_by(job))
        except ConfigError as error:
            # The result is not storable JSON: fail the job (no retry would fix it).
            self._event("bad_result", f"handler result refused: {error}", level=logging.ERROR,
                        **job.fields)
            await self._fail(job, f"the handler's result could not be stored: {error}", False)
            return HANDLED

    @staticmethod
    def _completed_by(job: _Job) -> Callable[[Any], bool]:
        return lambda j: (j.status == "completed" and j.generation == job.fence.generation
                          and j.owner_id == job.fence.owner_id)

    async def _flusher(self) -> None:
        """Completes queued results with complete_batch: whatever queued up
        while the previous batch was in flight (plus ``complete_window``)."""
        assert self._completions is not None
        queue = self._completions
        while True:
            items = [await queue.get()]
            if self.complete_window:
                await asyncio.sleep(self.complete_window)
            while not queue.empty() and len(items) < MAX_BATCH:
                items.append(queue.get_nowait())
            try:
                await self._flush(items)
            except Exception as error:  # noqa: BLE001 - hand it to the waiting jobs
                for _, _, future in items:
                    if not future.done():
                        future.set_exception(error)

    async def _flush(self, items: list[tuple[_Job, Any, asyncio.Future]]) -> None:
        if len(items) == 1:
            job, result, future = items[0]
            try:
                answer = await self._complete_one(job, result)
            except BaseException as error:  # noqa: BLE001
                if not future.done():
                    future.set_exception(error)
                return
            if not future.done():
                future.set_result(answer)
            return
        fences = [job.fence for job, _, _ in items]
        results = [result for _, result, _ in items]
        try:
            answers = await self._write(None, "complete_batch",
                                        lambda c: c.complete_batch(fences, results), None)
        except ConfigError:
            # One result is not storable JSON: complete them one by one.
            await asyncio.gather(*(self._flush([item]) for item in items))
            return
        if answers is ABANDONED:
            for _, _, future in items:
                if not future.done():
                    future.set_result(ABANDONED)
            return
        uncertain = getattr(answers, "uncertain", False)
        for (job, _, future), answer in zip(items, answers):
            if not answer and uncertain:
                current = await self._job_status(job)
                answer = current is not None and self._completed_by(job)(current)
                if answer:
                    self._event("ack_recovered", "complete's acknowledgement was lost; the job "
                                "shows this claim's completion", level=logging.WARNING, **job.fields)
            if not future.done():
                future.set_result(bool(answer))

    async def _write(self, job: _Job | None, what: str, call: Callable[[Any], Awaitable[Any]],
                     landed: Callable[[Any], bool] | None) -> Any:
        """One fenced write, re-sent unchanged while its outcome is unknown
        (a fenced write is idempotent: a second copy is refused). After an
        uncertain attempt, a refusal is checked against the job row:
        ``landed(job)`` tells whether the earlier copy took effect."""
        assert self._pool is not None
        delay, uncertain = 0.05, False
        limit = time.monotonic() + (max(2 * job.lease, 10.0) if job is not None else 10.0)
        while True:
            try:
                async with self._pool.client() as client:
                    answer = await call(client)
                break
            except PersistenceFailed:
                uncertain = True
                fields = job.fields if job is not None else {}
                if time.monotonic() > limit or (self._hard_stop and what == "release"):
                    self._event("write_abandoned", f"{what}: the database stayed unreachable; "
                                "giving up (the lease will lapse and reap hands the job on)",
                                level=logging.ERROR, **fields)
                    return ABANDONED
                self._event("write_uncertain", f"{what}: outcome unknown; re-sending the same fenced write",
                            level=logging.WARNING, **fields)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        if isinstance(answer, list):
            return _Answers(answer, uncertain)
        if answer is False and uncertain and job is not None and landed is not None:
            current = await self._job_status(job)
            if current is not None and landed(current):
                self._event("ack_recovered", f"{what}'s acknowledgement was lost; the job shows "
                            "this claim's write", level=logging.WARNING, **job.fields)
                return True
        return answer

    async def _job_status(self, job: _Job) -> Any:
        assert self._pool is not None
        for _ in range(5):
            try:
                async with self._pool.client() as client:
                    return await client.get_job(job.fence.job_id)
            except PersistenceFailed:
                await asyncio.sleep(0.1)
        return None

    async def _refused(self, job: _Job, what: str) -> None:
        """The database answered False to a fenced write: find out why."""
        assert self._pool is not None
        state = None
        with contextlib.suppress(PersistenceFailed):
            async with self._pool.client() as client:
                state = await client.claim_state(job.fence)
        if state is not None and state.cancel_requested:
            job.cancelled.set()
            await self._acknowledge(job)
            return
        if state is not None and what == "cancel":
            # JobCancelled raised without a cancel request: treat as a failure.
            answer = await self._write(job, "fail", lambda c: c.fail(
                job.fence, "the handler raised JobCancelled without a cancel request", retry=False), None)
            self._event("failed", "handler gave up (JobCancelled without a request)",
                        level=logging.WARNING, **job.fields, written=bool(answer))
            return
        job.lost.set()
        self.counts["refused"] += 1
        current = await self._job_status(job)
        self._event(f"{what}_refused", f"{what} refused: this claim's fence is stale "
                    "(its lease lapsed, or the job was taken over or cancelled)",
                    level=logging.WARNING, **job.fields,
                    current_status=None if current is None else current.status,
                    current_generation=None if current is None else current.generation,
                    current_owner=None if current is None else current.owner_id)

    async def _acknowledge(self, job: _Job) -> None:
        answer = await self._write(job, "acknowledge_cancel", lambda c: c.acknowledge_cancel(job.fence),
                                   lambda j: j.status == "cancelled" and j.generation == job.fence.generation)
        if answer is True:
            self.counts["cancelled"] += 1
            self._event("cancelled", "cancel acknowledged: job cancelled", **job.fields)
            return
        if answer is ABANDONED:
            return
        current = await self._job_status(job)
        if current is not None and current.status == "cancelled":
            self.counts["cancelled"] += 1
            self._event("cancelled", "job was cancelled (forced)", **job.fields)
        else:
            job.lost.set()
            self.counts["refused"] += 1
            self._event("acknowledge_refused", "acknowledge_cancel refused: the fence is stale",
                        level=logging.WARNING, **job.fields,
                        current_status=None if current is None else current.status,
                        current_generation=None if current is None else current.generation)

    async def _checkpoint(self, job: _Job, step: str, value: Any) -> Any:
        sent = time.monotonic()
        answer = await self._write(job, "checkpoint", lambda c: c.checkpoint(job.fence, step, value), None)
        if answer is ABANDONED:
            if time.monotonic() > job.deadline:
                self._lose(job, "checkpoint could not be written before the lease ran out")
                raise LeaseLost()
            raise PersistenceFailed()
        if answer is None:  # SQL NULL: no live fence, nothing recorded
            self.counts["refused"] += 1
            self._event("checkpoint_refused", "checkpoint refused: this claim's fence is stale",
                        level=logging.WARNING, **job.fields, step=step)
            self._lose(job, "checkpoint refused: the claim is no longer live")
            raise LeaseLost()
        self._renewed(job, sent)
        job.recorded[step] = answer
        return answer

    def _renewed(self, job: _Job, sent: float) -> None:
        job.deadline = min(sent + job.lease, job.budget_deadline)
        job.next_heartbeat = sent + job.lease * self.heartbeat_fraction

    async def _set_pid(self, job: _Job) -> None:
        assert self._pool is not None
        with contextlib.suppress(PersistenceFailed):
            async with self._pool.client() as client:
                await client.set_pid(job.fence, os.getpid())

    # Heartbeats --------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        assert self._heartbeat_wake is not None and self._pool is not None
        while True:
            self._heartbeat_wake.clear()
            jobs = [j for j in self._inflight.values() if not j.lost.is_set() and not j.abandoned]
            now = time.monotonic()
            if not jobs:
                await self._wait(self._heartbeat_wake, 5.0)
                continue
            due = min(j.next_heartbeat for j in jobs)
            if due > now:
                await self._wait(self._heartbeat_wake, due - now)
                continue
            batch = [j for j in jobs
                     if j.next_heartbeat <= now + j.lease * self.heartbeat_fraction / 2]
            await self._send_heartbeats(batch)

    async def _send_heartbeats(self, batch: list[_Job]) -> None:
        assert self._pool is not None
        sent = time.monotonic()
        lease = timedelta(seconds=self.lease) if self.lease else None
        try:
            async with self._pool.client() as client:
                if len(batch) == 1:
                    answers = [await client.heartbeat(batch[0].fence, lease=lease)]
                else:
                    answers = await client.heartbeat_batch([j.fence for j in batch], lease=lease)
        except PersistenceFailed:
            self._event("heartbeat_failed", "heartbeat could not reach the database; retrying",
                        level=logging.WARNING, jobs=len(batch))
            for job in batch:
                job.next_heartbeat = time.monotonic() + min(0.25, job.lease * self.heartbeat_fraction / 2)
            return
        for job, ok in zip(batch, answers):
            if ok:
                self._renewed(job, sent)
            elif not job.settling:
                self._lose(job, "heartbeat refused: the lease lapsed or the job was taken over")
            else:
                job.next_heartbeat = float("inf")

    async def _heartbeat_one(self, job: _Job) -> bool:
        sent = time.monotonic()
        lease = timedelta(seconds=self.lease) if self.lease else None
        answer = await self._write(job, "heartbeat", lambda c: c.heartbeat(job.fence, lease=lease), None)
        if answer is True:
            self._renewed(job, sent)
            return True
        if answer is False:
            self._lose(job, "heartbeat refused")
        return False

    def _lose(self, job: _Job, why: str) -> None:
        if job.lost.is_set():
            return
        job.lost.set()
        job.next_heartbeat = float("inf")
        self._event("lease_lost", why, level=logging.WARNING, **job.fields)

    @staticmethod
    async def _wait(event: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), min(max(timeout, 0.001), 5.0))

    # Cancellation ------------------------------------------------------------------

    async def _control_poller(self) -> None:
        while True:
            await asyncio.sleep(self.control_poll)
            for job in list(self._inflight.values()):
                if not job.cancelled.is_set() and not job.lost.is_set() and not job.settling:
                    await self._check_control(job)

    async def _check_control(self, job: _Job) -> None:
        assert self._pool is not None
        try:
            async with self._pool.client() as client:
                state = await client.claim_state(job.fence)
        except PersistenceFailed:
            return
        if job.settling or job.abandoned or self._inflight.get(job.fence.job_id) is not job:
            return
        if state is None:
            current = await self._job_status(job)
            if job.settling or job.abandoned:
                return
            if current is not None and current.status == "cancelled":
                self._mark_cancelled(job, forced=True)
            self._lose(job, "the claim is no longer live")
            return
        if state.cancel_requested:
            self._mark_cancelled(job)

    def _mark_cancelled(self, job: _Job, forced: bool = False) -> None:
        if job.cancelled.is_set():
            return
        job.cancelled.set()
        self._event("cancel_requested", "cancel requested; the handler is told"
                    + (" (forced: the fence is already dead)" if forced else ""), **job.fields)
        if job.is_async and self.cancel_grace is not None and job.task is not None:
            self._spawn(self._cancel_after_grace(job))

    async def _cancel_after_grace(self, job: _Job) -> None:
        await asyncio.sleep(self.cancel_grace or 0)
        if job.task is not None and not job.task.done() and not job.settling:
            self._event("cancel_enforced", "async handler ignored the cancel request; cancelling it",
                        level=logging.WARNING, **job.fields)
            job.task.cancel()

    # Wake-ups (PostgreSQL) ---------------------------------------------------------

    async def _listener(self) -> None:
        import psycopg

        assert self._wake is not None and self._listening is not None
        delay = 0.1
        queues = set(self.queues)
        while True:
            connection = None
            try:
                connection = await psycopg.AsyncConnection.connect(_plain_pg_url(self.url), autocommit=True)
                await connection.execute("LISTEN fenceq_jobs")
                await connection.execute("LISTEN fenceq_control")
                delay = 0.1
                first = not self._listening.is_set()
                self._listening.set()
                if not first:
                    # Notifications may have been missed while disconnected.
                    self._event("listener_reconnected", "LISTEN connection restored")
                    self._wake.set()
                    for job in list(self._inflight.values()):
                        self._spawn(self._check_control(job))
                async for note in connection.notifies():
                    if note.channel == "fenceq_jobs":
                        if note.payload in queues:
                            self._wake.set()
                    elif note.channel == "fenceq_control":
                        job = self._inflight.get(note.payload)
                        if job is not None:
                            self._spawn(self._check_control(job))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - reconnect on anything
                self._event("listener_lost", f"LISTEN connection lost ({type(error).__name__}); "
                            "polling until it is back", level=logging.WARNING)
                self._listening.set()
            finally:
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    # Reap and purge ----------------------------------------------------------------

    async def _reaper(self) -> None:
        assert self.reap_interval is not None
        interval = self.reap_interval
        await asyncio.sleep(random.uniform(0, interval))
        last_purge = 0.0
        connection = None
        failing = False
        try:
            while True:
                full = False
                try:
                    purge = self.purge_after is not None and time.monotonic() - last_purge >= self.purge_interval
                    if self.backend == "postgres":
                        connection, full, purged = await self._reap_pg(connection, purge)
                    else:
                        full, purged = await self._reap_plain(purge)
                    if purged is not None:
                        last_purge = time.monotonic()
                    failing = False
                except PersistenceFailed:
                    if not failing:  # once per outage, not every round
                        self._event("reap_failed", "reap could not reach the database; retrying",
                                    level=logging.WARNING)
                    failing = True
                    if connection is not None:
                        with contextlib.suppress(Exception):
                            await connection.close()
                    connection = None
                except ConfigError as error:
                    self._event("reap_disabled", f"reap/purge refused ({error.reason}); this worker stops "
                                "reaping", level=logging.ERROR)
                    return
                await asyncio.sleep(0.01 if full else interval * random.uniform(0.8, 1.2))
        finally:
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()

    async def _reap_pg(self, connection: Any, purge: bool) -> tuple[Any, bool, int | None]:
        """One round under pg_try_advisory_xact_lock: held only while reaping,
        so a worker that is paused between rounds never blocks the fleet."""
        import psycopg

        from .errors import translate

        try:
            if connection is None or connection.closed:
                connection = await psycopg.AsyncConnection.connect(_plain_pg_url(self.url), autocommit=True)
                # A worker paused inside a reap transaction would keep the rows
                # it reaped locked (claimers skip them): let the server end it.
                await connection.execute("SET idle_in_transaction_session_timeout = '2s'")
            full, purged = False, None
            async with connection.transaction():
                cursor = await connection.execute("SELECT pg_try_advisory_xact_lock(%s)", (REAPER_LOCK,))
                row = await cursor.fetchone()
                if not row or not row[0]:
                    return connection, False, None
                client = await connect_async(connection=connection)
                full = self._reaped(await client.reap(max_rows=MAX_BATCH))
            if purge:
                async with connection.transaction():
                    cursor = await connection.execute("SELECT pg_try_advisory_xact_lock(%s)", (REAPER_LOCK,))
                    row = await cursor.fetchone()
                    if row and row[0]:
                        client = await connect_async(connection=connection)
                        purged = await self._purge(client)
            return connection, full, purged
        except psycopg.Error as error:
            with contextlib.suppress(Exception):
                await connection.close()
            raise translate(error.sqlstate, error.diag.message_primary) from error

    async def _reap_plain(self, purge: bool) -> tuple[bool, int | None]:
        # SQLite runs every write in BEGIN IMMEDIATE: reaps never overlap.
        assert self._pool is not None
        async with self._pool.client() as client:
            full = self._reaped(await client.reap(max_rows=MAX_BATCH))
            purged = await self._purge(client) if purge else None
        return full, purged

    def _reaped(self, result: Any) -> bool:
        total = result.requeued + result.failed + result.cancelled + result.expired
        if total:
            self.counts["reaped"] += total
            self._event("reaped", "reap settled expired claims and overdue jobs", requeued=result.requeued,
                        failed=result.failed, cancelled=result.cancelled, expired=result.expired)
        return total >= MAX_BATCH

    async def _purge(self, client: Any) -> int:
        assert self.purge_after is not None
        count = await client.purge(self.purge_after, max_rows=10_000,
                                   submissions_older_than=self.purge_submissions_after)
        if count:
            self._event("purged", "retention purge deleted finished jobs", jobs=count)
        return count

    # Drain -------------------------------------------------------------------------

    async def _drain(self) -> None:
        assert self._idle is not None
        if not self._inflight:
            return
        for job in self._inflight.values():
            job.stopping.set()
        if not self._hard_stop and self.drain_timeout:
            self._event("draining", "waiting for running jobs", in_flight=len(self._inflight),
                        timeout=self.drain_timeout)
            deadline = time.monotonic() + self.drain_timeout
            while self._inflight and not self._hard_stop and time.monotonic() < deadline:
                self._idle.clear()
                await self._wait(self._idle, deadline - time.monotonic())
        unfinished = [j for j in self._inflight.values() if not j.settling]
        for job in unfinished:
            job.abandoned = True
            job.lost.set()
            if job.task is not None:
                job.task.cancel()
        if unfinished:
            self._event("drain_timeout", "releasing unfinished jobs", jobs=len(unfinished),
                        level=logging.WARNING)
        await asyncio.gather(*(self._release(job) for job in unfinished))
        # Outcomes already being written get a short grace to land.
        settling = [j.task for j in self._inflight.values() if j.settling and j.task is not None]
        if settling:
            await asyncio.wait(settling, timeout=5.0)

    async def _release(self, job: _Job) -> None:
        answer = await self._write(job, "release", lambda c: c.release(job.fence),
                                   lambda j: j.status == "pending" and j.generation == job.fence.generation
                                   and j.last_error != "lease_expired")
        if answer is True:
            self.counts["released"] += 1
            self._event("released", "job released unfinished (no attempt spent)", **job.fields)
        elif answer is False:
            state = None
            with contextlib.suppress(PersistenceFailed):
                assert self._pool is not None
                async with self._pool.client() as client:
                    state = await client.claim_state(job.fence)
            if state is not None and state.cancel_requested:
                await self._acknowledge(job)
            else:
                self._event("release_refused", "release refused: the fence is stale",
                            level=logging.WARNING, **job.fields)
        self._finish(job)

    # Helpers -----------------------------------------------------------------------

    async def _guard(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop; restart it (logged) if it ever fails."""
        while True:
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception(f"background loop {name} failed; restarting it",
                              extra={"event": "loop_error", "fenceq": {"loop": name, "worker": self.owner_id}})
                await asyncio.sleep(0.5)

    def _spawn(self, coroutine: Awaitable[Any]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coroutine)  # type: ignore[arg-type]
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def _event(self, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
        if log.isEnabledFor(level):
            fields = {k: v for k, v in fields.items() if v is not None}
            fields.setdefault("worker", self.owner_id)
            log.log(level, message, extra={"event": event, "fenceq": fields})


ABANDONED = object()  # a write given up on after the database stayed unreachable
HANDLED = object()    # an outcome already written another way


class _Answers(list):
    """complete_batch's answers, remembering whether a copy was uncertain."""

    def __init__(self, values: list[bool], uncertain: bool):
        super().__init__(values)
        self.uncertain = uncertain


def _plain_pg_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest
