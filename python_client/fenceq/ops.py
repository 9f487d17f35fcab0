"""Operations: one place that turns a method call into a validated request.

Every client method builds an ``Op`` here (validating and snapshotting its
inputs), and a backend executes it: PostgreSQL calls ``fenceq.<name>(...)``,
SQLite runs ``sql/sqlite/<name>.sql``. Sync and async clients share it all.

An ``Op`` also declares what it returns: its shape (one value, zero or one
row, rows, nothing) and its result type (a record class of ``types.py`` or a
value type such as ``bool`` or ``list[str]``). Backends decode the answer
from that declaration (``backends/results.py``), never from column names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

from . import cron as cron_expression
from . import validate as v
from .errors import config_error
from .types import (ActivityBucket, Attempt, Claim, ClaimState, DeadLetter, DispatchCandidate, Fence, Job,
                    JobEvent, QueueStats, ReapResult, SchemaCheck, SearchedJob)


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # text, integer, bigint, boolean, double, interval, timestamptz, jsonb, text[], bigint[], jsonb[]
    value: Any


class Shape(str, enum.Enum):
    SCALAR = "scalar"  # one value (NULL is None)
    ROW = "row"        # zero or one row (none is None)
    ROWS = "rows"
    VOID = "void"


@dataclass(frozen=True)
class Op:
    name: str
    args: tuple[Arg, ...]
    shape: Shape
    # A record class for ROW and ROWS (its fields' types say how each column
    # decodes), a value type for SCALAR (``Any``: a JSON value).
    returns: Any = None
    writes: bool = True


def _args(*items: tuple[str, str, Any], optional: tuple[str, ...] = ()) -> tuple[Arg, ...]:
    """Arguments to send; those named in ``optional`` are left out when None
    so that the function's own DEFAULT applies."""
    return tuple(Arg(n, k, val) for n, k, val in items if not (val is None and n in optional))


def _fence_args(fence: Any) -> list[tuple[str, str, Any]]:
    if not isinstance(fence, Fence):
        raise config_error("QF106", "a Fence is required")
    v.fence_parts(fence.job_id, fence.owner_id, fence.generation, fence.claim_token)
    return [("job_id", "text", fence.job_id), ("owner_id", "text", fence.owner_id),
            ("generation", "bigint", fence.generation), ("claim_token", "text", fence.claim_token)]


# Queues ---------------------------------------------------------------------

_QUEUE_SETTINGS = ("lease", "max_attempts", "backoff_base", "backoff_factor", "backoff_max", "dead_letter",
                   "requeue_priority")
# Where a job requeued by reap (its lease lapsed) re-enters its queue.
REQUEUE_PRIORITIES = ("keep", "first", "last")


def _requeue_priority(value: Any) -> str | None:
    if value is not None and value not in REQUEUE_PRIORITIES:
        raise config_error("QF100", "requeue_priority must be one of " + ", ".join(REQUEUE_PRIORITIES))
    return value


def _queue_settings(queue, lease, max_attempts, backoff_base, backoff_factor, backoff_max,
                    dead_letter, requeue_priority) -> list[tuple[str, str, Any]]:
    return [
        ("queue", "text", v.name(queue, "queue")),
        ("lease", "interval", v.duration(lease, "lease")),
        ("max_attempts", "integer", v.integer(max_attempts, "max_attempts", minimum=1)),
        ("backoff_base", "interval", v.duration(backoff_base, "backoff_base", allow_zero=True)),
        ("backoff_factor", "double", v.factor(backoff_factor)),
        ("backoff_max", "interval", v.duration(backoff_max, "backoff_max", allow_zero=True)),
        ("dead_letter", "boolean", None if dead_letter is None else v.boolean(dead_letter, "dead_letter")),
        ("requeue_priority", "text", _requeue_priority(requeue_priority)),
    ]


def create_queue(queue, lease=None, max_attempts=None, backoff_base=None, backoff_factor=None,
                 backoff_max=None, dead_letter=None, requeue_priority=None) -> Op:
    """Settings left None take the function's DEFAULTs."""
    settings = _queue_settings(queue, lease, max_attempts, backoff_base, backoff_factor, backoff_max, dead_letter,
                               requeue_priority)
    return Op("create_queue", _args(*settings, optional=_QUEUE_SETTINGS), Shape.SCALAR, bool)


