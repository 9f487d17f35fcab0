"""PostgreSQL backend: every operation is one call of a ``fenceq.*`` function,
with bound parameters and explicit casts (so untyped values resolve to the
one function of that name), in autocommit or inside the caller's transaction.

The async backend also LISTENs (``listen``) and holds the worker fleet's
exclusive duties with transaction-scoped advisory locks (``exclusive``).

Nothing here keeps session state between transactions (no session SET, no
session advisory lock, no temporary table), so a connection may go through
PgBouncer in transaction mode, where consecutive transactions can run on
different server sessions. Two things need a session: psycopg's server-side
prepared statements, which a connection the backend opens uses only when it
is not ``pooled``, and LISTEN, which the worker does not attempt on an
async backend that is ``pooled`` (docs/dba.md, "PgBouncer").

Both backends open listening connections of their own for waits
(``listener``); one that cannot be opened, or that goes through a pooler,
leaves the wait to its polls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from datetime import timedelta
from typing import Any, AsyncIterator, Iterator, Sequence

import psycopg
import psycopg.sql
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from ..canonical import json_string, utc_text
from ..errors import FenceqError, PersistenceFailed, config_error, translate
from ..ops import Op, Shape, SubmitRequest
from ..types import DeadLetter, Dispatch, Job
from .protocol import Capabilities, Checkpoint, Lock, Notification, Schedule, columns
from .results import answer, shaped

# NOTIFY wakes workers (also for a job due later: they then time their wait
# with next_due), so polling is only the fallback for missed notifications.
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
_ARRAYS = frozenset({"text[]", "bigint[]", "jsonb[]"})

_VIEWS = {
    "stats": "SELECT queue, pending, due, claimed, cancel_requested, oldest_due_age, paused, notify,"
             " max_claimed, max_claimed_per_key, busiest_key_claimed, rate_limit, rate_period, rate_used, blocked"
             " FROM fenceq.queue_stats ORDER BY queue",
    "attempts": "SELECT job_id, generation, owner_id, claimed_at FROM fenceq.attempts"
                " WHERE job_id = %(job_id)s::text ORDER BY generation",
    "dead_letters": "SELECT dlq_id, job_id, queue, task, error, attempts, failed_at, replayed_at,"
                    " discarded_at FROM fenceq.dead_letters"
                    " WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)"
                    " AND (%(include_handled)s::boolean OR (replayed_at IS NULL AND discarded_at IS NULL))"
                    " ORDER BY failed_at, dlq_id LIMIT %(limit)s::integer",
}

# The reads of protocol.py: each is driven by an index (plans in docs/observability.md).
_TASK_FILTER = "(%(task)s::text IS NULL OR task = %(task)s::text)"
_QUEUE_FILTER = "(%(queue)s::text IS NULL OR queue = %(queue)s::text)"
_LIMIT = "LIMIT %(limit)s::integer"
# Claim order mixes directions (priority DESC, run_at, job_id), which no
# row comparison can express: three branches, each an index range of
# _jobs_pending_idx, give the rows after the cursor.
_PENDING_BRANCH = (f"(SELECT {columns(Job)} FROM fenceq.jobs WHERE status = 'pending' AND queue = %(queue)s::text"
                   f" AND {{after}} AND {_TASK_FILTER} ORDER BY priority DESC, run_at, job_id {_LIMIT})")
_PENDING_AFTER = ("priority = %(after_priority)s::integer AND run_at = %(after_run_at)s::timestamptz"
                  " AND job_id > %(after_job_id)s::text",
                  "priority = %(after_priority)s::integer AND run_at > %(after_run_at)s::timestamptz",
                  "priority < %(after_priority)s::integer")
_FINISHED_BEFORE = "coalesce(%(after_finished_at)s::timestamptz, 'infinity')"
_VIEWS.update({
    "present_views": "SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}') AS value"
                     " FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
                     " WHERE n.nspname = 'fenceq' AND c.relkind IN ('v', 'm')"
                     " AND pg_catalog.has_table_privilege(c.oid, 'SELECT')",
    "queue_overview": "SELECT * FROM fenceq.queue_stats ORDER BY queue",
    "replica_lag": "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL"
                   " WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0::double precision"
                   " ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::double precision"
                   " END AS value",
    "jobs_by_submission": f"SELECT {columns(Job)} FROM fenceq.jobs WHERE job_id = (SELECT s.job_id"
                          " FROM fenceq.submissions AS s WHERE s.submission_id = %(submission_id)s::text)"
                          " ORDER BY created_at, job_id LIMIT 100",
    "pending_jobs": "SELECT * FROM (" + " UNION ALL ".join(_PENDING_BRANCH.format(after=a) for a in _PENDING_AFTER)
                    + f") AS page ORDER BY priority DESC, run_at, job_id {_LIMIT}",
    # Claimed jobs are few (one per running handler): all of them through
    # _jobs_claimed_idx, then sorted, never a walk of the primary key.
    "claimed_jobs": f"WITH claimed AS MATERIALIZED (SELECT {columns(Job)} FROM fenceq.jobs WHERE status = 'claimed'"
                    f" AND {_QUEUE_FILTER} AND {_TASK_FILTER} AND job_id > %(after_job_id)s::text)"
                    f" SELECT * FROM claimed ORDER BY job_id {_LIMIT}",
    "finished_jobs": f"SELECT {columns(Job)} FROM fenceq.jobs WHERE finished_at IS NOT NULL"
                     f" AND finished_at >= %(since)s::timestamptz AND finished_at <= {_FINISHED_BEFORE}"
                     f" AND (finished_at, job_id) < ({_FINISHED_BEFORE}, %(after_job_id)s::text)"
                     f" AND (%(status)s::text IS NULL OR status = %(status)s::text) AND {_QUEUE_FILTER}"
                     f" AND {_TASK_FILTER} ORDER BY finished_at DESC, job_id DESC {_LIMIT}",
    "dead_letter_page": f"SELECT {columns(DeadLetter)} FROM fenceq.dead_letters"
                        " WHERE job_id >= %(after_job_id)s::text"
                        " AND (job_id, dlq_id) > (%(after_job_id)s::text, %(after_dlq_id)s::text)"
                        f" AND {_QUEUE_FILTER}"
                        " AND (%(include_handled)s::boolean OR (replayed_at IS NULL AND discarded_at IS NULL))"
                        f" ORDER BY job_id, dlq_id {_LIMIT}",
    "dead_letters_of": f"SELECT {columns(DeadLetter)} FROM fenceq.dead_letters WHERE job_id = %(job_id)s::text"
                       " ORDER BY failed_at, dlq_id",
    "checkpoints": f"SELECT {columns(Checkpoint)} FROM fenceq.checkpoints WHERE job_id = %(job_id)s::text"
                   " ORDER BY recorded_at, step",
    "schedules": f"SELECT {columns(Schedule)} FROM fenceq.schedules WHERE schedule > %(after)s::text"
                 f" ORDER BY schedule {_LIMIT}",
    "locks": f"SELECT {columns(Lock)} FROM fenceq.locks WHERE lock > %(after)s::text ORDER BY lock {_LIMIT}",
    "dispatches": f"SELECT {columns(Dispatch)} FROM fenceq.dispatches WHERE job_id > %(after_job_id)s::text"
                  " AND (%(backend)s::text IS NULL OR backend = %(backend)s::text)"
                  f" ORDER BY job_id {_LIMIT}",
})


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
        + ',"active_key":' + text(r.active_key) + ',"force":' + ("true" if r.force else "false")
        + ("" if r.concurrency_key is None else ',"concurrency_key":' + json_string(r.concurrency_key))
        + ("" if r.depends_on is None else ',"depends_on":[' + ",".join(map(json_string, r.depends_on)) + "]")
        + "}"
        for r in requests) + "]"


def array_literal(values: Sequence[Any]) -> str:
    """A text[], bigint[] or jsonb[] argument as one array literal, every
    element double-quoted with its backslashes and quotes escaped (what
    array input reads whatever the element), NULL for None. psycopg's list
    dumper finds the element type and runs a regex over every element to
    decide on quoting: about 100 µs of client CPU for the arrays of a
    complete_batch of 16 fences, against 17 µs for these literals.

    Ids, owners, tokens and numbers need no escape: when the elements
    joined hold no backslash and no quote but the separators' own, they go
    as they are, without a pass per element."""
    if values and None not in values:
        body = '","'.join(map(str, values))
        if "\\" not in body and body.count('"') == 2 * (len(values) - 1):
            return '{"' + body + '"}'
    return "{" + ",".join(["NULL" if item is None else
                           '"' + str(item).replace("\\", "\\\\").replace('"', '\\"') + '"'
                           for item in values]) + "}"


def _encode(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "interval":
        return interval_text(value)
    if kind == "requests":
        return requests_json(value)
    if kind in _ARRAYS:
        return array_literal(value)
    return value


def statement(op: Op) -> tuple[str, dict[str, Any]]:
    params = {arg.name: _encode(arg.kind, arg.value) for arg in op.args}
    if op.name in _VIEWS:
        return _VIEWS[op.name], params
    call = ", ".join(f"{arg.name} => %({arg.name})s::{_CASTS[arg.kind]}" for arg in op.args)
    if op.shape in (Shape.ROW, Shape.ROWS):
        return f"SELECT * FROM fenceq.{op.name}({call})", params
    return f"SELECT fenceq.{op.name}({call}) AS value", params


# The json module's scanner: jsonb's output has no whitespace around the
# value, which json.loads would match with a regular expression on each side.
_scan_json = json.JSONDecoder().scan_once


def made_by_driver(op: Op) -> bool:
    """Whether the driver builds the answer's records itself (``row_factory``)."""
    return op.returns is not None and op.shape in (Shape.ROW, Shape.ROWS)


