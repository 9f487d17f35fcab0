"""PostgreSQL backend: every operation is one call of a ``fenceq.*`` function,
with bound parameters and explicit casts (so untyped values resolve to the
one function of that name), in autocommit or inside the caller's transaction.

The async backend also LISTENs (``listen``) and holds the worker fleet's
exclusive duties with transaction-scoped advisory locks (``exclusive``).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, AsyncIterator, Iterator, Sequence

import psycopg
import psycopg.sql
from psycopg.rows import dict_row

from ..canonical import json_string, utc_text
from ..errors import FenceqError, PersistenceFailed, translate
from ..ops import Op, Shape, SubmitRequest
from .protocol import Capabilities, Notification
from .results import answer

# NOTIFY wakes workers, so polling is only the fallback (and catches jobs
# whose run_at arrives, which send no notification).
CAPABILITIES = Capabilities(notifications=True, poll_interval=5.0, control_poll=5.0)

# pg_try_advisory_xact_lock keys of the worker fleet's duties (migrations
# use 4_711_000_001).
DUTY_LOCKS = {"maintenance": 4_711_000_002}

# Errors that mean the fenceq schema, one of its functions or a table is absent.
_SCHEMA_MISSING = frozenset({"3F000", "42883", "42P01"})

_CASTS = {"text": "text", "integer": "integer", "bigint": "bigint", "boolean": "boolean",
          "double": "double precision", "interval": "interval", "timestamptz": "timestamptz",
          "jsonb": "jsonb", "text[]": "text[]", "bigint[]": "bigint[]", "jsonb[]": "jsonb[]",
          "requests": "jsonb"}

_VIEWS = {
    "stats": "SELECT queue, pending, due, claimed, cancel_requested, oldest_due_age, paused, notify"
             " FROM fenceq.queue_stats ORDER BY queue",
    "attempts": "SELECT job_id, generation, owner_id, claimed_at FROM fenceq.attempts"
                " WHERE job_id = %(job_id)s::text ORDER BY generation",
    "dead_letters": "SELECT dlq_id, job_id, queue, task, error, attempts, failed_at, replayed_at,"
                    " discarded_at FROM fenceq.dead_letters"
                    " WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)"
                    " AND (%(include_handled)s::boolean OR (replayed_at IS NULL AND discarded_at IS NULL))"
                    " ORDER BY failed_at, dlq_id LIMIT %(limit)s::integer",
    "schedules": "SELECT schedule, queue, task, cron, time_zone, payload, priority, max_attempts, active_key,"
                 " paused, next_run_at, last_run_at, last_job_id FROM fenceq.schedules ORDER BY schedule",
}


def interval_text(value: timedelta) -> str:
    """A timedelta as plain seconds (no day part, so no calendar arithmetic)."""
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    return f"{sign}{micros // 1_000_000}.{micros % 1_000_000:06d} seconds"


def requests_json(requests: tuple[SubmitRequest, ...]) -> str:
    def text(value: str | None) -> str:
        return "null" if value is None else json_string(value)

    def number(value: int | None) -> str:
        return "null" if value is None else str(value)

    def moment(value: Any) -> str:
        return "null" if value is None else json_string(utc_text(value))

    return "[" + ",".join(
        '{"task":' + json_string(r.task) + ',"payload":' + r.payload
        + ',"submission_id":' + text(r.submission_id) + ',"job_id":' + text(r.job_id)
        + ',"priority":' + number(r.priority) + ',"run_at":' + moment(r.run_at)
        + ',"expires_at":' + moment(r.expires_at) + ',"max_attempts":' + number(r.max_attempts)
        + ',"active_key":' + text(r.active_key) + ',"force":' + ("true" if r.force else "false") + "}"
        for r in requests) + "]"


def _encode(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "interval":
        return interval_text(value)
    if kind == "requests":
        return requests_json(value)
    return value


def statement(op: Op) -> tuple[str, dict[str, Any]]:
    params = {arg.name: _encode(arg.kind, arg.value) for arg in op.args}
    if op.name in _VIEWS:
        return _VIEWS[op.name], params
    call = ", ".join(f"{arg.name} => %({arg.name})s::{_CASTS[arg.kind]}" for arg in op.args)
    if op.shape in (Shape.ROW, Shape.ROWS):
        return f"SELECT * FROM fenceq.{op.name}({call})", params
    return f"SELECT fenceq.{op.name}({call}) AS value", params


def driver_error(exc: psycopg.Error) -> FenceqError:
    """The package error for a driver error (kept as its ``__cause__``)."""
    diag = exc.diag
    return translate(exc.sqlstate, diag.message_primary, diag.message_detail)


def connection_url(url: str) -> str:
    """Accept SQLAlchemy's spelling postgresql+psycopg:// as well."""
    scheme, sep, rest = url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


class PostgresBackend:
    """Runs operations on an owned connection (autocommit), a caller's
    connection (inside whatever transaction it has open) or a caller's pool."""

    name = "postgres"
    capabilities = CAPABILITIES

    def __init__(self, *, url: str | None = None, connection: Any = None, pool: Any = None):
        self._owned = connection is None and pool is None
        self._pool = pool
        self._connection = connection
        if self._owned:
            try:
                self._connection = psycopg.connect(connection_url(url or ""), autocommit=True)
            except psycopg.Error as exc:
                raise driver_error(exc) from exc

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        else:
            yield self._connection

    def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            with self._conn() as conn, conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return answer(op, rows)

    def close(self) -> None:
        if self._owned and self._connection is not None:
            self._connection.close()


class AsyncPostgresBackend:
    name = "postgres"
    capabilities = CAPABILITIES

    def __init__(self, *, connection: Any = None, pool: Any = None, owned: bool = False):
        self._owned = owned
        self._pool = pool
        self._connection = connection

    @classmethod
    async def connect(cls, url: str) -> "AsyncPostgresBackend":
        try:
            connection = await psycopg.AsyncConnection.connect(connection_url(url), autocommit=True)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return cls(connection=connection, owned=True)

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._pool is not None:
            async with self._pool.connection() as conn:
                yield conn
        else:
            yield self._connection

    async def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            async with self._conn() as conn, conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(sql, params)
                rows = await cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return answer(op, rows)

    async def close(self) -> None:
        if self._owned and self._connection is not None:
            await self._connection.close()

    @contextlib.asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notification]]:
        async def notifications(conn: psycopg.AsyncConnection) -> AsyncIterator[Notification]:
            try:
                async for note in conn.notifies():
                    yield Notification(note.channel, note.payload)
            except psycopg.Error as exc:
                raise driver_error(exc) from exc
            raise PersistenceFailed()  # the server ended the connection

        try:
            async with self._conn() as conn:
                for channel in channels:
                    await conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
                yield notifications(conn)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    @contextlib.asynccontextmanager
    async def exclusive(self, duty: str) -> AsyncIterator["AsyncPostgresBackend | None"]:
        """One transaction under pg_try_advisory_xact_lock: the lock ends
        with the block, so a worker paused between rounds holds nothing."""
        try:
            async with self._conn() as conn, conn.transaction():
                # A worker paused inside the block would keep the rows it
                # touched locked (claimers skip them): let the server end it.
                await conn.execute("SET LOCAL idle_in_transaction_session_timeout = '2s'")
                cursor = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (DUTY_LOCKS[duty],))
                row = await cursor.fetchone()
                yield AsyncPostgresBackend(connection=conn) if row and row[0] else None
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    def schema_missing(self, error: BaseException) -> bool:
        return getattr(error.__cause__, "sqlstate", None) in _SCHEMA_MISSING
