"""What the ASGI frameworks' integrations share (docs/integrations.md): the
App's clients opened with the web application and closed with it, one
database transaction per request, and optionally the App's worker running
on the application's event loop while it serves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator, Mapping

from ..backends import backend_of
from ..client import AsyncClient, AsyncTransaction, connect_async, resolve_url
from ..errors import config_error
from ..worker.app import App
from ..worker.runtime import Worker

STATE_KEY = "fenceq_app"
POOL_SIZE = 10  # connections for request transactions (PostgreSQL), by default
STARTING_POLL = 0.01  # seconds between looks at a starting worker's `started`

log = logging.getLogger("fenceq.worker")


class Integration:
    """``lifespan(web_app)`` for the framework; the App as a dependency (the
    instance called); ``request_transaction()``, a request's transaction;
    ``worker``, the worker on the application's loop while it serves.

    ``worker``: True, or a dict of ``Worker`` options, runs the App's worker
    on the application's event loop from startup to shutdown (none while a
    ``fenceq.testing`` in-process mode runs the App's jobs). ``pool_size``:
    on PostgreSQL, the request transactions' connections."""

    def __init__(self, app: App, *, worker: bool | Mapping[str, Any] = False, pool_size: int = POOL_SIZE):
        self.app = app
        self.worker_options: dict[str, Any] | None = (
            None if worker is False else {} if worker is True else dict(worker))
        self.pool_size = pool_size
        self.worker: Worker | None = None
        self._transactions: AsyncClient | None = None  # while the lifespan is open

    def __call__(self) -> App:
        return self.app

    @contextlib.asynccontextmanager
    async def lifespan(self, web_app: Any) -> AsyncIterator[dict[str, App]]:
        """Open the App's async client on the server's loop (a wrong URL
        fails the start, not the first request), the request transactions'
        client and the worker; stop and close them in the reverse order at
        shutdown. Its value is the lifespan state Starlette keeps
        (``request.state.fenceq_app``)."""
        async with contextlib.AsyncExitStack() as stack:
            await self.app.async_client()
            stack.push_async_callback(self.app.aclose)
            if not self.app.submitter.in_process:
                # The App's database: its own, or a DatabaseMode's.
                url = resolve_url(self.app.submitter.url)  # type: ignore[attr-defined]
                self._transactions = await stack.enter_async_context(transactions_client(url, self.pool_size))
                stack.callback(setattr, self, "_transactions", None)
                if self.worker_options is not None:
                    self.worker = await stack.enter_async_context(
                        worker_running(self.app, {"url": url, **self.worker_options}))
                    stack.callback(setattr, self, "worker", None)
            yield {STATE_KEY: self.app}

    async def request_transaction(self) -> AsyncIterator[AsyncTransaction]:
        """A transaction for one request: it commits when the handler
        returns and rolls back when it raises. ``task.using(tx)`` submits in
        it; ``tx.execute`` runs the application's own statements there.
        While an in-process testing mode runs the App's jobs, a transaction
        whose submissions go to the mode and which has no SQL."""
        if self.app.submitter.in_process:
            yield AsyncTransaction(InProcessTransaction(await self.app.async_client()))
            return
        if self._transactions is None:
            raise config_error("QF100", "a request transaction needs the integration's lifespan "
                               "(the application started, e.g. a test client used as `with TestClient(…)`)")
        async with self._transactions.transaction() as tx:
            yield tx


class InProcessTransaction:
    """A request transaction's backend while an in-process testing mode
    runs the App's jobs: fenceq's operations go to the mode's client; the
    application's own statements have no database there."""

    def __init__(self, client: AsyncClient):
        self._client = client
        self.name = client.backend

    async def run(self, op: Any) -> Any:
        return await self._client._call(op)

    async def execute(self, sql: str, params: Any = None) -> list[tuple]:
        raise config_error("QF100", "an in-process testing mode has no database for the application's "
                           "own statements: test this request with fenceq.testing.DatabaseMode")


@contextlib.asynccontextmanager
async def transactions_client(url: str, pool_size: int) -> AsyncIterator[AsyncClient]:
    """Where request transactions come from. PostgreSQL: a pool of
    connections (opened now: a wrong URL fails the start). SQLite: a client
    whose transactions are ``BEGIN IMMEDIATE`` on a connection each (the
    file has one writer at a time)."""
    if backend_of(url) == "sqlite":
        client = await connect_async(url)
        try:
            yield client
        finally:
            await client.close()
        return
    from ..backends.postgres import request_pool

    async with request_pool(url, pool_size, "fenceq-requests") as pool:
        yield await connect_async(pool=pool)


@contextlib.asynccontextmanager
async def worker_running(app: App, options: Mapping[str, Any]) -> AsyncIterator[Worker]:
    """The App's worker as a task of this loop, once it has started (a
    worker that cannot start fails the application's start); at the end,
    a graceful stop: no new claims, running handlers drained for up to
    ``drain_timeout``, the rest released."""
    worker = app.worker(**options)
    running = asyncio.create_task(worker.run_async(), name="fenceq-worker")
    try:
        while not worker.started.is_set():  # a thread's Event: looked at, not awaited
            if running.done():
                running.result()  # the reason it stopped
                raise config_error("QF100", "the worker stopped before it started")
            await asyncio.sleep(STARTING_POLL)
        running.add_done_callback(_report_failure)
        yield worker
    finally:
        worker.stop()
        await asyncio.wait([running])


def _report_failure(running: asyncio.Task) -> None:
    """A worker that fails while the application serves is logged; the
    application goes on without it."""
    if not running.cancelled() and running.exception() is not None:
        log.error("the worker on the application's loop stopped on an error", exc_info=running.exception(),
                  extra={"event": "worker_failed"})
