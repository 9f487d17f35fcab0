"""The runtime: ``Worker``, the public face, and ``Runtime``, which opens the
pool, builds the units around one ``WorkerState``, runs their loops and
stops them. Which loops run follows the backend's capabilities."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from datetime import timedelta
from typing import Any, Awaitable, Callable, Iterable

from ..backends import open_async_backend
from ..client import resolve_url
from ..errors import ConfigError, PersistenceFailed
from ..observability.endpoints import WorkerEndpoints
from .cancel_watcher import CancelWatcher
from .claimer import Claimer
from .clock import Clock, SystemClock
from .events import Events
from .executor import Executor, Registry
from .fenced_writer import FencedWriter
from .heartbeater import Heartbeater
from .maintenance import Maintenance
from .notifier import Notifier
from .pool import BackendOpener, ClientWrapper, Pool
from .settings import WorkerSettings
from .settler import Settler
from .shutdown import Shutdown
from .state import COUNTS, WorkerState

LISTEN_WAIT = 5.0      # seconds the start waits for the first LISTEN
RESTART_DELAY = 0.5    # seconds before a failed background loop runs again


class Runtime:
    """One run of a worker. ``open_backend`` and ``clock`` are injected, so
    that unit tests can drive the units over an in-memory backend."""

    def __init__(self, registry: Registry, settings: WorkerSettings, *, open_backend: BackendOpener,
                 wrap_client: ClientWrapper | None = None, clock: Clock | None = None,
                 counts: dict[str, int] | None = None, started: threading.Event | None = None):
        self.registry = registry
        self.settings = settings
        self.counts = counts if counts is not None else dict.fromkeys(COUNTS, 0)
        self.started = started or threading.Event()
        self.backend_name = "?"
        self._open_backend = open_backend
        self._wrap_client = wrap_client
        self._clock = clock or SystemClock()
        self._events = Events(settings.owner_id)
        self._endpoints = (WorkerEndpoints(settings, self._events, self.started)
                           if settings.metrics_port is not None else None)
        self._shutdown: Shutdown | None = None
        self._stop_before_start: bool | None = None  # a stop request's "now", before there was a state

    def request_stop(self, now: bool = False) -> None:
        """On the loop (or before the run)."""
        if self._shutdown is None:
            self._stop_before_start = bool(self._stop_before_start) or now
        else:
            self._shutdown.request(now)

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        loop = asyncio.get_running_loop()
        pool = Pool(self._open_backend, self.settings.connections, self._wrap_client, self._server_switched)
        installed: list[signal.Signals] = []
        background: list[asyncio.Task] = []
        state: WorkerState | None = None
        executor: Executor | None = None
        try:
            if self._endpoints is not None:
                self._endpoints.start(loop)
            await pool.open()
            self.backend_name = pool.backend.name
            self.settings = self.settings.for_backend(pool.capabilities)
            await self._check_schema(pool)
            state = WorkerState(self.settings, self._clock, self._events, self.counts)
            if self._endpoints is not None:
                self._endpoints.attach(state, pool, self.backend_name)
            writer = FencedWriter(state, pool)
            heartbeater = Heartbeater(state, pool, writer)
            settler = Settler(state, pool, writer)
            executor = Executor(state, self.registry, pool, writer, heartbeater, settler)
            claimer = Claimer(state, pool, executor.admit, executor.fill)
            watcher = CancelWatcher(state, pool, writer)
            self._shutdown = Shutdown(state, writer, settler)
            if self._stop_before_start is not None:
                self._shutdown.request(self._stop_before_start)
            if install_signal_handlers:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(NotImplementedError, RuntimeError):
                        loop.add_signal_handler(signum, self.request_stop, False)
                        installed.append(signum)
            background = [loop.create_task(self._guard("heartbeats", heartbeater.run)),
                          loop.create_task(self._guard("control", watcher.run))]
            if self.settings.batch_completions:
                background.append(loop.create_task(self._guard("completions", settler.completer.run)))
            if pool.capabilities.notifications:
                notifier = Notifier(state, self._listen_opener(), watcher.check)
                background.append(loop.create_task(self._guard("listener", notifier.run)))
                await self._clock.wait(notifier.listening, LISTEN_WAIT)
            if self.settings.reap_interval:
                maintenance = Maintenance(state, self._open_backend)
                background.append(loop.create_task(self._guard("reaper", maintenance.run)))
            self._events.emit("worker_started", "worker started", queues=list(self.settings.queues),
                              concurrency=self.settings.concurrency, backend=self.backend_name, pid=os.getpid(),
                              tasks=sorted(self.registry.tasks))
            self.started.set()
            failure: BaseException | None = None
            try:
                await claimer.run()
            except Exception as error:  # noqa: BLE001 - drain first, then re-raise
                failure = error
                state.stop_requested = state.hard_stop = True
            await self._shutdown.drain()
            if failure is not None:
                raise failure
        finally:
            for signum in installed:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signum)
            tasks = background + (state.side_tasks if state is not None else [])
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            if self._endpoints is not None:
                await self._endpoints.close_reader()
                await asyncio.to_thread(self._endpoints.close)
            if executor is not None:
                executor.close()
            await pool.close()
            self._events.emit("worker_stopped", "worker stopped", **self.counts)

    def _server_switched(self, before: str, now: str) -> None:
        self.counts["server_switches"] += 1
        self._events.emit("server_switched", "connected to another database server (a failover: the URL's "
                          "primary moved)", level=logging.WARNING, before=before, now=now)

    def _listen_opener(self) -> BackendOpener:
        """LISTEN's connection: the listen_url's when given (a direct one,
        where the database URL goes through PgBouncer), else the worker's."""
        listen_url = self.settings.listen_url
        if listen_url is None:
            return self._open_backend
        return lambda: open_async_backend(listen_url)

    async def _check_schema(self, pool: Pool) -> None:
        """Fail fast, with a clear message, on a database without fenceq."""
        missing = ConfigError("fenceq: fenceq is not installed in this database (run `fenceq migrate`)",
                              reason="schema_mismatch", sqlstate="QF901")
        try:
            async with pool.client() as client:
                version = await client.version()
        except PersistenceFailed as error:
            if pool.backend.schema_missing(error):
                raise missing from None
            raise
        if version in (None, "", "0"):
            raise missing

    async def _guard(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop; restart it (logged) if it ever fails."""
        while True:
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                self._events.exception("loop_error", f"background loop {name} failed; restarting it", loop=name)
                await self._clock.sleep(RESTART_DELAY)


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
    - ``listen_url``: where to LISTEN (PostgreSQL), when ``url`` goes
      through PgBouncer; without it such a worker polls (docs/dba.md).
    - ``wrap_client``: a function applied to every client the worker opens
      (instrumentation, fault injection in tests).
    - ``read_url``: read the metrics' ``queue_stats`` gauges from this
      PostgreSQL URL (a standby) instead of the worker's; every write and
      every decision stays on ``url``.
    - ``metrics_port``: serve ``/metrics``, ``/healthz`` and ``/readyz`` on
      this port (0: any free one) of ``metrics_host`` (default 127.0.0.1);
      ``health_window`` (30): ``/healthz`` fails once the database has not
      answered for this long; ``stats_interval`` (5): ``queue_stats`` is
      read for the metrics at most this often (docs/observability.md).

    The options are readable as attributes (``worker.lease``, …), as
    ``worker.settings`` holds them.
    """

    def __init__(self, app: Registry, *, url: str | None = None, queues: Iterable[str] | None = None,
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
                 wrap_client: ClientWrapper | None = None, listen_url: str | None = None,
                 read_url: str | None = None, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", health_window: timedelta | float = 30.0,
                 stats_interval: timedelta | float = 5.0):
        if not isinstance(app, Registry):
            raise TypeError("Worker needs a fenceq.App")
        self.app = app
        self.url = resolve_url(url)
        self.wrap_client = wrap_client
        self.counts: dict[str, int] = dict.fromkeys(COUNTS, 0)
        self.started = threading.Event()
        settings = WorkerSettings.from_options(
            queues=list(queues if queues is not None else app.queues), concurrency=concurrency,
            owner_id=owner_id, lease=lease, budget=budget, heartbeat_fraction=heartbeat_fraction,
            drain_timeout=drain_timeout, poll_interval=poll_interval, control_poll=control_poll,
            reap_interval=reap_interval, purge_after=purge_after,
            purge_submissions_after=purge_submissions_after, purge_interval=purge_interval,
            complete_window=complete_window, batch_completions=batch_completions, cancel_grace=cancel_grace,
            record_pid=record_pid, connections=connections, listen_url=listen_url, read_url=read_url,
            metrics_port=metrics_port,
            metrics_host=metrics_host, health_window=health_window, stats_interval=stats_interval)
        self._runtime = Runtime(app, settings, open_backend=lambda: open_async_backend(self.url),
                                wrap_client=wrap_client, counts=self.counts, started=self.started)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._finished = False

    @property
    def settings(self) -> WorkerSettings:
        """The options (with the backend's default intervals once running)."""
        return self._runtime.settings

    @property
    def backend(self) -> str:
        """"postgres" or "sqlite" once running ("?" before)."""
        return self._runtime.backend_name

    def __getattr__(self, name: str) -> Any:
        runtime = self.__dict__.get("_runtime")
        if runtime is None or name not in WorkerSettings.__dataclass_fields__:
            raise AttributeError(name)
        return getattr(runtime.settings, name)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until stopped (SIGINT/SIGTERM, or ``stop()``)."""
        asyncio.run(self.run_async(install_signal_handlers=install_signal_handlers))

    async def run_async(self, *, install_signal_handlers: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            await self._runtime.run(install_signal_handlers=install_signal_handlers)
        finally:
            self._finished = True

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: stop claiming, drain, release. Safe from
        any thread and from signal handlers. ``now`` skips the drain wait."""
        loop = self._loop
        if self._finished:
            return
        if loop is None or loop.is_closed() or threading.get_ident() == self._loop_thread:
            self._runtime.request_stop(now)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._runtime.request_stop, now)