def row_factory(op: Op) -> Any:
    """How the driver hands over an operation's rows: a record class's as
    its records (``record_rows``), anything else as dicts for ``answer``."""
    return record_rows(op.returns) if made_by_driver(op) else dict_row


def rows_answer(op: Op, rows: list[Any]) -> Any:
    """The method's answer from the rows of ``row_factory(op)``."""
    return shaped(op, rows) if made_by_driver(op) else answer(op, rows)


@functools.cache
def record_rows(record: type) -> Any:
    """A psycopg row factory making ``record`` of each row: by position
    when the columns are the record's fields in order (a claim's are),
    which spares a dict and a keyword call per row; else by name."""
    fields = tuple(field.name for field in dataclasses.fields(record))
    # A keyword-only field (SearchedJob's seq) cannot be passed by position.
    positional = not any(field.kw_only for field in dataclasses.fields(record))

    def for_cursor(cursor: Any) -> Any:
        names = tuple(column.name for column in cursor.description or ())
        if positional and names == fields:
            return lambda values: record(*values)
        return lambda values: record(**dict(zip(names, values)))

    return for_cursor


def json_loads(data: bytes | bytearray | memoryview) -> Any:
    """jsonb as Python values: text decoded once (the json module would
    sniff bytes for their encoding per value), an empty object, the usual
    checkpoints of a claim, without parsing, and anything the scanner does
    not take whole left to json.loads."""
    if data == b"{}":
        return {}
    text = bytes(data).decode()
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def driver_error(exc: psycopg.Error) -> FenceqError:
    """The package error for a driver error (kept as its ``__cause__``)."""
    diag = exc.diag
    return translate(exc.sqlstate, diag.message_primary, diag.message_detail)