def alter_queue(queue, lease=None, max_attempts=None, backoff_base=None, backoff_factor=None,
                backoff_max=None, dead_letter=None, requeue_priority=None) -> Op:
    """Settings left None are sent as NULL: unchanged. requeue_priority is
    left out instead (its DEFAULT is NULL too), so the call still matches a
    schema older than version 6 when it is not asked for."""
    return Op("alter_queue", _args(*_queue_settings(queue, lease, max_attempts, backoff_base, backoff_factor,
                                                    backoff_max, dead_letter, requeue_priority),
                                   optional=("requeue_priority",)), Shape.VOID)


def pause_queue(queue) -> Op:
    return Op("pause_queue", _args(("queue", "text", v.name(queue, "queue"))), Shape.SCALAR, bool)


def resume_queue(queue) -> Op:
    return Op("resume_queue", _args(("queue", "text", v.name(queue, "queue"))), Shape.SCALAR, bool)


def set_queue_notify(queue, notify) -> Op:
    return Op("set_queue_notify", _args(("queue", "text", v.name(queue, "queue")),
                                        ("notify", "boolean", v.boolean(notify, "notify"))), Shape.SCALAR, bool)


def set_queue_limits(queue, max_claimed=None, max_claimed_per_key=None, rate_limit=None,
                     rate_period=None) -> Op:
    limits = [v.integer(value, what, minimum=1) for value, what in (
        (max_claimed, "max_claimed"), (max_claimed_per_key, "max_claimed_per_key"), (rate_limit, "rate_limit"))]
    period = v.duration(rate_period, "rate_period", backwards=True)
    if (limits[2] is None) != (period is None):
        raise config_error("QF100", "rate_limit and rate_period go together")
    return Op("set_queue_limits", _args(
        ("queue", "text", v.name(queue, "queue")),
        ("max_claimed", "integer", limits[0]),
        ("max_claimed_per_key", "integer", limits[1]),
        ("rate_limit", "integer", limits[2]),
        ("rate_period", "interval", period)), Shape.VOID)


def set_queue_notify_done(queue, notify) -> Op:
    return Op("set_queue_notify_done", _args(("queue", "text", v.name(queue, "queue")),
                                             ("notify", "boolean", v.boolean(notify, "notify"))),
              Shape.SCALAR, bool)


def set_queue_history(queue, enabled, retention=None) -> Op:
    return Op("set_queue_history", _args(("queue", "text", v.name(queue, "queue")),
                                         ("enabled", "boolean", v.boolean(enabled, "enabled")),
                                         ("retention", "interval", v.duration(retention, "retention"))),
              Shape.SCALAR, bool)


# Producers ------------------------------------------------------------------

@dataclass(frozen=True)
class SubmitRequest:
    """One validated submission, as authored (None stays None)."""

    task: str
    payload: str  # canonical JSON text ("null" for none)
    submission_id: str | None
    job_id: str | None
    priority: int | None
    run_at: datetime | None
    expires_at: datetime | None
    max_attempts: int | None
    active_key: str | None
    force: bool
    concurrency_key: str | None = None
    depends_on: tuple[str, ...] | None = None

    @property
    def payload_value(self) -> str | None:
        return None if self.payload == "null" else self.payload


def submit_request(task, payload=None, submission_id=None, job_id=None, priority=None, run_at=None,
                   expires_at=None, max_attempts=None, active_key=None, force=False,
                   concurrency_key=None, depends_on=None) -> SubmitRequest:
    return SubmitRequest(
        task=v.name(task, "task"),  # type: ignore[arg-type]
        payload=v.json_value(payload, "payload"),
        submission_id=v.name(submission_id, "submission_id", nullable=True),
        job_id=v.job_id(job_id, nullable=True),
        priority=v.integer(priority, "priority"),
        run_at=v.moment(run_at, "run_at"),
        expires_at=v.moment(expires_at, "expires_at"),
        max_attempts=v.integer(max_attempts, "max_attempts", minimum=1),
        active_key=v.name(active_key, "active_key", nullable=True),
        force=v.boolean(force, "force"),
        concurrency_key=v.name(concurrency_key, "concurrency_key", nullable=True),
        depends_on=v.dependencies(depends_on),
    )


