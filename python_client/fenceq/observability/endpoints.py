"""The HTTP endpoints of a worker run with ``metrics_port``: ``/metrics``
(Prometheus text or OpenMetrics, as the scraper asks), ``/healthz`` and
``/readyz``. They are served from a thread of their own (Werkzeug's
threaded server), so that a wedged event loop is reported, not just
silent: ``/healthz`` asks the loop to answer and fails when it does not.

- ``/healthz``: 200 while the event loop answers within LOOP_PATIENCE and
  the database answered one of the worker's calls within ``health_window``
  (counted from the start until the first answer); else 503 with the
  reasons, one a line. A liveness probe.
- ``/readyz``: 200 once the schema was checked and the worker is claiming;
  503 while starting and once it is draining. A readiness probe.

Both bind ``metrics_host`` (127.0.0.1 unless told otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import choose_encoder
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from ..backends import open_async_backend
from ..client import AsyncClient
from ..errors import PersistenceFailed
from .metrics import QueueCollector, QueueFigures, WorkerMetrics, worker_gauges

if TYPE_CHECKING:
    from ..worker.events import Events
    from ..worker.pool import Pool
    from ..worker.settings import WorkerSettings
    from ..worker.state import WorkerState

LOOP_PATIENCE = 5.0     # seconds /healthz waits for the event loop to answer
STATS_PATIENCE = 10.0   # seconds a scrape waits for queue_stats


class QuietHandler(WSGIRequestHandler):
    """No log line per request (a scraper comes every few seconds)."""

    def log_request(self, *args: Any) -> None:
        pass


def serve(app: Any, host: str, port: int, name: str) -> tuple[BaseWSGIServer, threading.Thread]:
    """A threaded WSGI server for ``app`` on (host, port), serving from a
    daemon thread; port 0 picks a free one (``server.server_port``)."""
    server = make_server(host, port, app, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return server, thread


def stop(server: BaseWSGIServer, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join()


class WorkerEndpoints:
    """Built with the worker's runtime (its events feed the counters);
    ``start`` serves, ``attach`` connects it to the running worker once the
    schema was checked, ``close`` stops serving."""

    def __init__(self, settings: WorkerSettings, events: Events, started: threading.Event):
        self.registry = CollectorRegistry()
        self.metrics = WorkerMetrics(self.registry)
        events.listeners.append(self.metrics.on_event)
        self._settings = settings
        self._events = events
        self._started = started
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state: WorkerState | None = None
        self._pool: Pool | None = None
        self._replica: AsyncClient | None = None  # on read_url
        self._opened_at = time.monotonic()
        self._server: tuple[BaseWSGIServer, threading.Thread] | None = None
        self.port: int | None = None
        in_flight, concurrency, answer_age, self._info = worker_gauges(self.registry)
        in_flight.set_function(lambda: len(self._state.inflight) if self._state is not None else 0)
        concurrency.set(settings.concurrency)
        answer_age.set_function(self.database_answer_age)
        # Registered after the queue gauges, so that a scrape counts the read it caused.
        reads = Counter("fenceq_worker_queue_stats_reads", "Reads of queue_stats for the metrics.", registry=None)
        self.registry.register(QueueCollector(QueueFigures(self._read_queue_stats, settings.stats_interval, reads),
                                              settings.queues))
        self.registry.register(reads)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        settings = self._settings
        assert settings.metrics_port is not None
        self._server = serve(self.wsgi, settings.metrics_host, settings.metrics_port, "fenceq-metrics")
        self.port = self._server[0].server_port
        self._events.emit("metrics_listening", "serving /metrics, /healthz and /readyz",
                          host=settings.metrics_host, port=self.port)

    def attach(self, state: WorkerState, pool: Pool, backend: str) -> None:
        self._info.info({"worker": state.settings.owner_id, "backend": backend})
        self._pool = pool
        self._state = state

    def close(self) -> None:
        if self._server is not None:
            stop(*self._server)
            self._server = None

    # What the endpoints report ----------------------------------------------------

    def database_answer_age(self) -> float:
        answered = self._pool.answered_at if self._pool is not None else None
        return time.monotonic() - (answered if answered is not None else self._opened_at)

    def _loop_answers(self) -> bool:
        answered = threading.Event()
        try:
            if self._loop is None:
                return False
            self._loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # the loop is closed
            return False
        return answered.wait(LOOP_PATIENCE)

    def health_problems(self) -> list[str]:
        problems = []
        if not self._loop_answers():
            problems.append(f"the event loop did not answer within {LOOP_PATIENCE:g}s")
        age, window = self.database_answer_age(), self._settings.health_window
        if age > window:
            problems.append(f"the database has not answered for {age:.0f}s (health window {window:g}s)")
        return problems

    def readiness_problem(self) -> str | None:
        if self._state is None or not self._started.is_set():
            return "starting: the schema is not yet checked or the worker is not yet claiming"
        if self._state.stop_requested:
            return "draining: the worker claims no more jobs"
        return None

    def _read_queue_stats(self) -> Any:
        pool, loop = self._pool, self._loop
        if pool is None or loop is None:
            raise RuntimeError("the worker has not started")

        async def read() -> Any:
            if self._settings.read_url is not None:
                return await self._read_replica()
            async with pool.client() as client:
                return await client.queue_overview()

        future = asyncio.run_coroutine_threadsafe(read(), loop)
        try:
            return future.result(STATS_PATIENCE)
        except BaseException:
            future.cancel()
            raise

    async def _read_replica(self) -> Any:
        """queue_stats on the read_url (on the worker's loop); a client
        whose call failed is closed and opened again on the next read."""
        if self._replica is None:
            self._replica = AsyncClient(await open_async_backend(self._settings.read_url))
        try:
            return await self._replica.queue_overview()
        except PersistenceFailed:
            await self.close_reader()
            raise

    async def close_reader(self) -> None:
        replica, self._replica = self._replica, None
        if replica is not None:
            with contextlib.suppress(Exception):
                await replica.close()

    # WSGI ---------------------------------------------------------------------------

    def wsgi(self, environ: dict, start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        if request.method not in ("GET", "HEAD"):
            response = Response("only GET\n", status=405, headers={"Allow": "GET, HEAD"})
        elif request.path == "/metrics":
            encoder, content_type = choose_encoder(request.headers.get("Accept"))
            response = Response(encoder(self.registry), content_type=content_type)
        elif request.path == "/healthz":
            response = probe_response(self.health_problems())
        elif request.path == "/readyz":
            problem = self.readiness_problem()
            response = probe_response([problem] if problem else [])
        else:
            response = Response("not found: try /metrics, /healthz or /readyz\n", status=404)
        response.headers["Cache-Control"] = "no-store"
        return response(environ, start_response)


def probe_response(problems: list[str]) -> Response:
    if problems:
        return Response("".join(p + "\n" for p in problems), status=503, content_type="text/plain; charset=utf-8")
    return Response("ok\n", content_type="text/plain; charset=utf-8")
