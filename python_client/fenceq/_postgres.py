"""PostgreSQL backend: every operation is one call of a ``fenceq.*`` function,
with bound parameters and explicit casts (so untyped values resolve to the
one function of that name), in autocommit or inside the caller's transaction.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, AsyncIterator, Iterator

import psycopg
from psycopg.rows import dict_row

from .canonical import json_string, utc_text
from .errors import FenceqError, translate
from .ops import Op, SubmitRequest

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
    if op.result in ("row", "rows"):
        return f"SELECT * FROM fenceq.{op.name}({call})", params
    return f"SELECT fenceq.{op.name}({call}) AS value", params


def shape(op: Op, rows: list[dict[str, Any]]) -> Any:
    """The method's answer from the rows a call returned."""
    if op.result == "rows":
        return op.convert(rows)
    row = rows[0] if rows else None
    if op.result == "row":
        return op.convert(row)
    if op.result == "void":
        return None
    value = row["value"] if row is not None else None
    return None if value is None else op.convert(value)


def _error(exc: psycopg.Error) -> FenceqError:
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

    def __init__(self, *, url: str | None = None, connection: Any = None, pool: Any = None):
        self._owned = connection is None and pool is None
        self._pool = pool
        self._connection = connection
        if self._owned:
            try:
                self._connection = psycopg.connect(connection_url(url or ""), autocommit=True)
            except psycopg.Error as exc:
                raise _error(exc) from exc

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
            raise _error(exc) from exc
        return shape(op, rows)

    def close(self) -> None:
        if self._owned and self._connection is not None:
            self._connection.close()


class AsyncPostgresBackend:
    name = "postgres"

    def __init__(self, *, connection: Any = None, pool: Any = None, owned: bool = False):
        self._owned = owned
        self._pool = pool
        self._connection = connection

    @classmethod
    async def connect(cls, url: str) -> "AsyncPostgresBackend":
        try:
            connection = await psycopg.AsyncConnection.connect(connection_url(url), autocommit=True)
        except psycopg.Error as exc:
            raise _error(exc) from exc
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
            raise _error(exc) from exc
        return shape(op, rows)

    async def close(self) -> None:
        if self._owned and self._connection is not None:
            await self._connection.close()
