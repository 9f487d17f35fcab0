"""Value types returned and accepted by the client (docs/guarantees.md §8)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


def new_claim_token() -> str:
    """A fresh 128-bit random claim token. Keep it *before* sending the claim."""
    return secrets.token_hex(16)


def new_claim_tokens(count: int) -> list[str]:
    """``count`` fresh claim tokens, as ``new_claim_token`` makes them, from
    one read of the system's randomness rather than one per token."""
    text = secrets.token_hex(16 * count)
    return [text[start:start + 32] for start in range(0, 32 * count, 32)]


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof of one claim: pass it unchanged to every fenced call."""

    job_id: str
    owner_id: str
    generation: int
    claim_token: str = field(repr=False)
    queue: str | None = None

    def __repr__(self) -> str:
        return (f"Fence(job_id={self.job_id!r}, owner_id={self.owner_id!r}, "
                f"generation={self.generation!r}, claim_token=<hidden>, queue={self.queue!r})")


@dataclass(frozen=True, slots=True)
class Claim:
    job_id: str
    queue: str
    task: str
    payload: Any
    priority: int
    attempt: int
    max_attempts: int
    owner_id: str
    generation: int
    claim_token: str = field(repr=False)
    lease_expires_at: datetime | None = None
    budget_expires_at: datetime | None = None
    cancel_requested: bool = False
    submission_id: str | None = None
    checkpoints: dict[str, Any] = field(default_factory=dict)

    @property
    def fence(self) -> Fence:
        return Fence(self.job_id, self.owner_id, self.generation, self.claim_token, self.queue)


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    queue: str
    task: str
    payload: Any
    priority: int
    status: str
    attempts: int
    max_attempts: int
    run_at: datetime
    expires_at: datetime | None
    owner_id: str | None
    generation: int
    lease_expires_at: datetime | None
    budget_expires_at: datetime | None
    cancel_requested: bool
    pid: int | None
    result: Any
    last_error: str | None
    submission_id: str | None
    fingerprint: str | None
    active_key: str | None
    dlq_id: str | None
    created_at: datetime
    finished_at: datetime | None
    concurrency_key: str | None = None
    blocked_by: int = 0
    progress: Any = None              # the latest progress report, and when it was recorded
    progress_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: str
    generation: int
    owner_id: str
    claimed_at: datetime


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    pending: int
    due: int
    claimed: int
    cancel_requested: int
    oldest_due_age: timedelta | None
    paused: bool
    notify: bool
    max_claimed: int | None = None
    max_claimed_per_key: int | None = None
    busiest_key_claimed: int = 0
    rate_limit: int | None = None
    rate_period: timedelta | None = None
    rate_used: int = 0
    blocked: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    dlq_id: str
    job_id: str
    queue: str
    task: str
    error: str | None
    attempts: int
    failed_at: datetime
    replayed_at: datetime | None
    discarded_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClaimState:
    cancel_requested: bool
    pid: int | None


@dataclass(frozen=True, slots=True)
class ReapResult:
    requeued: int
    failed: int
    cancelled: int
    expired: int


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    check_name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Schedule:
    schedule: str
    queue: str
    task: str
    cron: str
    time_zone: str
    payload: Any
    priority: int | None
    max_attempts: int | None
    active_key: str | None
    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_job_id: str | None


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A live dispatch: a claimed job whose work was handed to an external
    system (docs/external-execution.md). ``state`` is ``reserved`` (the
    external call may or may not have happened) or ``running``."""

    job_id: str
    queue: str
    backend: str
    state: str
    reservation_ref: str
    execution_ref: str | None
    owner_id: str
    generation: int
    lease_expires_at: datetime | None
    checked_at: datetime | None


@dataclass(frozen=True, slots=True)
class DispatchCandidate:
    """A live dispatch whose claim lapsed, to adopt and reconcile. ``ref``
    is the reservation ref while ``reserved``, the execution ref once
    ``running``: what ``adopt_dispatch`` expects."""

    job_id: str
    queue: str
    task: str
    state: str
    ref: str
    generation: int
    lapsed_at: datetime
    checked_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One transition of a job whose queue keeps history."""

    job_id: str
    seq: int
    at: datetime
    event: str
    generation: int | None
    owner_id: str | None
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ActivityBucket:
    """One bucket of a queue's (or all queues') activity over time
    (docs/design-v7.md §2): what happened in it, the depth sampled last in
    it (None when no sample had it), and wait and run percentiles read from
    the merged histograms (None when no job finished in it)."""

    bucket_start: datetime
    submitted: int
    claimed: int
    retried: int
    completed: int
    failed: int
    cancelled: int
    expired: int
    pending: int | None
    due: int | None
    running: int | None
    wait_p50: timedelta | None
    wait_p95: timedelta | None
    run_p50: timedelta | None
    run_p95: timedelta | None


@dataclass(frozen=True, slots=True)
class SearchedJob(Job):
    """A job found by ``search_jobs``, with its ``seq`` (submission order:
    the search's cursor)."""

    seq: int = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of ``search_jobs``, newest first. ``next_before_seq`` is
    the last job's seq, to pass as ``before_seq`` for the next page (None
    for an empty page: the search is over). A page shorter than
    ``max_rows`` may still have a next one: the search examines at most
    ``max_scan`` candidates per page."""

    jobs: list[SearchedJob]
    next_before_seq: int | None

    @classmethod
    def of(cls, jobs: list[SearchedJob]) -> "JobPage":
        return cls(jobs, jobs[-1].seq if jobs else None)
