"""The interface the client and the worker depend on, and nothing more.

A backend runs an ``Op`` (``ops.py``) on one database engine and answers in
the op's declared result type. The async form adds what a long-running
worker needs beyond operations: notifications, an exclusive duty across the
fleet, and telling "fenceq is not installed" apart from other failures.
Every driver import and every engine-specific line lives in this package.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any, AsyncContextManager, AsyncIterator, ContextManager, Protocol, Sequence

from .. import validate as v
from ..errors import config_error
from ..ops import Arg, Op, Shape
from ..types import DeadLetter, Dispatch, Job, QueueStats, Schedule

# The channels the SQL notifies on (PostgreSQL): a job of the named queue is
# due, and a claim's state changed (the payload is the job id).
JOBS_CHANNEL = "fenceq_jobs"
CONTROL_CHANNEL = "fenceq_control"
# A job reached a terminal state (the payload is its id), where its queue's
# notify_done switch is on.
DONE_CHANNEL = "fenceq_done"


@dataclass(frozen=True)
class Capabilities:
    notifications: bool    # listen() delivers JOBS_CHANNEL and CONTROL_CHANNEL messages
    poll_interval: float   # seconds: a worker's default longest idle wait between claims
    control_poll: float    # seconds: a worker's default interval between claim_state reads


@dataclass(frozen=True)
class Notification:
    channel: str
    payload: str


class Listener(Protocol):
    def notifications(self, timeout: float) -> list[Notification]:
        """Wait up to ``timeout`` seconds for notifications; those that
        arrived (none at the timeout). Raises ``PersistenceFailed`` once
        the connection is lost."""


class AsyncListener(Protocol):
    async def notifications(self, timeout: float) -> list[Notification]: ...


class Transaction(Protocol):
    """An open transaction of ``Backend.transaction``."""

    name: str

    def run(self, op: Op) -> Any:
        """Run one operation inside the transaction."""

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run the caller's own statement (the driver's placeholders and
        errors); its rows, none for a statement without."""


class AsyncTransaction(Protocol):
    name: str

    async def run(self, op: Op) -> Any: ...

    async def execute(self, sql: str, params: Any = None) -> list[tuple]: ...


class Backend(Protocol):
    name: str                   # "postgres" or "sqlite"
    capabilities: Capabilities

    def run(self, op: Op) -> Any:
        """Run one operation; raise a ``FenceqError`` (``PersistenceFailed``
        when the outcome is unknown)."""

    def close(self) -> None: ...

    def listener(self, channels: Sequence[str]) -> ContextManager[Listener | None]:
        """For the block, a connection of its own (never the one calls run
        on) subscribed to ``channels``; None when the backend has none to
        offer (no notifications, or the caller's own connection)."""

    def transaction(self) -> ContextManager[Transaction]:
        """For the block, a transaction on a connection no other call of
        this backend uses meanwhile (PostgreSQL: from the caller's pool, or
        a new one; SQLite: a new one, in ``BEGIN IMMEDIATE``). Leaving the
        block commits (``PersistenceFailed`` when the answer to COMMIT is
        lost: the outcome is unknown); an exception rolls back. QF100 on a
        caller's own connection."""


class AsyncBackend(Protocol):
    name: str
    capabilities: Capabilities

    async def run(self, op: Op) -> Any: ...

    async def close(self) -> None: ...

    def listen(self, channels: Sequence[str]) -> AsyncContextManager[AsyncIterator[Notification]]:
        """Subscribe this backend's connection to ``channels`` for the block;
        the iterator raises ``PersistenceFailed`` once the connection is lost.
        Only when ``capabilities.notifications``."""

    def exclusive(self, duty: str) -> AsyncContextManager[AsyncBackend | None]:
        """For the block, a backend whose calls run as the fleet's only
        holder of ``duty``, or None when another process holds it now."""

    def schema_missing(self, error: BaseException) -> bool:
        """Whether a failed call says fenceq is not installed in the database."""

    def listener(self, channels: Sequence[str]) -> AsyncContextManager[AsyncListener | None]:
        """As ``Backend.listener``."""

    def transaction(self, own_connection: bool = False) -> AsyncContextManager[AsyncTransaction]:
        """As ``Backend.transaction``; with ``own_connection``, on the
        connection this backend owns, which its caller keeps every other
        call off meanwhile (a worker's transaction connections)."""