def submit(queue, task, payload=None, submission_id=None, job_id=None, priority=None, run_at=None,
           expires_at=None, max_attempts=None, active_key=None, force=False, concurrency_key=None,
           depends_on=None) -> Op:
    request = submit_request(task, payload, submission_id, job_id, priority, run_at, expires_at,
                             max_attempts, active_key, force, concurrency_key, depends_on)
    return Op("submit", _args(
        ("queue", "text", v.name(queue, "queue")),
        ("task", "text", request.task),
        ("payload", "jsonb", request.payload_value),
        ("submission_id", "text", request.submission_id),
        ("job_id", "text", request.job_id),
        ("priority", "integer", request.priority),
        ("run_at", "timestamptz", request.run_at),
        ("expires_at", "timestamptz", request.expires_at),
        ("max_attempts", "integer", request.max_attempts),
        ("active_key", "text", request.active_key),
        ("force", "boolean", request.force),
        ("concurrency_key", "text", request.concurrency_key),
        ("depends_on", "text[]", None if request.depends_on is None else list(request.depends_on)),
        optional=("payload", "submission_id", "job_id", "priority", "run_at", "expires_at",
                  "max_attempts", "active_key", "concurrency_key", "depends_on"),
    ), Shape.SCALAR, str)


_REQUEST_KEYS = frozenset({"task", "payload", "submission_id", "job_id", "priority", "run_at",
                           "expires_at", "max_attempts", "active_key", "force", "concurrency_key",
                           "depends_on"})


def submit_batch(queue, requests) -> Op:
    items = v.sequence(requests, "requests")
    snapshot = []
    for index, item in enumerate(items):
        try:
            if not isinstance(item, Mapping):
                raise config_error("QF100", "each request must be a dict")
            if not set(item) <= _REQUEST_KEYS:
                raise config_error("QF100", "a request has an unknown key")
            if "task" not in item:
                raise config_error("QF102", "task is required")
            snapshot.append(submit_request(**item))
        except Exception as error:
            if hasattr(error, "sqlstate"):
                error.args = (f"{error.args[0]} (request index {index})",)
            raise
    return Op("submit_batch", _args(("queue", "text", v.name(queue, "queue")),
                                    ("requests", "requests", tuple(snapshot))), Shape.SCALAR, list[str])


# Workers --------------------------------------------------------------------

def claim_next(queues, owner_id, claim_token, lease=None, budget=None) -> Op:
    return Op("claim_next", _args(
        ("queues", "text[]", v.names(queues, "queues")),
        ("owner_id", "text", v.name(owner_id, "owner_id")),
        ("claim_token", "text", v.name(claim_token, "claim_token")),
        ("lease", "interval", v.duration(lease, "lease")),
        ("budget", "interval", v.duration(budget, "budget")),
        optional=("lease", "budget"),
    ), Shape.ROW, Claim)


def claim_batch(queues, owner_id, claim_tokens, lease=None, budget=None) -> Op:
    return Op("claim_batch", _args(
        ("queues", "text[]", v.names(queues, "queues")),
        ("owner_id", "text", v.name(owner_id, "owner_id")),
        ("claim_tokens", "text[]", v.names(claim_tokens, "claim_tokens")),
        ("lease", "interval", v.duration(lease, "lease")),
        ("budget", "interval", v.duration(budget, "budget")),
        optional=("lease", "budget"),
    ), Shape.ROWS, Claim)


def claim_jobs(queues, owner_id, claim_nonce, max_jobs, lease=None, budget=None) -> Op:
    return Op("claim_jobs", _args(
        ("queues", "text[]", v.names(queues, "queues")),
        ("owner_id", "text", v.name(owner_id, "owner_id")),
        ("claim_nonce", "text", v.name(claim_nonce, "claim_nonce")),
        ("max_jobs", "integer", v.integer(max_jobs, "max_jobs", nullable=False, minimum=1, maximum=v.MAX_BATCH)),
        ("lease", "interval", v.duration(lease, "lease")),
        ("budget", "interval", v.duration(budget, "budget")),
        optional=("lease", "budget"),
    ), Shape.ROWS, Claim)


def recover_claims(owner_id, claim_nonce) -> Op:
    """recover_claim's every row: all the live claims of one claim_jobs call
    (or the one claim of a per-job token)."""
    return Op("recover_claim", _args(("owner_id", "text", v.name(owner_id, "owner_id")),
                                     ("claim_token", "text", v.name(claim_nonce, "claim_nonce"))),
              Shape.ROWS, Claim, writes=False)


def recover_claim(owner_id, claim_token) -> Op:
    return Op("recover_claim", _args(("owner_id", "text", v.name(owner_id, "owner_id")),
                                     ("claim_token", "text", v.name(claim_token, "claim_token"))),
              Shape.ROW, Claim, writes=False)


def heartbeat(fence, lease=None) -> Op:
    return Op("heartbeat", _args(*_fence_args(fence), ("lease", "interval", v.duration(lease, "lease")),
                                 optional=("lease",)), Shape.SCALAR, bool)


