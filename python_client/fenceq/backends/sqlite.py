"""SQLite backend: every operation runs the statement file
``sql/sqlite/<name>.sql`` inside one transaction (``BEGIN IMMEDIATE`` for
writers, a deferred ``BEGIN`` for readers), with named parameters.

The files follow the conventions in ``sql/sqlite/README.md``: statements end
with ``;`` at the end of a line, every ``:name`` is bound (NULL when the
caller omitted it), and the last statement's rows are the answer: one row
whose ``sqlstate`` is set (roll back and raise it) or the result rows with
``sqlstate`` NULL. Arrays and JSON travel as JSON text, intervals as integer
microseconds, timestamps as UTC text ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

Submission fingerprints are computed here, with ``canonical.fingerprint``
(SQLite has no SHA-256), and JSON is stored in its canonical text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import re
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Iterator, Sequence

from .. import canonical
from .._resources import sql_dir
from ..errors import PersistenceFailed, config_error, translate
from ..ops import Op, SubmitRequest
from ..types import DeadLetter, Dispatch, Job, SchemaCheck
from .protocol import Capabilities, Checkpoint, Lock, Notification, Schedule, columns
from .results import Kind, answer
from .sqlite_schedules import COMPUTED_IN_TRANSACTION

SCHEMA_VERSION = 8
# How long a call waits for another connection's write transaction before
# failing with PersistenceFailed ("database is locked" never escapes raw).
BUSY_TIMEOUT_SECONDS = 10.0

# No notifications: workers poll, briskly.
CAPABILITIES = Capabilities(notifications=False, poll_interval=0.5, control_poll=0.5)

_VIEWS = {
    "stats": "SELECT queue, pending, due, claimed, cancel_requested, oldest_due_age, paused, notify,"
             " max_claimed, max_claimed_per_key, busiest_key_claimed, rate_limit, rate_period, rate_used, blocked"
             " FROM fenceq_queue_stats ORDER BY queue",
    "attempts": "SELECT job_id, generation, owner_id, claimed_at FROM fenceq_attempts"
                " WHERE job_id = :job_id ORDER BY generation",
    "dead_letters": "SELECT dlq_id, job_id, queue, task, error, attempts, failed_at, replayed_at,"
                    " discarded_at FROM fenceq_dead_letters"
                    " WHERE (:queue IS NULL OR queue = :queue)"
                    " AND (:include_handled OR (replayed_at IS NULL AND discarded_at IS NULL))"
                    " ORDER BY failed_at, dlq_id LIMIT :limit",
}

# The reads of protocol.py, each driven by an index. Differs from PostgreSQL
# in that a job listing walks the table fenceq__jobs (INDEXED BY names the
# index it must use) and takes its columns from the view fenceq_jobs: the
# view shows timestamps as text, which no index of the table can order.
_JOB_COLUMNS = ", ".join(f"j.{name}" for name in columns(Job).split(", "))
_JOBS_BY = (f"SELECT {_JOB_COLUMNS} FROM fenceq__jobs AS t INDEXED BY {{index}}"
            " JOIN fenceq_jobs AS j ON j.job_id = t.job_id")


def _micros(parameter: str) -> str:
    """A UTC text parameter as INTEGER microseconds (as the tables keep time)."""
    return f"(unixepoch(substr({parameter}, 1, 19)) * 1000000 + CAST(substr({parameter}, 21, 6) AS INTEGER))"


_TASK_FILTER = "(:task IS NULL OR t.task = :task)"
_QUEUE_FILTER = "(:queue IS NULL OR t.queue = :queue)"
# A job waiting on dependencies is listed at the run_at it asked for (as
# fenceq_jobs shows it), not at the year-10000 run_at it waits at.
_SHOWN_RUN_AT = "coalesce(t.blocked_run_at, t.run_at)"
_PENDING_BRANCH = ("SELECT * FROM (" + _JOBS_BY.format(index="fenceq__jobs_pending_idx")
                   + " WHERE t.status = 'pending' AND t.queue = :queue AND {after} AND " + _TASK_FILTER
                   + f" ORDER BY t.priority DESC, {_SHOWN_RUN_AT}, t.job_id LIMIT :limit)")
_PENDING_AFTER = (f"t.priority = :after_priority AND {_SHOWN_RUN_AT} = {_micros(':after_run_at')}"
                  " AND t.job_id > :after_job_id",
                  f"t.priority = :after_priority AND {_SHOWN_RUN_AT} > {_micros(':after_run_at')}",
                  "t.priority < :after_priority")
_FINISHED_BEFORE = f"coalesce({_micros(':after_finished_at')}, 9223372036854775807)"
_VIEWS.update({
    "present_views": "SELECT json_group_array(substr(name, 8)) AS value FROM (SELECT name FROM sqlite_master"
                     " WHERE type = 'view' AND name LIKE 'fenceq\\_%' ESCAPE '\\' ORDER BY name)",
    "queue_overview": "SELECT * FROM fenceq_queue_stats ORDER BY queue",
    # Differs from PostgreSQL in that SQLite has no standby: never behind.
    "replica_lag": "SELECT NULL AS value",
    # Differs from PostgreSQL in that the submission's own unique index finds the job.
    "jobs_by_submission": f"SELECT {_JOB_COLUMNS} FROM fenceq__submissions AS s"
                          " JOIN fenceq_jobs AS j ON j.job_id = s.job_id WHERE s.submission_id = :submission_id",
    "pending_jobs": " UNION ALL ".join(_PENDING_BRANCH.format(after=a) for a in _PENDING_AFTER)
                    + " ORDER BY priority DESC, run_at, job_id LIMIT :limit",
    "claimed_jobs": _JOBS_BY.format(index="fenceq__jobs_claimed_idx")
                    + f" WHERE t.status = 'claimed' AND {_QUEUE_FILTER} AND {_TASK_FILTER}"
                      " AND t.job_id > :after_job_id ORDER BY t.job_id LIMIT :limit",
    "finished_jobs": _JOBS_BY.format(index="fenceq__jobs_finished_idx")
                     + f" WHERE t.finished_at IS NOT NULL AND t.finished_at >= {_micros(':since')}"
                       f" AND t.finished_at <= {_FINISHED_BEFORE}"
                       f" AND (t.finished_at < {_FINISHED_BEFORE} OR t.job_id < :after_job_id)"
                       f" AND (:status IS NULL OR t.status = :status) AND {_QUEUE_FILTER} AND {_TASK_FILTER}"
                       " ORDER BY t.finished_at DESC, t.job_id DESC LIMIT :limit",
    "dead_letter_page": f"SELECT {columns(DeadLetter)} FROM fenceq_dead_letters"
                        " WHERE job_id >= :after_job_id AND (job_id, dlq_id) > (:after_job_id, :after_dlq_id)"
                        " AND (:queue IS NULL OR queue = :queue)"
                        " AND (:include_handled OR (replayed_at IS NULL AND discarded_at IS NULL))"
                        " ORDER BY job_id, dlq_id LIMIT :limit",
    "dead_letters_of": f"SELECT {columns(DeadLetter)} FROM fenceq_dead_letters WHERE job_id = :job_id"
                       " ORDER BY failed_at, dlq_id",
    "checkpoints": f"SELECT {columns(Checkpoint)} FROM fenceq_checkpoints WHERE job_id = :job_id"
                   " ORDER BY recorded_at, step",
    "schedules": f"SELECT {columns(Schedule)} FROM fenceq_schedules WHERE schedule > :after"
                 " ORDER BY schedule LIMIT :limit",
    "locks": f"SELECT {columns(Lock)} FROM fenceq_locks WHERE lock > :after ORDER BY lock LIMIT :limit",
    "dispatches": f"SELECT {columns(Dispatch)} FROM fenceq_dispatches WHERE job_id > :after_job_id"
                  " AND (:backend IS NULL OR backend = :backend) ORDER BY job_id LIMIT :limit",
})

_PARAMETER = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")
_LITERALS_AND_COMMENTS = re.compile(r"'(?:[^']|'')*'|--[^\n]*")
_SETUP = re.compile(r"\s*CREATE\s+TEMP\s+TABLE\s+IF\s+NOT\s+EXISTS\s", re.IGNORECASE)


class StatementFailed(sqlite3.DatabaseError):
    """A statement file's error row (SQLite cannot raise outside triggers):
    kept as the ``__cause__`` of the package error, as a driver error is on
    PostgreSQL."""

    def __init__(self, sqlstate: str, message: str | None, detail: str | None):
        super().__init__(sqlstate, message, detail)
        self.sqlstate = sqlstate


# Statement files ----------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    sql: str
    parameters: tuple[str, ...]
    # Only creates a scratch table (CREATE TEMP TABLE IF NOT EXISTS): the
    # README lets a driver run it once per connection, outside the call.
    setup: bool = False


def split_statements(text: str) -> list[Statement]:
    """Split a statement file as documented in sql/sqlite/README.md: a
    statement ends with ``;`` at the end of a line. Chunks holding only
    comments are dropped."""
    statements, lines = [], []
    for line in text.splitlines():
        lines.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(lines))
            lines = []
    statements.append("\n".join(lines))
    result = []
    for sql in statements:
        code = _LITERALS_AND_COMMENTS.sub(" ", sql)
        if code.strip(" \n\t;"):
            names = tuple(dict.fromkeys(_PARAMETER.findall(code)))
            setup = _SETUP.match(code) is not None and not names
            result.append(Statement(sql, names, setup))
    return result


@functools.cache
def load_script(name: str) -> tuple[Statement, ...]:
    path = sql_dir("sqlite") / f"{name}.sql"
    return tuple(split_statements(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Plan:
    """How the client runs one file: its setup statements (once per
    connection, before the first call), the statements of every call, and
    every parameter name the file uses (bound as NULL when omitted)."""
    setup: tuple[str, ...]
    statements: tuple[str, ...]
    parameters: tuple[str, ...]


@functools.cache
def _plan(name: str) -> Plan:
    script = load_script(name)
    return Plan(tuple(s.sql for s in script if s.setup), tuple(s.sql for s in script if not s.setup),
                tuple(dict.fromkeys(n for s in script for n in s.parameters)))


def schema_statements() -> list[str]:
    """The statements of sql/sqlite/schema.sql, for migrations and install."""
    return [s.sql for s in load_script("schema")]


# Parameters ---------------------------------------------------------------------

def interval_micros(value: timedelta) -> int:
    """Validation bounds every interval to fit years 0001-9999, so 64 bits hold it."""
    return value // timedelta(microseconds=1)


def _json_array_text(values: Any) -> str:
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _request_json(queue: str, request: SubmitRequest) -> str:
    fields = {
        "task": request.task,
        "submission_id": request.submission_id,
        "job_id": request.job_id,
        "priority": request.priority,
        "run_at": None if request.run_at is None else canonical.utc_text(request.run_at),
        "expires_at": None if request.expires_at is None else canonical.utc_text(request.expires_at),
        "max_attempts": request.max_attempts,
        "active_key": request.active_key,
        "force": request.force,
        "fingerprint": _fingerprint(queue, request),
        "concurrency_key": request.concurrency_key,
        "depends_on": None if request.depends_on is None else list(request.depends_on),
    }
    # The payload is already canonical text: splice it in unchanged.
    return _json_array_text(fields)[:-1] + ',"payload":' + request.payload + "}"


def _fingerprint(queue: str, request: SubmitRequest) -> str | None:
    if request.submission_id is None:
        return None
    return canonical.fingerprint(
        queue=queue, task=request.task, payload=json.loads(request.payload),
        submission_id=request.submission_id, job_id=request.job_id, priority=request.priority,
        run_at=request.run_at, expires_at=request.expires_at, max_attempts=request.max_attempts,
        active_key=request.active_key, force=request.force, concurrency_key=request.concurrency_key,
        depends_on=request.depends_on)


def _jsonb_array_text(values: Any) -> str:
    return "[" + ",".join("null" if text is None else text for text in values) + "]"


# How each argument kind travels; kinds not named here (text, integers,
# doubles, canonical JSON text) are bound as they are.
_ENCODERS = {
    "interval": interval_micros,
    "timestamptz": canonical.utc_text,
    "boolean": int,
    "text[]": _json_array_text,
    "bigint[]": _json_array_text,
    "jsonb[]": _jsonb_array_text,
}


def parameters(op: Op) -> dict[str, Any]:
    """The named parameters of an operation's statement file."""
    params = {}
    for arg in op.args:
        encoder = _ENCODERS.get(arg.kind)
        params[arg.name] = arg.value if encoder is None or arg.value is None else encoder(arg.value)
    if op.name not in ("submit", "submit_batch"):
        return params
    values = {arg.name: arg.value for arg in op.args}
    if op.name == "submit_batch":
        params["requests"] = "[" + ",".join(_request_json(values["queue"], request)
                                            for request in values["requests"]) + "]"
    elif op.name == "submit" and values.get("submission_id") is None:
        params["fingerprint"] = None  # only a submission id is fingerprinted
    elif op.name == "submit":
        request = SubmitRequest(
            task=values["task"], payload=values.get("payload") or "null",
            submission_id=values.get("submission_id"), job_id=values.get("job_id"),
            priority=values.get("priority"), run_at=values.get("run_at"),
            expires_at=values.get("expires_at"), max_attempts=values.get("max_attempts"),
            active_key=values.get("active_key"), force=bool(values.get("force")),
            concurrency_key=values.get("concurrency_key"), depends_on=values.get("depends_on"))
        params["fingerprint"] = _fingerprint(values["queue"], request)
    return params


