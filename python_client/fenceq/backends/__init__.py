"""Database backends: the ``Backend`` / ``AsyncBackend`` interface
(``protocol.py``), PostgreSQL (``postgres.py``), SQLite (``sqlite.py``),
how answers decode (``results.py``) and the migrations of both engines
(``migrations.py``). Nothing outside this package imports a driver.

An engine's module is imported only when a URL names it, so a build without
one of the drivers still serves the other.
"""

from __future__ import annotations

from typing import Any

from ..errors import config_error
from .protocol import AsyncBackend, Backend, Capabilities, Notification

__all__ = ["AsyncBackend", "Backend", "Capabilities", "Notification", "backend_of", "open_async_backend",
           "open_backend", "write_lock_held"]


def backend_of(url: str) -> str:
    """"postgres" or "sqlite", from the URL's scheme."""
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        return "postgres"
    if scheme == "sqlite":
        return "sqlite"
    raise config_error("QF100", "the URL must start with postgresql:// or sqlite:///")


def _check_listen_url(listen_url: str | None, postgres: bool) -> None:
    """A listen_url is a postgresql:// URL, for a PostgreSQL client only."""
    if listen_url is not None and (not postgres or backend_of(listen_url) != "postgres"):
        raise config_error("QF100", "listen_url must be a postgresql:// URL, for a PostgreSQL client")


def open_backend(url: str | None = None, *, connection: Any = None, pool: Any = None,
                 listen_url: str | None = None) -> Backend:
    """A backend for a URL, or for a psycopg ``Connection`` / ``ConnectionPool``
    the caller owns; ``listen_url`` is where its waits LISTEN (PostgreSQL)."""
    postgres = connection is not None or pool is not None or backend_of(url or "") == "postgres"
    _check_listen_url(listen_url, postgres)
    if postgres:
        from .postgres import PostgresBackend

        return PostgresBackend(url=url, connection=connection, pool=pool, listen_url=listen_url)
    from .sqlite import SqliteBackend

    return SqliteBackend(url or "")


async def open_async_backend(url: str | None = None, *, connection: Any = None, pool: Any = None,
                             listen_url: str | None = None) -> AsyncBackend:
    """Async twin of ``open_backend`` (an ``AsyncConnection`` or
    ``AsyncConnectionPool`` the caller owns)."""
    postgres = connection is not None or pool is not None or backend_of(url or "") == "postgres"
    _check_listen_url(listen_url, postgres)
    if connection is not None or pool is not None:
        from .postgres import AsyncPostgresBackend

        return AsyncPostgresBackend(connection=connection, pool=pool, listen_url=listen_url)
    if postgres:
        from .postgres import AsyncPostgresBackend

        return await AsyncPostgresBackend.connect(url or "", listen_url)
    from .sqlite import AsyncSqliteBackend

    return await AsyncSqliteBackend.connect(url or "")


def write_lock_held(url: str) -> bool:
    """Whether a process holds the database's single write lock right now
    (only SQLite has one: a process frozen inside a write stalls the rest)."""
    if backend_of(url) != "sqlite":
        return False
    from .sqlite import write_lock_held as sqlite_write_lock_held

    return sqlite_write_lock_held(url)
