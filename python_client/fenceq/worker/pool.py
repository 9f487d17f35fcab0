"""The worker's clients: a few ``AsyncClient``s, each used by one coroutine
at a time, over backends from one opener."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Awaitable, Callable

from ..backends import AsyncBackend, Capabilities
from ..client import AsyncClient
from ..errors import PersistenceFailed

BackendOpener = Callable[[], Awaitable[AsyncBackend]]
ClientWrapper = Callable[[AsyncClient], Any]
SwitchListener = Callable[[str, str], None]  # (the server before, the server now)


class Pool:
    """A client whose call raised PersistenceFailed is closed and reopened on
    next use (its connection may be gone). ``wrap`` is applied to every
    client opened (instrumentation, fault injection).

    A URL naming several hosts (``target_session_attrs=read-write``) opens
    on whichever is primary: ``on_switch`` hears when a client opens on
    another server than the last one opened (a failover)."""

    def __init__(self, open_backend: BackendOpener, size: int, wrap: ClientWrapper | None,
                 on_switch: SwitchListener | None = None):
        self._open_backend = open_backend
        self._wrap = wrap
        self._on_switch = on_switch
        self.server: str | None = None  # host:port of the last client opened (PostgreSQL owned connections)
        # Idle clients, the last returned on top: a client is opened only
        # when every open one is busy, so a worker holds as many connections
        # as it uses at once (each costs the server a process and its caches).
        self._idle: list[Any] = []
        self._capacity = asyncio.Semaphore(size)
        self._all: list[Any] = []
        self._first: AsyncBackend | None = None
        self.answered_at: float | None = None  # monotonic: the last call the database answered (health)

    async def open(self) -> None:
        """Open the first client (the rest open when needed at once)."""
        self._idle.append(await self._new())

    @property
    def backend(self) -> AsyncBackend:
        """The first backend opened: its name, capabilities and error reading."""
        assert self._first is not None, "open() first"
        return self._first

    @property
    def capabilities(self) -> Capabilities:
        return self.backend.capabilities

    async def _new(self) -> Any:
        backend = await self._open_backend()
        self._first = self._first or backend
        server = getattr(backend, "server", None)
        if server is not None:
            if self.server is not None and server != self.server and self._on_switch is not None:
                self._on_switch(self.server, server)
            self.server = server
        client: Any = AsyncClient(backend)
        if self._wrap is not None:
            client = self._wrap(client)
        self._all.append(client)
        return client

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        async with self._capacity:
            client = self._idle.pop() if self._idle else None
            try:
                if client is None:
                    client = await self._new()
                yield client
            except PersistenceFailed:
                if client is not None:
                    await self._discard(client)
                client = None
                raise
            else:
                self.answered_at = time.monotonic()
            finally:
                if client is not None:
                    self._idle.append(client)

    async def spare(self) -> Any:
        """A client outside the free queue, for one user at a time (a
        transaction's), closed with the pool or by ``discard``."""
        return await self._new()

    async def discard(self, client: Any) -> None:
        await self._discard(client)

    async def _discard(self, client: Any) -> None:
        with contextlib.suppress(Exception):
            self._all.remove(client)
        with contextlib.suppress(Exception):
            await client.close()

    async def close(self) -> None:
        for client in list(self._all):
            await self._discard(client)