def pooled(conn: psycopg.Connection) -> bool:
    """Whether a connection pooler (PgBouncer, in any mode) sits between this
    connection and the server: the pooler invents the backend PID it
    announces at connect, so it differs from the serving session's
    pg_backend_pid(). A pooled connection must keep no session state."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is not None and row[0] != conn.info.backend_pid


async def pooled_async(conn: psycopg.AsyncConnection) -> bool:
    cursor = await conn.execute("SELECT pg_backend_pid()")
    row = await cursor.fetchone()
    return row is not None and row[0] != conn.info.backend_pid


def server_of(connection: Any) -> str:
    """host:port of a connection's server."""
    return f"{connection.info.host}:{connection.info.port}"


async def _connect_async(url: str) -> tuple[psycopg.AsyncConnection, bool]:
    """An autocommit connection, and whether it goes through a pooler."""
    try:
        connection = await psycopg.AsyncConnection.connect(connection_url(url), autocommit=True)
    except psycopg.Error as exc:
        raise driver_error(exc) from exc
    set_json_loads(json_loads, connection)
    try:
        through_pooler = await pooled_async(connection)
    except psycopg.Error as exc:
        await connection.close()
        raise driver_error(exc) from exc
    if through_pooler:
        connection.prepare_threshold = None
    return connection, through_pooler