# Reads for operators' tools -------------------------------------------------------
#
# The dashboard and the metrics read the public views (fenceq.jobs,
# fenceq.attempts, fenceq.dead_letters, fenceq.queue_stats and, once a schema
# has them, fenceq.checkpoints, fenceq.schedules, fenceq.locks,
# fenceq.dispatches). These reads
# are not SQL functions, so they are not in ops.py (whose every operation has
# a function or a statement file); each backend answers them by name from its
# own view queries, every one driven by an index (docs/observability.md
# lists them with their plans). Pages are keyset pages: the caller passes the
# sort key of the last row it has seen.

# Views a schema may or may not have: ``present_views`` says which this
# connection can read; the dashboard shows their pages only then.
OPTIONAL_VIEWS = ("checkpoints", "schedules", "locks")

PAGE_LIMIT = 500
# Sort keys that no row passes, for a first page: pending jobs run highest
# priority and earliest first, finished jobs are listed newest first.
_TOP_PRIORITY = v.INT32_MAX
_EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc)
FINISHED_STATUSES = ("completed", "failed", "cancelled", "expired")


@dataclass(frozen=True, init=False)
class QueueOverview(QueueStats):
    """A row of queue_stats: the columns this package knows, and in
    ``extra`` any a newer schema added (limits and their usage), as read."""

    extra: dict[str, Any]

    def __init__(self, **columns: Any):
        for name in _KNOWN_QUEUE_COLUMNS:
            object.__setattr__(self, name, columns.pop(name, None))
        object.__setattr__(self, "extra", columns)


_KNOWN_QUEUE_COLUMNS = tuple(f.name for f in fields(QueueStats))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    job_id: str
    step: str
    value: Any
    generation: int
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Lock:
    """A named lock; its token is never read."""

    lock: str
    owner_id: str | None
    expires_at: datetime | None


def columns(record: type) -> str:
    """The select list of a record's fields (a view may gain columns)."""
    return ", ".join(f.name for f in fields(record))


def _read(name: str, shape: Shape, returns: Any, *args: tuple[str, str, Any]) -> Op:
    return Op(name, tuple(Arg(*arg) for arg in args), shape, returns, writes=False)


def _cursor(after: Any, default: tuple) -> tuple:
    """A keyset cursor: None (the first page) or the last row's key, a
    tuple of as many parts as the default; QF100 for anything else."""
    if after is None:
        return default
    if not isinstance(after, (tuple, list)) or len(after) != len(default):
        raise config_error("QF100", f"after must be None or a tuple of {len(default)} parts")
    return tuple(after)


def _limit(limit: Any) -> tuple[str, str, Any]:
    return ("limit", "integer", v.integer(limit, "limit", nullable=False, minimum=1, maximum=PAGE_LIMIT))


def present_views() -> Op:
    """The names of fenceq's views this connection may read (``jobs``, …,
    and those of OPTIONAL_VIEWS the schema has)."""
    return _read("present_views", Shape.SCALAR, list[str])


def replica_lag() -> Op:
    """Seconds the server answering is behind its primary: None on a
    primary (and on SQLite), 0 on a standby that has replayed all it has
    received, else the age of the last transaction it replayed."""
    return _read("replica_lag", Shape.SCALAR, float)


def queue_overview() -> Op:
    return _read("queue_overview", Shape.ROWS, QueueOverview)


def jobs_by_submission(submission_id: Any) -> Op:
    return _read("jobs_by_submission", Shape.ROWS, Job,
                 ("submission_id", "text", v.name(submission_id, "submission_id")))


def pending_jobs(queue: Any, task: Any = None, after: tuple | None = None, limit: Any = 50) -> Op:
    """One queue's pending jobs in claim order (highest priority, earliest
    run_at first; then job id); ``after`` is the last row's
    (priority, run_at, job_id)."""
    priority, run_at, job_id = _cursor(after, (_TOP_PRIORITY, _EARLIEST, ""))
    return _read("pending_jobs", Shape.ROWS, Job, ("queue", "text", v.name(queue, "queue")),
                 ("task", "text", v.name(task, "task", nullable=True)),
                 ("after_priority", "integer", v.integer(priority, "after_priority", nullable=False)),
                 ("after_run_at", "timestamptz", v.moment(run_at, "after_run_at") or _EARLIEST),
                 ("after_job_id", "text", job_id if job_id == "" else v.job_id(job_id)), _limit(limit))