# Results ------------------------------------------------------------------------

def _micros_interval(value: int) -> timedelta:
    return timedelta(microseconds=value)


# SQLite's values as the Python values of their declared kinds: timestamps
# are UTC text, intervals integer microseconds, booleans 0 or 1, JSON
# (arrays included) canonical text; text and numbers are Python's already.
DECODERS = {
    Kind.TIMESTAMP: datetime.fromisoformat,
    Kind.INTERVAL: _micros_interval,
    Kind.BOOLEAN: bool,
    Kind.JSON: json.loads,
}


# Connections --------------------------------------------------------------------

def database_path(url: str) -> str:
    """The file of a sqlite:///relative.db or sqlite:////absolute.db URL."""
    scheme, separator, rest = url.partition("://")
    if scheme.split("+", 1)[0].lower() != "sqlite" or not separator or not rest.startswith("/"):
        raise config_error("QF100", "a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db")
    path = rest[1:]
    if not path or "?" in path or path == ":memory:":
        raise config_error("QF100", "a SQLite URL must name a database file")
    return path


def open_connection(path: str) -> sqlite3.Connection:
    """A connection in manual transaction mode (every script is wrapped in
    its own BEGIN ... COMMIT), waiting up to BUSY_TIMEOUT_SECONDS for locks."""
    try:
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None,
                                     check_same_thread=False, cached_statements=512)
        # Committed transactions survive a crash of the process or machine.
        connection.execute("PRAGMA synchronous = FULL")
        connection.execute("PRAGMA temp_store = MEMORY")
        connection.execute("PRAGMA foreign_keys = OFF")
    except sqlite3.Error as exc:
        raise PersistenceFailed() from exc
    return connection


def _rollback(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original failure is what the caller needs to see


def _prepare(connection: sqlite3.Connection, plan: Plan, prepared: set[str] | None) -> None:
    """Run a file's setup statements (scratch tables) once per connection,
    outside any transaction, so that a rolled-back call cannot undo them."""
    if prepared is None:
        return
    for sql in plan.setup:
        if sql not in prepared:
            connection.execute(sql)
            prepared.add(sql)


def execute(connection: sqlite3.Connection, op: Op, prepared: set[str] | None = None) -> list[dict[str, Any]]:
    """Run one operation in its own transaction; return the answer rows
    without the status columns, or raise the script's error.

    ``prepared`` is the connection's set of setup statements already run:
    with it, a file's scratch tables are created once and its calls run
    only the remaining statements; without it, every statement runs."""
    params = parameters(op)
    try:
        if op.name in _VIEWS:
            connection.execute("BEGIN")
            cursor = connection.execute(_VIEWS[op.name], params)
            rows = cursor.fetchall()
            columns = [d[0] for d in cursor.description]
            connection.execute("COMMIT")
            return [dict(zip(columns, row)) for row in rows]
        plan = _plan(op.name)
        _prepare(connection, plan, prepared)
        bound = dict.fromkeys(plan.parameters)
        bound.update(params)
        run = connection.execute
        run("BEGIN IMMEDIATE" if op.writes else "BEGIN")
        if op.name in COMPUTED_IN_TRANSACTION:
            bound.update(COMPUTED_IN_TRANSACTION[op.name](
                bound, lambda name: _answer(connection, _plan(name).statements, bound)))
        rows = _answer(connection, plan.statements if prepared is not None else plan.setup + plan.statements,
                       bound)
        run("COMMIT")
    except sqlite3.Error as exc:
        _rollback(connection)
        raise PersistenceFailed() from exc
    except BaseException:
        _rollback(connection)
        raise
    return rows


def _answer(connection: sqlite3.Connection, statements: Sequence[str],
            bound: dict[str, Any]) -> list[dict[str, Any]]:
    """Run statements in the open transaction: the last one's rows without
    the status columns, or raise its error row."""
    for sql in statements:
        cursor = connection.execute(sql, bound)
    rows = cursor.fetchall()
    if rows and rows[0][0] is not None:
        sqlstate, message, detail = rows[0][:3]
        raise translate(sqlstate, message, detail) from StatementFailed(sqlstate, message, detail)
    columns = [d[0] for d in cursor.description][3:]
    return [dict(zip(columns, row[3:])) for row in rows]


def run_in_transaction(connection: sqlite3.Connection, op: Op) -> Any:
    """Run an operation's statement file on a caller's own connection, inside
    the transaction the caller has open: no BEGIN, COMMIT or ROLLBACK, so its
    statements join the caller's work (as calls on a caller's psycopg
    connection do on PostgreSQL). An error row raises its package error and
    leaves the transaction for the caller to roll back."""
    if not connection.in_transaction:
        raise config_error("QF100", "the connection has no open transaction (BEGIN IMMEDIATE first)")
    plan = _plan(op.name)
    bound = dict.fromkeys(plan.parameters)
    bound.update(parameters(op))
    try:
        for sql in plan.setup + plan.statements:
            cursor = connection.execute(sql, bound)
        rows = cursor.fetchall()
    except sqlite3.Error as exc:
        raise PersistenceFailed() from exc
    if rows and rows[0][0] is not None:
        sqlstate, message, detail = rows[0][:3]
        raise translate(sqlstate, message, detail) from StatementFailed(sqlstate, message, detail)
    columns = [d[0] for d in cursor.description][3:]
    return answer(op, [dict(zip(columns, row[3:])) for row in rows], DECODERS)


class SqliteBackend:
    """Runs operations on one owned connection; calls from several threads
    take turns."""

    name = "sqlite"
    capabilities = CAPABILITIES

    def __init__(self, url: str):
        self.path = database_path(url)
        self._connection = open_connection(self.path)
        self._prepared: set[str] = set()
        self._lock = threading.Lock()

    def run(self, op: Op) -> Any:
        with self._lock:
            if op.name in _IN_PYTHON:
                rows = _IN_PYTHON[op.name](self._connection)
            else:
                rows = execute(self._connection, op, self._prepared)
        return answer(op, rows, DECODERS)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    @contextlib.contextmanager
    def listener(self, channels: Sequence[str]) -> Iterator[None]:
        yield None  # no notifications: waits poll

    @contextlib.contextmanager
    def transaction(self) -> Iterator["SqliteTransaction"]:
        """A write transaction (``BEGIN IMMEDIATE``) on a new connection to
        the file, closed after: leaving the block commits, an exception rolls
        back. Differs from PostgreSQL in that it holds the file's write lock
        from the start: every other writer (this client's calls included)
        waits for it."""
        with _transaction_connection(self.path) as connection:
            yield SqliteTransaction(connection)


class AsyncSqliteBackend:
    """The sync backend on a private worker thread, so that no call blocks
    the event loop."""

    name = "sqlite"
    capabilities = CAPABILITIES

    def __init__(self, backend: SqliteBackend, executor: concurrent.futures.ThreadPoolExecutor):
        self._backend = backend
        self._executor = executor

    @classmethod
    async def connect(cls, url: str) -> "AsyncSqliteBackend":
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fenceq-sqlite")
        try:
            backend = await asyncio.get_running_loop().run_in_executor(executor, SqliteBackend, url)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(backend, executor)

    async def run(self, op: Op) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._backend.run, op)

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._backend.close)
        finally:
            self._executor.shutdown(wait=False)

    def listen(self, channels: Sequence[str]) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Notification]]:
        raise config_error("QF100", "SQLite has no notifications: poll instead")

    @contextlib.asynccontextmanager
    async def listener(self, channels: Sequence[str]) -> AsyncIterator[None]:
        yield None  # no notifications: waits poll

    @contextlib.asynccontextmanager
    async def transaction(self, own_connection: bool = False) -> AsyncIterator["AsyncSqliteTransaction"]:
        """As ``SqliteBackend.transaction``, on a thread of its own; with
        ``own_connection``, on this backend's connection and thread (its
        caller keeps every other call off it meanwhile)."""
        if own_connection:
            executor = self._executor
            opening = _transaction_on(self._backend._connection)
        else:
            executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fenceq-sqlite-tx")
            opening = _transaction_connection(self._backend.path)
        loop = asyncio.get_running_loop()
        try:
            connection = await loop.run_in_executor(executor, opening.__enter__)
            tx = AsyncSqliteTransaction(SqliteTransaction(connection), executor)
            try:
                yield tx
            except BaseException as error:
                await loop.run_in_executor(executor, opening.__exit__, type(error), error, error.__traceback__)
                raise
            await loop.run_in_executor(executor, opening.__exit__, None, None, None)
        finally:
            if executor is not self._executor:
                executor.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def exclusive(self, duty: str) -> AsyncIterator["AsyncSqliteBackend"]:
        # Every write runs in BEGIN IMMEDIATE: rounds of a duty never overlap.
        yield self

    def schema_missing(self, error: BaseException) -> bool:
        return "no such table" in str(error.__cause__ or "")


def write_lock_held(url: str) -> bool:
    """Whether some connection holds the file's write lock right now."""
    probe = sqlite3.connect(database_path(url), timeout=0.1, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


# Transactions of one's own (``transaction``) -------------------------------------

@contextlib.contextmanager
def _transaction_connection(path: str) -> Iterator[sqlite3.Connection]:
    """A new connection in ``BEGIN IMMEDIATE`` for the block (as
    ``_transaction_on``), closed after."""
    connection = open_connection(path)
    try:
        with _transaction_on(connection):
            yield connection
    finally:
        connection.close()


@contextlib.contextmanager
def _transaction_on(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` on the connection for the block; COMMIT when it
    ends, ROLLBACK when it raises. A failed COMMIT raises PersistenceFailed."""
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise PersistenceFailed() from exc
    try:
        yield connection
    except BaseException:
        _rollback(connection)
        raise
    try:
        connection.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(connection)
        raise PersistenceFailed() from exc


class SqliteTransaction:
    """An open transaction of ``SqliteBackend.transaction``: fenceq
    operations (``run``, the statement files without their BEGIN and
    COMMIT) and the caller's own statements (``execute``, with sqlite3's
    placeholders and errors) commit or roll back together."""

    name = "sqlite"

    def __init__(self, connection: sqlite3.Connection):
        self.connection = connection

    def run(self, op: Op) -> Any:
        return run_in_transaction(self.connection, op)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        return self.connection.execute(sql, () if params is None else params).fetchall()


class AsyncSqliteTransaction:
    """``SqliteTransaction`` on the transaction's own thread."""

    name = "sqlite"

    def __init__(self, transaction: SqliteTransaction, executor: concurrent.futures.ThreadPoolExecutor):
        self._transaction = transaction
        self._executor = executor
        self.connection = transaction.connection

    async def run(self, op: Op) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._transaction.run, op)

    async def execute(self, sql: str, params: Any = None) -> list[tuple]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._transaction.execute,
                                                                sql, params)


# verify_schema ------------------------------------------------------------------

TABLES = ("fenceq__queues", "fenceq__jobs", "fenceq__submissions", "fenceq__claims",
          "fenceq__checkpoints", "fenceq__dead_letters",
          "fenceq__schedules")

# Every column this version reads or writes: (declared type, NOT NULL).
EXPECTED_COLUMNS = {
    "fenceq__queues": {
        "queue": ("TEXT", True), "lease": ("INTEGER", True), "max_attempts": ("INTEGER", True),
        "backoff_base": ("INTEGER", True), "backoff_factor": ("REAL", True),
        "backoff_max": ("INTEGER", True), "dead_letter": ("INTEGER", True), "paused": ("INTEGER", True),
        "notify": ("INTEGER", True), "created_at": ("INTEGER", True),
        "max_claimed": ("INTEGER", False), "max_claimed_per_key": ("INTEGER", False),
        "rate_limit": ("INTEGER", False), "rate_period": ("INTEGER", False),
        "notify_done": ("INTEGER", True),
        "requeue_priority": ("TEXT", True), "history": ("INTEGER", True), "history_retention": ("INTEGER", False)},
    "fenceq__jobs": {
        "seq": ("INTEGER", False), "job_id": ("TEXT", True), "queue": ("TEXT", True),
        "task": ("TEXT", True), "payload": ("TEXT", False), "priority": ("INTEGER", True),
        "status": ("TEXT", True), "attempts": ("INTEGER", True), "max_attempts": ("INTEGER", True),
        "run_at": ("INTEGER", True), "expires_at": ("INTEGER", False), "owner_id": ("TEXT", False),
        "generation": ("INTEGER", True), "claim_token": ("TEXT", False), "lease": ("INTEGER", False),
        "lease_expires_at": ("INTEGER", False), "budget_expires_at": ("INTEGER", False),
        "cancel_requested": ("INTEGER", True), "pid": ("INTEGER", False), "result": ("TEXT", False),
        "last_error": ("TEXT", False), "submission_id": ("TEXT", False),
        "fingerprint": ("TEXT", False), "active_key": ("TEXT", False), "dlq_id": ("TEXT", False),
        "created_at": ("INTEGER", True), "finished_at": ("INTEGER", False),
        "concurrency_key": ("TEXT", False),
        "progress": ("TEXT", False), "progress_at": ("INTEGER", False),
        "blocked_by": ("INTEGER", False), "blocked_run_at": ("INTEGER", False),
        "scheduled": ("INTEGER", True), "call_claims": ("TEXT", False)},
    "fenceq__submissions": {
        "submission_id": ("TEXT", True), "fingerprint": ("TEXT", True), "job_id": ("TEXT", True),
        "queue": ("TEXT", True), "created_at": ("INTEGER", True)},
    "fenceq__claims": {
        "claim_token": ("TEXT", True), "job_id": ("TEXT", False), "generation": ("INTEGER", False),
        "owner_id": ("TEXT", True), "claimed_at": ("INTEGER", True), "job_ids": ("TEXT", False)},
    "fenceq__checkpoints": {
        "job_id": ("TEXT", True), "step": ("TEXT", True), "value": ("TEXT", True),
        "generation": ("INTEGER", True), "recorded_at": ("INTEGER", True)},
    "fenceq__dead_letters": {
        "dlq_id": ("TEXT", True), "job_id": ("TEXT", True), "queue": ("TEXT", True),
        "task": ("TEXT", True), "error": ("TEXT", False), "attempts": ("INTEGER", True),
        "failed_at": ("INTEGER", True), "replayed_at": ("INTEGER", False),
        "discarded_at": ("INTEGER", False)},
    "fenceq__schedules": {
        "schedule": ("TEXT", True), "queue": ("TEXT", True), "task": ("TEXT", True), "cron": ("TEXT", True),
        "time_zone": ("TEXT", True), "payload": ("TEXT", False), "priority": ("INTEGER", False),
        "max_attempts": ("INTEGER", False), "active_key": ("TEXT", False), "paused": ("INTEGER", True),
        "next_run_at": ("INTEGER", False), "last_run_at": ("INTEGER", False), "last_job_id": ("TEXT", False),
        "revision": ("INTEGER", True)},
}

# Named locks (docs/guarantees.md §15).
TABLES += ("fenceq__locks",)
EXPECTED_COLUMNS["fenceq__locks"] = {
    "lock": ("TEXT", True), "owner_id": ("TEXT", False), "token": ("INTEGER", True),
    "expires_at": ("INTEGER", False)}

# Dependencies (docs/guarantees.md §16).
TABLES += ("fenceq__dependencies",)
EXPECTED_COLUMNS["fenceq__dependencies"] = {
    "depends_on": ("TEXT", True), "job_id": ("TEXT", True), "satisfied": ("INTEGER", True)}

# External execution and job history (version 6, docs/design-v6.md).
TABLES += ("fenceq__dispatches", "fenceq__events")
EXPECTED_COLUMNS["fenceq__dispatches"] = {
    "job_id": ("TEXT", True), "backend": ("TEXT", True), "generation": ("INTEGER", True),
    "state": ("TEXT", True), "reservation_ref": ("TEXT", True), "execution_ref": ("TEXT", False),
    "reserved_at": ("INTEGER", True), "finalized_at": ("INTEGER", False), "checked_at": ("INTEGER", False)}
EXPECTED_COLUMNS["fenceq__events"] = {
    "seq": ("INTEGER", False), "job_id": ("TEXT", True), "queue": ("TEXT", True), "at": ("INTEGER", True),
    "event": ("TEXT", True), "generation": ("INTEGER", False), "owner_id": ("TEXT", False),
    "detail": ("TEXT", True)}

# The operator's view over time (version 7, docs/design-v7.md).
TABLES += ("fenceq__activity",)
EXPECTED_COLUMNS["fenceq__activity"] = {
    "queue": ("TEXT", True), "minute": ("INTEGER", True), "submitted": ("INTEGER", True),
    "claimed": ("INTEGER", True), "retried": ("INTEGER", True), "completed": ("INTEGER", True),
    "failed": ("INTEGER", True), "cancelled": ("INTEGER", True), "expired": ("INTEGER", True),
    "pending": ("INTEGER", False), "due": ("INTEGER", False), "running": ("INTEGER", False),
    "wait_hist": ("TEXT", True), "run_hist": ("TEXT", True)}

# The only defaults allowed: none may manufacture identity or a state.
EXPECTED_DEFAULTS = {
    ("fenceq__jobs", "status"): "'pending'", ("fenceq__jobs", "attempts"): "0",
    ("fenceq__jobs", "generation"): "0", ("fenceq__jobs", "cancel_requested"): "0",
    ("fenceq__jobs", "scheduled"): "0",
    ("fenceq__queues", "paused"): "0", ("fenceq__queues", "notify"): "1",
    ("fenceq__queues", "notify_done"): "0",
    ("fenceq__queues", "requeue_priority"): "'keep'", ("fenceq__queues", "history"): "0",
}

# Identity is arbitrated by exact, full, single-column unique indexes.
IDENTITY_INDEXES = (("claim_token_unique", "fenceq__claims", "claim_token"),
                    ("submission_id_unique", "fenceq__submissions", "submission_id"),
                    ("job_id_unique", "fenceq__jobs", "job_id"))

_PROBE_INDEX = "fenceq_verify_probe"


def _text_column_collations(db: Any) -> dict[tuple[str, str], str]:
    """The collation of every TEXT column of the private tables. SQLite
    reports collations only for index columns, so a probe index over each
    table's text columns (WHERE 0: it holds no rows) is created, read and
    rolled back."""
    collations = {}
    db.execute(f"SAVEPOINT {_PROBE_INDEX}")
    try:
        for table in TABLES:
            columns = [c.name for c in db.table(table).columns if c.type.upper() == "TEXT"]
            if not columns:
                continue
            probe = f"{_PROBE_INDEX}_{table}"
            listed = ", ".join(f'"{name}"' for name in columns)
            db.execute(f'CREATE INDEX "{probe}" ON "{table}" ({listed}) WHERE 0')
            for index in db.table(table).xindexes:
                if index.name == probe:
                    collations.update({(table, c.name): c.coll for c in index.columns if c.key})
    finally:
        db.execute(f"ROLLBACK TO {_PROBE_INDEX}")
        db.execute(f"RELEASE {_PROBE_INDEX}")
    return collations


def _identity_index_ok(db: Any, table: str, column: str) -> bool:
    exact = 0
    for index in db.table(table).xindexes:
        keys = [c for c in index.columns if c.key]
        listed = {i.name: i for i in db.table(table).indexes}[index.name]
        if not listed.unique or column not in [c.name for c in keys]:
            continue
        if any(c.coll.upper() != "BINARY" for c in keys):
            return False  # a folding unique index would refuse distinct ids
        if len(keys) == 1 and not listed.partial:
            exact += 1
    return exact == 1


def schema_checks(db: Any) -> list[SchemaCheck]:
    """verify_schema's checks, on a sqlite_utils Database inside a
    transaction that may write (the probe index is rolled back)."""
    checks = []

    def record(name: str, bad: list[str], good: str, problem: str) -> None:
        checks.append(SchemaCheck(name, not bad, f"{problem}: {', '.join(bad)}" if bad else good))

    encoding = db.execute("PRAGMA encoding").fetchone()[0]
    record("encoding", [] if encoding == "UTF-8" else [encoding], "UTF-8", "encoding must be UTF-8")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    record("schema_version", [] if version == SCHEMA_VERSION else [str(version)],
           f"version {SCHEMA_VERSION}", "unexpected user_version")
    journal = db.journal_mode
    record("journal_mode", [] if journal == "wal" else [journal], "wal", "journal_mode must be wal")

    missing = [t for t in TABLES if not db.table(t).exists()]
    record("tables", missing, "all tables present", "missing")
    if missing:
        return checks
    record("strict_tables", [t for t in TABLES if not db.table(t).strict], "every table is STRICT",
           "not STRICT")

    bad = []
    for table, expected in EXPECTED_COLUMNS.items():
        actual = {c.name: (c.type.upper(), bool(c.notnull)) for c in db.table(table).columns}
        bad += [f"{table}.{name}" for name, spec in expected.items() if actual.get(name) != spec]
    record("column_types", sorted(bad), "all columns as expected", "wrong or missing")

    collations = _text_column_collations(db)
    record("binary_collations", sorted(f"{t}.{c}" for (t, c), coll in collations.items()
                                       if coll.upper() != "BINARY"),
           "every text column compares exactly (BINARY)", "not BINARY")

    for name, table, column in IDENTITY_INDEXES:
        ok = _identity_index_ok(db, table, column)
        checks.append(SchemaCheck(name, ok, f"exact unique index on {table}.{column}" if ok else
                                  f"needs exactly one full single-column BINARY unique index on {table}.{column}"))

    bad = []
    for table in TABLES:
        for column in db.table(table).columns:
            if column.default_value != EXPECTED_DEFAULTS.get((table, column.name)):
                bad.append(f"{table}.{column.name}")
    record("defaults", sorted(bad), "no default manufactures identity or state", "unexpected default")

    record("no_triggers", sorted(t.name for table in TABLES for t in db.table(table).triggers),
           "no triggers on fenceq tables", "unexpected triggers")
    record("claim_kinds", [] if _claim_kinds_enforced(db) else ["fenceq__claims"],
           "a ledger row is a per-token row or a call row", "no CHECK of the row's kind")
    return checks


def _claim_kinds_enforced(db: Any) -> bool:
    """Whether the ledger refuses a row that is neither kind (version 8's
    CHECK): probe rows, rolled back, that break each half of it."""
    for job_ids, generation in ((None, None), ("[]", 1)):
        db.execute("SAVEPOINT fenceq_verify_claim_kinds")
        try:
            db.execute("INSERT INTO fenceq__claims (claim_token, owner_id, claimed_at, job_ids, generation)"
                       " VALUES ('fenceq_verify_probe', 'probe', 0, ?, ?)", [job_ids, generation])
        except sqlite3.IntegrityError:
            continue
        finally:
            db.execute("ROLLBACK TO fenceq_verify_claim_kinds")
            db.execute("RELEASE fenceq_verify_claim_kinds")
        return False
    return True


def verify_schema(connection: sqlite3.Connection) -> list[dict[str, Any]]:
    import sqlite_utils

    db = sqlite_utils.Database(connection)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            checks = schema_checks(db)
        finally:
            connection.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise PersistenceFailed() from exc
    return [{"check_name": c.check_name, "ok": c.ok, "detail": c.detail} for c in checks]


# Operations SQLite implements in Python rather than in a statement file.
# Statement files that are a step of another operation, not operations of
# their own: tick_due.sql is the first half of tick (sqlite_schedules.py).
STATEMENT_PARTS = frozenset({"tick_due"})

_IN_PYTHON = {"verify_schema": verify_schema}