def connection_url(url: str) -> str:
    """Accept SQLAlchemy's spelling postgresql+psycopg:// as well."""
    scheme, sep, rest = url.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


def libpq_keywords() -> set[str]:
    """The connection parameters libpq knows (host, sslmode, service, …)."""
    return {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}


def url_parameters(url: str) -> dict[str, Any] | None:
    """A PostgreSQL URL's connection parameters, or None for one libpq
    cannot read."""
    try:
        return psycopg.conninfo.conninfo_to_dict(connection_url(url))
    except psycopg.ProgrammingError:
        return None


@contextlib.asynccontextmanager
async def request_pool(url: str, size: int, name: str) -> AsyncIterator[Any]:
    """A pool of up to ``size`` autocommit connections, open once this
    enters (a wrong URL fails here), closed when it exits; through a pooler
    (PgBouncer) its connections prepare no statements."""
    from psycopg_pool import AsyncConnectionPool

    async def configure(connection: psycopg.AsyncConnection) -> None:
        if await pooled_async(connection):
            connection.prepare_threshold = None

    pool = AsyncConnectionPool(connection_url(url), min_size=1, max_size=size, open=False,
                               kwargs={"autocommit": True}, configure=configure, name=name)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


def _listen_statements(channels: Sequence[str]) -> list[psycopg.sql.Composed]:
    return [psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(c)) for c in channels]


def _listen_target(listen_url: str | None, url: str | None, pool: Any) -> tuple[str, dict[str, Any]] | None:
    """Where a listening connection of its own comes from (``listener``):
    the client's ``listen_url`` (a direct one, when calls go through a
    pooler), else its URL, or its pool's connection settings (a connection
    borrowed from the pool would starve the calls the waiter makes). None
    for the caller's own connection without a ``listen_url``, whose
    transaction would hold the notifications back."""
    if listen_url is not None:
        return connection_url(listen_url), {"autocommit": True}
    if pool is not None:
        return pool.conninfo, {**pool.kwargs, "autocommit": True}
    if url is not None:
        return connection_url(url), {"autocommit": True}
    return None


def _close(connection: psycopg.Connection | None) -> None:
    if connection is not None:
        connection.close()


async def _close_async(connection: psycopg.AsyncConnection | None) -> None:
    if connection is not None:
        await connection.close()


class _Listener:
    """A listening connection (``Backend.listener``): the notifications
    that arrive within a timeout, returned at the first."""

    def __init__(self, connection: psycopg.Connection):
        self._connection = connection

    def notifications(self, timeout: float) -> list[Notification]:
        try:
            return [Notification(n.channel, n.payload)
                    for n in self._connection.notifies(timeout=timeout, stop_after=1)]
        except psycopg.Error as exc:
            raise driver_error(exc) from exc


class _AsyncListener:
    def __init__(self, connection: psycopg.AsyncConnection):
        self._connection = connection

    async def notifications(self, timeout: float) -> list[Notification]:
        try:
            return [Notification(n.channel, n.payload)
                    async for n in self._connection.notifies(timeout=timeout, stop_after=1)]
        except psycopg.Error as exc:
            raise driver_error(exc) from exc