def claimed_jobs(queue: Any = None, task: Any = None, after: str | None = None, limit: Any = 50) -> Op:
    """Claimed jobs by job id; ``after`` is the last row's job id."""
    return _read("claimed_jobs", Shape.ROWS, Job, ("queue", "text", v.name(queue, "queue", nullable=True)),
                 ("task", "text", v.name(task, "task", nullable=True)),
                 ("after_job_id", "text", "" if after is None else v.job_id(after)), _limit(limit))


def finished_jobs(since: Any, status: Any = None, queue: Any = None, task: Any = None,
                  after: tuple | None = None, limit: Any = 50) -> Op:
    """Jobs finished since ``since``, newest first, walking the finished_at
    index; ``status`` one of FINISHED_STATUSES or None for all of them;
    ``after`` is the last row's (finished_at, job_id)."""
    if status is not None and status not in FINISHED_STATUSES:
        raise config_error("QF100", "status must be one of " + ", ".join(FINISHED_STATUSES))
    finished_at, job_id = _cursor(after, (None, ""))
    return _read("finished_jobs", Shape.ROWS, Job,
                 ("since", "timestamptz", v.moment(since, "since") or _EARLIEST),
                 ("status", "text", status), ("queue", "text", v.name(queue, "queue", nullable=True)),
                 ("task", "text", v.name(task, "task", nullable=True)),
                 ("after_finished_at", "timestamptz", v.moment(finished_at, "after_finished_at")),
                 ("after_job_id", "text", job_id if job_id == "" else v.job_id(job_id)), _limit(limit))


def dead_letter_page(queue: Any = None, include_handled: bool = False, after: tuple | None = None,
                     limit: Any = 50) -> Op:
    """Dead letters in job id order (generated job ids are time-ordered:
    oldest job first), walking the job_id index; ``after`` is the last
    row's (job_id, dlq_id)."""
    job_id, dlq_id = _cursor(after, ("", ""))
    return _read("dead_letter_page", Shape.ROWS, DeadLetter,
                 ("queue", "text", v.name(queue, "queue", nullable=True)),
                 ("include_handled", "boolean", v.boolean(include_handled, "include_handled")),
                 ("after_job_id", "text", job_id if job_id == "" else v.job_id(job_id)),
                 ("after_dlq_id", "text", dlq_id if dlq_id == "" else v.dlq_id(dlq_id)), _limit(limit))


def dead_letters_of(job_id: Any) -> Op:
    return _read("dead_letters_of", Shape.ROWS, DeadLetter, ("job_id", "text", v.job_id(job_id)))


def checkpoints(job_id: Any) -> Op:
    """A job's checkpoints by step (needs the view fenceq.checkpoints)."""
    return _read("checkpoints", Shape.ROWS, Checkpoint, ("job_id", "text", v.job_id(job_id)))


def schedules(after: str | None = None, limit: Any = 50) -> Op:
    """Schedules by name (needs the view fenceq.schedules)."""
    return _read("schedules", Shape.ROWS, Schedule,
                 ("after", "text", "" if after is None else v.name(after, "after")), _limit(limit))


def locks(after: str | None = None, limit: Any = 50) -> Op:
    """Named locks by name, without their tokens (needs the view fenceq.locks)."""
    return _read("locks", Shape.ROWS, Lock, ("after", "text", "" if after is None else v.name(after, "after")),
                 _limit(limit))


def dispatches(backend: Any = None, after: str | None = None, limit: Any = 50) -> Op:
    """Live dispatches by job id, of one external system or of all (needs
    the view fenceq.dispatches); ``after`` is the last row's job id."""
    return _read("dispatches", Shape.ROWS, Dispatch,
                 ("backend", "text", v.name(backend, "backend", nullable=True)),
                 ("after_job_id", "text", "" if after is None else v.job_id(after)), _limit(limit))