def _fence_arrays(fences: Any) -> list[tuple[str, str, Any]]:
    items = v.sequence(fences, "fences")
    for fence in items:
        if not isinstance(fence, Fence):
            raise config_error("QF106", "a Fence is required")
        v.fence_parts(fence.job_id, fence.owner_id, fence.generation, fence.claim_token)
    return [("job_ids", "text[]", [f.job_id for f in items]),
            ("owner_ids", "text[]", [f.owner_id for f in items]),
            ("generations", "bigint[]", [f.generation for f in items]),
            ("claim_tokens", "text[]", [f.claim_token for f in items])]


def heartbeat_batch(fences, lease=None) -> Op:
    return Op("heartbeat_batch", _args(*_fence_arrays(fences),
                                       ("lease", "interval", v.duration(lease, "lease")),
                                       optional=("lease",)), Shape.SCALAR, list[bool])


def complete(fence, result=None) -> Op:
    text = v.json_value(result, "result")
    return Op("complete", _args(*_fence_args(fence),
                                ("result", "jsonb", None if text == "null" else text),
                                optional=("result",)), Shape.SCALAR, bool)


def complete_batch(fences, results=None) -> Op:
    arrays = _fence_arrays(fences)
    texts = None
    if results is not None:
        values = v.sequence(results, "results")
        if len(values) != len(arrays[0][2]):
            raise config_error("QF100", "results must have one element per fence")
        if any(r is not None for r in values):  # else every result null: as no results (the default)
            texts = [None if t == "null" else t for t in (v.json_value(r, "result") for r in values)]
            if not any(texts):
                texts = None
    return Op("complete_batch", _args(*arrays, ("results", "jsonb[]", texts), optional=("results",)),
              Shape.SCALAR, list[bool])


def fail(fence, error, retry=True, retry_at=None) -> Op:
    return Op("fail", _args(*_fence_args(fence),
                            ("error", "text", v.error_text(error)),
                            ("retry", "boolean", v.boolean(retry, "retry")),
                            ("retry_at", "timestamptz", v.moment(retry_at, "retry_at")),
                            optional=("retry_at",)), Shape.SCALAR, bool)


def release(fence, run_at=None) -> Op:
    return Op("release", _args(*_fence_args(fence), ("run_at", "timestamptz", v.moment(run_at, "run_at")),
                               optional=("run_at",)), Shape.SCALAR, bool)


def checkpoint(fence, step, value) -> Op:
    if value is None:
        raise config_error("QF103", "a checkpoint value may not be null")
    return Op("checkpoint", _args(*_fence_args(fence), ("step", "text", v.name(step, "step")),
                                  ("value", "jsonb", v.json_value(value, "value"))), Shape.SCALAR, Any)


def set_pid(fence, pid) -> Op:
    return Op("set_pid", _args(*_fence_args(fence),
                               ("pid", "integer", v.integer(pid, "pid", nullable=False, minimum=1))),
              Shape.SCALAR, bool)


def claim_state(fence) -> Op:
    return Op("claim_state", _args(*_fence_args(fence)), Shape.ROW, ClaimState, writes=False)


def acknowledge_cancel(fence) -> Op:
    return Op("acknowledge_cancel", _args(*_fence_args(fence)), Shape.SCALAR, bool)


MAX_PROGRESS_BYTES = 64 * 1024  # a progress report, in canonical form (docs/guarantees.md §17)


def progress_text(value) -> str:
    """A progress report validated and snapshotted as canonical JSON text."""
    text = v.json_value(value, "progress")
    if len(text.encode("utf-8")) > MAX_PROGRESS_BYTES:
        raise config_error("QF103", "progress exceeds 64 KiB in canonical form")
    return text


def progress(fence, value) -> Op:
    text = progress_text(value)
    return Op("progress", _args(*_fence_args(fence), ("progress", "jsonb", text)), Shape.SCALAR, bool)


def reap(max_rows=None) -> Op:
    return Op("reap", _args(("max_rows", "integer", v.integer(max_rows, "max_rows", minimum=1)),
                            optional=("max_rows",)), Shape.ROW, ReapResult)


# External execution (docs/external-execution.md) ------------------------------

MAX_REPAIR_ROWS = 100_000
REF_LENGTH = 1024  # an external system's ids can be long (ARNs, URLs)


def _dispatch_backend(backend) -> tuple[str, str, Any]:
    return ("backend", "text", v.name(backend, "backend"))


def _ref(value, what: str) -> tuple[str, str, Any]:
    return (what, "text", v.name(value, what, max_length=REF_LENGTH))


def reserve_dispatch(fence, backend, reservation_ref) -> Op:
    return Op("reserve_dispatch", _args(*_fence_args(fence), _dispatch_backend(backend),
                                        _ref(reservation_ref, "reservation_ref")), Shape.SCALAR, bool)


def finalize_dispatch(fence, reservation_ref, execution_ref) -> Op:
    return Op("finalize_dispatch", _args(*_fence_args(fence), _ref(reservation_ref, "reservation_ref"),
                                         _ref(execution_ref, "execution_ref")), Shape.SCALAR, bool)


def release_dispatch(fence, reservation_ref) -> Op:
    return Op("release_dispatch", _args(*_fence_args(fence), _ref(reservation_ref, "reservation_ref")),
              Shape.SCALAR, bool)


def replace_dispatch_ref(fence, expected_ref, execution_ref) -> Op:
    return Op("replace_dispatch_ref", _args(*_fence_args(fence), _ref(expected_ref, "expected_ref"),
                                            _ref(execution_ref, "execution_ref")), Shape.SCALAR, bool)


def adopt_dispatch(job_id, backend, expected_ref, owner_id, claim_token, lease=None) -> Op:
    return Op("adopt_dispatch", _args(
        ("job_id", "text", v.job_id(job_id)),
        _dispatch_backend(backend),
        _ref(expected_ref, "expected_ref"),
        ("owner_id", "text", v.name(owner_id, "owner_id")),
        ("claim_token", "text", v.name(claim_token, "claim_token")),
        ("lease", "interval", v.duration(lease, "lease")),
        optional=("lease",),
    ), Shape.ROW, Claim)


def dispatch_repair_candidates(backend, max_rows=None) -> Op:
    """Writes: each row returned is marked checked."""
    return Op("dispatch_repair_candidates", _args(
        _dispatch_backend(backend),
        ("max_rows", "integer", v.integer(max_rows, "max_rows", minimum=1, maximum=MAX_REPAIR_ROWS)),
        optional=("max_rows",),
    ), Shape.ROWS, DispatchCandidate)


def get_job_events(job_id) -> Op:
    return Op("get_job_events", _args(("job_id", "text", v.job_id(job_id))), Shape.ROWS, JobEvent, writes=False)


# Named locks (docs/guarantees.md §15) ----------------------------------------
# Arguments are checked in their SQL order, as the SQL checks them.

def _lock_name(lock) -> tuple[str, str, Any]:
    return ("lock", "text", v.name(lock, "lock"))


def _lock_owner(owner_id) -> tuple[str, str, Any]:
    return ("owner_id", "text", v.name(owner_id, "owner_id"))


def _lock_token(token) -> tuple[str, str, Any]:
    return ("token", "bigint", v.integer(token, "token", nullable=False, minimum=1, maximum=v.INT64_MAX))


def _lock_ttl(ttl) -> tuple[str, str, Any]:
    return ("ttl", "interval", v.duration(ttl, "ttl", nullable=False))


def acquire_lock(lock, owner_id, ttl) -> Op:
    return Op("acquire_lock", _args(_lock_name(lock), _lock_owner(owner_id), _lock_ttl(ttl)), Shape.SCALAR, int)


def renew_lock(lock, owner_id, token, ttl) -> Op:
    return Op("renew_lock", _args(_lock_name(lock), _lock_owner(owner_id), _lock_token(token), _lock_ttl(ttl)),
              Shape.SCALAR, bool)


def release_lock(lock, owner_id, token) -> Op:
    return Op("release_lock", _args(_lock_name(lock), _lock_owner(owner_id), _lock_token(token)),
              Shape.SCALAR, bool)


def check_lock(lock, token) -> Op:
    """Read-only on SQLite (a deferred BEGIN): through the client its answer
    is a snapshot there; locks.check_lock_in_transaction fences writes."""
    return Op("check_lock", _args(_lock_name(lock), _lock_token(token)), Shape.SCALAR, bool, writes=False)


# Time (docs/guarantees.md §13) ----------------------------------------------

def next_due(queues) -> Op:
    return Op("next_due", _args(("queues", "text[]", v.names(queues, "queues"))), Shape.SCALAR, datetime,
              writes=False)


def extend(fence, budget) -> Op:
    return Op("extend", _args(*_fence_args(fence),
                              ("budget", "interval", v.duration(budget, "budget", nullable=False))),
              Shape.SCALAR, bool)


MAX_CANCEL_ROWS = 100_000


def _payload_contains(value) -> str | None:
    """A jsonb @> pattern (cancel_matching's rule, shared by search and the
    bulk actions): a JSON object or array, as canonical text."""
    if value is not None and not isinstance(value, (dict, list, tuple)):
        raise config_error("QF100", "payload_contains must be a JSON object or array")
    return None if value is None else v.json_value(value, "payload_contains")


def _cancel_flags(include_claimed, force) -> tuple[bool, bool]:
    include_claimed, force = v.boolean(include_claimed, "include_claimed"), v.boolean(force, "force")
    if force and not include_claimed:
        raise config_error("QF100", "force applies to claimed jobs: it needs include_claimed")
    return include_claimed, force


def cancel_matching(queue, task=None, payload_contains=None, include_claimed=False, force=False,
                    max_rows=10_000) -> Op:
    queue, task = v.name(queue, "queue"), v.name(task, "task", nullable=True)
    contained = _payload_contains(payload_contains)
    include_claimed, force = _cancel_flags(include_claimed, force)
    return Op("cancel_matching", _args(
        ("queue", "text", queue),
        ("task", "text", task),
        ("payload_contains", "jsonb", contained),
        ("include_claimed", "boolean", include_claimed),
        ("force", "boolean", force),
        ("max_rows", "integer", v.integer(max_rows, "max_rows", nullable=False, minimum=1,
                                          maximum=MAX_CANCEL_ROWS)),
        optional=("task", "payload_contains"),
    ), Shape.SCALAR, int)


# The operator's view over time (version 7, docs/design-v7.md) ------------------
# Arguments are checked in their SQL order, as the SQL checks them.

MAX_SAMPLE_MINUTES = 11_520           # a catch-up of 192 hours in one call
ACTIVITY_LONGEST = timedelta(hours=192)
MAX_ACTIVITY_BUCKETS = 10_080
MAX_SEARCH_ROWS = 1_000
MAX_SEARCH_SCAN = 1_000_000
MAX_ERROR_PATTERN = 1_000             # characters of error_contains
MAX_BULK_ROWS = 100_000
LIVE_STATUSES = ("pending", "claimed")
TERMINAL_STATUSES = ("completed", "failed", "cancelled", "expired")


def sample_activity(max_minutes=None, keep=None) -> Op:
    """Writes: each queue's closed minutes since its last row (answers how
    many rows it wrote), and deletes rows older than keep (at least a minute)."""
    max_minutes = v.integer(max_minutes, "max_minutes", minimum=1, maximum=MAX_SAMPLE_MINUTES)
    keep = v.duration(keep, "keep", backwards=True)
    if keep is not None and keep < timedelta(minutes=1):
        raise config_error("QF105", "keep must be at least a minute")
    return Op("sample_activity", _args(("max_minutes", "integer", max_minutes), ("keep", "interval", keep),
                                       optional=("max_minutes", "keep")), Shape.SCALAR, int)


def activity(queue=None, since=timedelta(hours=1), bucket=None) -> Op:
    """since: at most 192 hours. Without a bucket: 1 minute up to 2 hours,
    15 minutes up to 48 hours, 1 hour beyond; a bucket is a whole number of
    minutes, at most MAX_ACTIVITY_BUCKETS of them (ceil(since / bucket))."""
    queue = v.name(queue, "queue", nullable=True)
    since = v.duration(since, "since", nullable=False, backwards=True)
    if since > ACTIVITY_LONGEST:
        raise config_error("QF104", "since may reach back at most 192 hours")
    bucket = v.duration(bucket, "bucket", backwards=True)
    if bucket is not None and bucket % timedelta(minutes=1):
        raise config_error("QF104", "bucket must be a whole number of minutes")
    if bucket is not None and -(-since // bucket) > MAX_ACTIVITY_BUCKETS:
        raise config_error("QF104", f"since may hold at most {MAX_ACTIVITY_BUCKETS} buckets")
    return Op("activity", _args(("queue", "text", queue), ("since", "interval", since),
                                ("bucket", "interval", bucket)), Shape.ROWS, ActivityBucket, writes=False)


def _error_pattern(value) -> str | None:
    """error_contains: a case-insensitive substring of last_error."""
    return v.name(value, "error_contains", max_length=MAX_ERROR_PATTERN, nullable=True, code="QF100")


def search_jobs(queue=None, status=None, task=None, payload_contains=None, error_contains=None,
                submission_prefix=None, since=None, until=None, before_seq=None, max_rows=50,
                max_scan=10_000) -> Op:
    """Bounded by one index range: a submission prefix, else a live status,
    else the jobs finished in [since, until) (a terminal status, since, until
    or error_contains); else QF100, never a read of all history. since and
    until bound when a job finished: QF100 with a live status."""
    queue = v.name(queue, "queue", nullable=True)
    if status is not None and status not in LIVE_STATUSES + TERMINAL_STATUSES:
        raise config_error("QF100", "status must be one of " + ", ".join(LIVE_STATUSES + TERMINAL_STATUSES))
    task = v.name(task, "task", nullable=True)
    contained = _payload_contains(payload_contains)
    error_contains = _error_pattern(error_contains)
    submission_prefix = v.name(submission_prefix, "submission_prefix", nullable=True)
    since, until = v.moment(since, "since"), v.moment(until, "until")
    before_seq = v.integer(before_seq, "before_seq", minimum=-v.INT64_MAX - 1, maximum=v.INT64_MAX)
    max_rows = v.integer(max_rows, "max_rows", nullable=False, minimum=1, maximum=MAX_SEARCH_ROWS)
    max_scan = v.integer(max_scan, "max_scan", nullable=False, minimum=1, maximum=MAX_SEARCH_SCAN)
    windowed = since is not None or until is not None
    if status in LIVE_STATUSES and windowed:
        raise config_error("QF100", "since and until bound when a job finished: not with a live status")
    if submission_prefix is None and status is None and not windowed and error_contains is None:
        raise config_error("QF100", "search needs a submission prefix, a status or a time window")
    return Op("search_jobs", _args(
        ("queue", "text", queue),
        ("status", "text", status),
        ("task", "text", task),
        ("payload_contains", "jsonb", contained),
        ("error_contains", "text", error_contains),
        ("submission_prefix", "text", submission_prefix),
        ("since", "timestamptz", since),
        ("until", "timestamptz", until),
        ("before_seq", "bigint", before_seq),
        ("max_rows", "integer", max_rows),
        ("max_scan", "integer", max_scan),
        optional=("queue", "status", "task", "payload_contains", "error_contains", "submission_prefix", "since",
                  "until", "before_seq"),
    ), Shape.ROWS, SearchedJob, writes=False)


def _bulk_action(name, queue, job_ids, filters, max_rows, flags=None) -> Op:
    """A bulk action, checked in the SQL's order: the queue, the selection
    (1 to 10,000 ids), the filters, max_rows (1 to 100,000), then QF100 for
    neither job_ids nor a filter; ``flags`` (a function giving the checked
    flags) after those."""
    queue = v.name(queue, "queue")
    selection = None if job_ids is None else v.names(job_ids, "job_ids")
    filters = filters()
    max_rows = v.integer(max_rows, "max_rows", nullable=False, minimum=1, maximum=MAX_BULK_ROWS)
    if selection is None and all(value is None for _, _, value in filters):
        raise config_error("QF100", f"{name} needs job_ids or a filter")
    return Op(name, _args(("queue", "text", queue), ("job_ids", "text[]", selection), *filters,
                          *(flags() if flags else ()), ("max_rows", "integer", max_rows),
                          optional=("job_ids",) + tuple(arg for arg, _, _ in filters)), Shape.SCALAR, int)


def _failure_filters(task, payload_contains, error_contains):
    return lambda: [("task", "text", v.name(task, "task", nullable=True)),
                    ("payload_contains", "jsonb", _payload_contains(payload_contains)),
                    ("error_contains", "text", _error_pattern(error_contains))]


def retry_jobs(queue, job_ids=None, task=None, payload_contains=None, error_contains=None, max_rows=1_000) -> Op:
    """Pending jobs waiting for a retry become due now, soonest due first
    (event retry_forced)."""
    return _bulk_action("retry_jobs", queue, job_ids, _failure_filters(task, payload_contains, error_contains),
                        max_rows)


def cancel_jobs(queue, job_ids=None, task=None, payload_contains=None, include_claimed=False, force=False,
                max_rows=1_000) -> Op:
    """cancel_matching's rule on a selection and/or a filter, recorded."""
    def flags():
        checked = _cancel_flags(include_claimed, force)
        return [("include_claimed", "boolean", checked[0]), ("force", "boolean", checked[1])]

    return _bulk_action("cancel_jobs", queue, job_ids,
                        lambda: [("task", "text", v.name(task, "task", nullable=True)),
                                 ("payload_contains", "jsonb", _payload_contains(payload_contains))],
                        max_rows, flags)


def replay_dead_letters(queue, job_ids=None, task=None, payload_contains=None, error_contains=None,
                        max_rows=1_000) -> Op:
    """Each unhandled letter of a matching failed job, oldest first, replayed
    as replay_dead_letter would (a job whose active key is held is skipped)."""
    return _bulk_action("replay_dead_letters", queue, job_ids,
                        _failure_filters(task, payload_contains, error_contains), max_rows)


# Operators ------------------------------------------------------------------

def cancel(job_id, force=False) -> Op:
    return Op("cancel", _args(("job_id", "text", v.job_id(job_id)),
                              ("force", "boolean", v.boolean(force, "force"))), Shape.SCALAR, str)


def get_job(job_id) -> Op:
    return Op("get_job", _args(("job_id", "text", v.job_id(job_id))), Shape.ROW, Job, writes=False)


def attempts(job_id) -> Op:
    return Op("attempts", _args(("job_id", "text", v.job_id(job_id))), Shape.ROWS, Attempt, writes=False)


def stats() -> Op:
    return Op("stats", (), Shape.ROWS, QueueStats, writes=False)


def dead_letters(queue=None, include_handled=False, limit=100) -> Op:
    return Op("dead_letters", _args(
        ("queue", "text", v.name(queue, "queue", nullable=True)),
        ("include_handled", "boolean", v.boolean(include_handled, "include_handled")),
        ("limit", "integer", v.integer(limit, "limit", nullable=False, minimum=1)),
    ), Shape.ROWS, DeadLetter, writes=False)


def purge(older_than, max_rows=None, submissions_older_than=None) -> Op:
    return Op("purge", _args(
        ("older_than", "interval",
         v.duration(older_than, "older_than", allow_zero=True, nullable=False, backwards=True)),
        ("max_rows", "integer", v.integer(max_rows, "max_rows", minimum=1)),
        ("submissions_older_than", "interval",
         v.duration(submissions_older_than, "submissions_older_than", allow_zero=True, backwards=True)),
        optional=("max_rows", "submissions_older_than"),
    ), Shape.SCALAR, int)


def replay_dead_letter(dlq_id) -> Op:
    return Op("replay_dead_letter", _args(("dlq_id", "text", v.dlq_id(dlq_id))), Shape.SCALAR, str)


def discard_dead_letter(dlq_id) -> Op:
    return Op("discard_dead_letter", _args(("dlq_id", "text", v.dlq_id(dlq_id))), Shape.SCALAR, bool)


def verify_schema() -> Op:
    return Op("verify_schema", (), Shape.ROWS, SchemaCheck, writes=False)


def version() -> Op:
    return Op("version", (), Shape.SCALAR, str, writes=False)


# Schedules (docs/guarantees.md §14) -------------------------------------------

# The longest schedule name whose submission ids ('fenceq:schedule:' +
# name + ':' + 'YYYY-MM-DDTHH:MM:SSZ') stay within 255 characters.
SCHEDULE_NAME_LENGTH = 218


def set_schedule(schedule, queue, task, cron, payload=None, time_zone="UTC", priority=None,
                 max_attempts=None, active_key=None, paused=False) -> Op:
    """The expression is parsed here (QF100) on both engines; whether the
    time zone exists, each engine decides (PostgreSQL by pg_timezone_names)."""
    text = v.json_value(payload, "payload")
    cron_expression.parse(cron)
    if not isinstance(time_zone, str) or not 1 <= len(time_zone) <= 255 or not time_zone.isprintable():
        raise config_error("QF100", "time_zone must name a known IANA time zone")
    return Op("set_schedule", _args(
        ("schedule", "text", v.name(schedule, "schedule", max_length=SCHEDULE_NAME_LENGTH)),
        ("queue", "text", v.name(queue, "queue")),
        ("task", "text", v.name(task, "task")),
        ("cron", "text", cron),
        ("payload", "jsonb", None if text == "null" else text),
        ("time_zone", "text", time_zone),
        ("priority", "integer", v.integer(priority, "priority")),
        ("max_attempts", "integer", v.integer(max_attempts, "max_attempts", minimum=1)),
        ("active_key", "text", v.name(active_key, "active_key", nullable=True)),
        ("paused", "boolean", v.boolean(paused, "paused")),
        optional=("payload", "priority", "max_attempts", "active_key"),
    ), Shape.SCALAR, bool)


def drop_schedule(schedule) -> Op:
    return Op("drop_schedule", _args(
        ("schedule", "text", v.name(schedule, "schedule", max_length=SCHEDULE_NAME_LENGTH))), Shape.SCALAR, bool)


def tick(max_rows=None) -> Op:
    return Op("tick", _args(("max_rows", "integer", v.integer(max_rows, "max_rows", minimum=1)),
                            optional=("max_rows",)), Shape.SCALAR, int)