class PostgresBackend:
    """Runs operations on an owned connection (autocommit), a caller's
    connection (inside whatever transaction it has open) or a caller's pool.
    A caller's connection keeps the caller's ``prepare_threshold``: through
    PgBouncer, open it with ``prepare_threshold=None``."""

    name = "postgres"
    capabilities = CAPABILITIES

    def __init__(self, *, url: str | None = None, connection: Any = None, pool: Any = None,
                 listen_url: str | None = None):
        self._owned = connection is None and pool is None
        self._pool = pool
        self._connection = connection
        self._url = url if self._owned else None  # listeners open connections of their own from it
        self._listen_url = listen_url  # or from this one, when given
        if self._owned:
            self._connect()

    def _connect(self) -> None:
        try:
            self._connection = psycopg.connect(connection_url(self._url or ""), autocommit=True)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        try:
            through_pooler = pooled(self._connection)
        except psycopg.Error as exc:
            self._connection.close()
            raise driver_error(exc) from exc
        if through_pooler:
            self._connection.prepare_threshold = None

    @property
    def server(self) -> str | None:
        """host:port of the server an owned connection reached (of a
        multi-host URL, the one that answered: the primary)."""
        return server_of(self._connection) if self._owned else None

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        else:
            if self._owned and self._connection.closed:
                # Lost with its server (a failover): the call is made on a
                # new connection, to whichever host of the URL is primary now.
                self._connect()
            yield self._connection

    def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            with self._conn() as conn, conn.cursor(row_factory=row_factory(op)) as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return rows_answer(op, rows)

    def close(self) -> None:
        if self._owned and self._connection is not None:
            self._connection.close()

    @contextlib.contextmanager
    def listener(self, channels: Sequence[str]) -> Iterator[_Listener | None]:
        connection = self._listening(channels)
        try:
            yield None if connection is None else _Listener(connection)
        finally:
            _close(connection)

    def _listening(self, channels: Sequence[str]) -> psycopg.Connection | None:
        """A new connection subscribed to the channels; None for the
        caller's own connection, through a pooler (its sessions do not keep
        a LISTEN), or when none can be opened now: the caller polls."""
        target = _listen_target(self._listen_url, self._url, self._pool)
        if target is None:
            return None
        connection = None
        try:
            connection = psycopg.connect(target[0], **target[1])
            if pooled(connection):
                connection.close()
                return None
            for listen in _listen_statements(channels):
                connection.execute(listen)
            return connection
        except psycopg.Error:
            _close(connection)
            return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator["PostgresTransaction"]:
        """A transaction on a connection no other call of this backend uses
        meanwhile: one taken from the caller's pool, or a new one (closed
        after) for a backend that owns its connection. Leaving the block
        commits; an exception rolls back. QF100 on a caller's connection:
        run your transaction there yourself."""
        if self._pool is None and not self._owned:
            raise config_error("QF100", "a client on your own connection runs in your transaction already")
        with self._transaction_connection() as conn:
            with _transaction_block(conn):
                yield PostgresTransaction(conn)

    @contextlib.contextmanager
    def _transaction_connection(self) -> Iterator[psycopg.Connection]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                autocommit = conn.autocommit
                conn.autocommit = True
                try:
                    yield conn
                finally:
                    conn.autocommit = autocommit
            return
        # One connection for one transaction: through PgBouncer it stays on one
        # server session, so its prepared statements are safe.
        try:
            conn = psycopg.connect(connection_url(self._url or ""), autocommit=True)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        with conn:
            yield conn


class AsyncPostgresBackend:
    name = "postgres"
    capabilities = CAPABILITIES

    def __init__(self, *, connection: Any = None, pool: Any = None, owned: bool = False, pooled: bool = False,
                 url: str | None = None, listen_url: str | None = None):
        self._owned = owned
        self._pool = pool
        self._connection = connection
        self.pooled = pooled  # through a pooler; known for owned connections only
        self._url = url  # of an owned connection: listeners open their own from it
        self._listen_url = listen_url  # or from this one, when given

    @classmethod
    async def connect(cls, url: str, listen_url: str | None = None) -> "AsyncPostgresBackend":
        connection, through_pooler = await _connect_async(url)
        return cls(connection=connection, owned=True, pooled=through_pooler, url=url, listen_url=listen_url)

    @property
    def server(self) -> str | None:
        """As ``PostgresBackend.server``."""
        return server_of(self._connection) if self._owned else None

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._pool is not None:
            async with self._pool.connection() as conn:
                yield conn
        else:
            if self._owned and self._connection.closed:  # as PostgresBackend._conn
                self._connection, self.pooled = await _connect_async(self._url or "")
            yield self._connection

    async def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            async with self._conn() as conn, conn.cursor(row_factory=row_factory(op)) as cursor:
                await cursor.execute(sql, params)
                rows = await cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return rows_answer(op, rows)

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
                for listen in _listen_statements(channels):
                    await conn.execute(listen)
                yield notifications(conn)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    @contextlib.asynccontextmanager
    async def listener(self, channels: Sequence[str]) -> AsyncIterator[_AsyncListener | None]:
        """As ``PostgresBackend.listener``."""
        connection = await self._listening(channels)
        try:
            yield None if connection is None else _AsyncListener(connection)
        finally:
            await _close_async(connection)

    async def _listening(self, channels: Sequence[str]) -> psycopg.AsyncConnection | None:
        target = _listen_target(self._listen_url, self._url, self._pool)
        if target is None:
            return None
        connection = None
        try:
            connection = await psycopg.AsyncConnection.connect(target[0], **target[1])
            if await pooled_async(connection):
                await connection.close()
                return None
            for listen in _listen_statements(channels):
                await connection.execute(listen)
            return connection
        except psycopg.Error:
            await _close_async(connection)
            return None

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
                yield AsyncPostgresBackend(connection=conn, pooled=self.pooled) if row and row[0] else None
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    def schema_missing(self, error: BaseException) -> bool:
        return getattr(error.__cause__, "sqlstate", None) in _SCHEMA_MISSING

    @contextlib.asynccontextmanager
    async def transaction(self, own_connection: bool = False) -> AsyncIterator["AsyncPostgresTransaction"]:
        """As ``PostgresBackend.transaction``; with ``own_connection``, on the
        connection this backend owns (its caller keeps every other call off
        it meanwhile)."""
        if self._pool is None and not self._owned:
            raise config_error("QF100", "a client on your own connection runs in your transaction already")
        async with contextlib.AsyncExitStack() as stack:
            conn = self._connection if own_connection and self._pool is None else \
                await stack.enter_async_context(self._transaction_connection())
            async with _async_transaction_block(conn):
                yield AsyncPostgresTransaction(conn)

    @contextlib.asynccontextmanager
    async def _transaction_connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._pool is not None:
            async with self._pool.connection() as conn:
                autocommit = conn.autocommit
                await conn.set_autocommit(True)
                try:
                    yield conn
                finally:
                    await conn.set_autocommit(autocommit)
            return
        try:
            conn = await psycopg.AsyncConnection.connect(connection_url(self._url or ""), autocommit=True)
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        async with conn:
            yield conn


# Transactions of one's own (``transaction``) -------------------------------------

@contextlib.contextmanager
def _transaction_block(conn: psycopg.Connection) -> Iterator[None]:
    """BEGIN; COMMIT when the block ends, ROLLBACK when it raises. A lost
    answer to COMMIT raises PersistenceFailed: the outcome is unknown."""
    try:
        conn.execute("BEGIN")
    except psycopg.Error as exc:
        raise driver_error(exc) from exc
    try:
        yield
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        raise
    try:
        _committed(conn.execute("COMMIT"))
    except psycopg.Error as exc:
        raise driver_error(exc) from exc


@contextlib.asynccontextmanager
async def _async_transaction_block(conn: psycopg.AsyncConnection) -> AsyncIterator[None]:
    try:
        await conn.execute("BEGIN")
    except psycopg.Error as exc:
        raise driver_error(exc) from exc
    try:
        yield
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")
        raise
    try:
        _committed(await conn.execute("COMMIT"))
    except psycopg.Error as exc:
        raise driver_error(exc) from exc


def _committed(cursor: Any) -> None:
    """COMMIT of a transaction in which a statement failed (its error
    caught) rolls back without an error: say so."""
    if cursor.statusmessage != "COMMIT":
        raise config_error("QF100", "the transaction was rolled back: a statement in it failed")


class PostgresTransaction:
    """An open transaction of ``PostgresBackend.transaction``: fenceq
    operations (``run``) and the caller's own statements (``execute``, with
    psycopg's placeholders and errors) commit or roll back together."""

    name = "postgres"

    def __init__(self, connection: psycopg.Connection):
        self.connection = connection

    def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            with self.connection.cursor(row_factory=row_factory(op)) as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return rows_answer(op, rows)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []


class AsyncPostgresTransaction:
    """As ``PostgresTransaction``, on an ``AsyncConnection``."""

    name = "postgres"

    def __init__(self, connection: psycopg.AsyncConnection):
        self.connection = connection

    async def run(self, op: Op) -> Any:
        sql, params = statement(op)
        try:
            async with self.connection.cursor(row_factory=row_factory(op)) as cursor:
                await cursor.execute(sql, params)
                rows = await cursor.fetchall()
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        return rows_answer(op, rows)

    async def execute(self, sql: str, params: Any = None) -> list[tuple]:
        async with self.connection.cursor() as cursor:
            await cursor.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []
