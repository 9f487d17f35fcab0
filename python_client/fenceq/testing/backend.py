"""An in-memory ``AsyncBackend``: the worker's own unit tests run its units
over it, and ``fenceq.testing``'s in-process modes run a real ``Runtime``
over it (docs/testing-your-tasks.md). It is never a stand-in for the
database where the database's rules are what a test is about.

It keeps just enough of fenceq's rules for the worker's protocols and for
producers: claims with nonces and generations (a claim_jobs call's one
nonce fencing each of its jobs, spent once), fenced writes refused once
the fence is stale, leases on an injected clock, submissions replayed by
submission id, active keys, priorities, dependencies, cancel requests,
external dispatches (docs/design-v6.md: reserve, finalize, release,
replace, adopt, repair candidates; reap and release leave a dispatched
claim alone), reap's outcomes (cancelled, failed on the last attempt, else
requeued as the queue's requeue_priority says), and the job history
(set_queue_history, get_job_events: the events of design-v6.md's table for
the transitions modelled here). Queues need not be declared: until
create_queue, alter_queue or set_queue_history names one, it has the
defaults, but for its back-off: a retry waits ``retry_backoff``. A declared
queue's lease, max_attempts and back-off act as on the database. Not
modelled: active-key replacement (``force``), concurrency keys and expiry
(a submission that asks for them raises QF100), dead letters (so no
``dead_lettered`` event), and every operation without a method here (QF100
naming it), purge among them. Faults are scripted per
operation: ``lose`` applies the call and then reports ``PersistenceFailed``
(the answer was lost), ``drop`` reports it without applying (the call never
arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Sequence

from ..backends import Capabilities, Notification
from ..backends.protocol import CONTROL_CHANNEL, JOBS_CHANNEL
from ..errors import PersistenceFailed, config_error, fenceq_error
from ..ops import Op, Shape, SubmitRequest
from ..types import Claim, ClaimState, Dispatch, DispatchCandidate, Job, JobEvent, ReapResult

DEFAULT_LEASE = timedelta(seconds=30)
DEFAULT_MAX_ATTEMPTS = 5  # a queue's default
EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)
FINISHED = frozenset({"completed", "failed", "cancelled", "expired"})
UNCLAIMED = (None, None)  # the generation and owner of an event of a job no claim holds
ERROR_IN_EVENT = 2000  # characters of an error text an event keeps
REAP_ROWS = 1000  # reap's max_rows default
# The operations whose method is named otherwise: ``submit`` puts a job in directly (the tests' shorthand).
METHODS = {"submit": "submit_request", "submit_batch": "submit_batch_request"}


@dataclass
class Row:
    job_id: str
    queue: str
    task: str
    payload: Any
    max_attempts: int = 3
    status: str = "pending"
    attempts: int = 0
    generation: int = 0
    owner_id: str | None = None
    claim_token: str | None = None
    lease: timedelta | None = None
    lease_expires_at: datetime | None = None
    budget_expires_at: datetime | None = None
    cancel_requested: bool = False
    result: Any = None
    last_error: str | None = None
    checkpoints: dict[str, Any] = field(default_factory=dict)
    run_at: datetime | None = None  # claimable from then on (None: from the start)
    progress: Any = None
    priority: int = 0
    submission_id: str | None = None
    active_key: str | None = None
    depends_on: tuple[str, ...] = ()
    claims_left: int | None = None  # None: as many as it takes; inline testing allows one at a time
    created_at: datetime | None = None
    finished_at: datetime | None = None
    queued: int = 0  # the order it last became pending in: later than a job due at the same time (the clock stands)


@dataclass
class QueueRow:
    """A queue's settings: create_queue's DEFAULTs until set."""

    lease: timedelta = DEFAULT_LEASE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base: timedelta = timedelta(seconds=1)
    backoff_factor: float = 2.0
    backoff_max: timedelta = timedelta(hours=1)
    dead_letter: bool = True
    requeue_priority: str = "keep"
    history: bool = False
    history_retention: timedelta | None = None


# The settings create_queue compares (history is set_queue_history's).
QUEUE_SETTINGS = tuple(f.name for f in fields(QueueRow) if not f.name.startswith("history"))


def _time(moment: datetime) -> str:
    """A time in an event's detail, as PostgreSQL writes a timestamptz into JSON."""
    return moment.isoformat()


@dataclass
class DispatchRow:
    backend: str
    generation: int
    reservation_ref: str
    state: str = "reserved"
    execution_ref: str | None = None
    checked_at: datetime | None = None

    @property
    def ref(self) -> str:
        """What an adopter expects: the reservation ref while reserved, the execution ref once running."""
        return self.execution_ref if self.state == "running" and self.execution_ref else self.reservation_ref


class MemoryBackend:
    name = "memory"

    def __init__(self, clock: Any, *, notifications: bool = False, retry_backoff: timedelta = timedelta(0)):
        self.clock = clock
        self.capabilities = Capabilities(notifications=notifications, poll_interval=0.5, control_poll=0.5)
        self.rows: dict[str, Row] = {}
        # claim token or claim_jobs nonce -> its claims (job id, generation), in claim order
        self.ledger: dict[str, tuple[tuple[str, int], ...]] = {}
        self.calls: list[tuple[str, float, dict[str, Any]]] = []  # (operation, clock time, arguments)
        self.applied: Counter[str] = Counter()
        self._lose: Counter[str] = Counter()
        self._drop: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._notes: asyncio.Queue[Notification] = asyncio.Queue()
        self.retry_backoff = retry_backoff  # how long a retry waits in a queue not declared
        self.new_claims_left: int | None = None  # each new job's claims_left
        self._submissions: dict[str, tuple[str, tuple]] = {}  # submission id -> (job id, its request)
        self.dispatch_rows: dict[str, DispatchRow] = {}  # job id -> its latest dispatch (live or not)
        self.queues: dict[str, QueueRow] = {}  # the queues declared or set; others have the defaults
        self.events: list[JobEvent] = []  # in seq order
        self._seq = itertools.count(1)
        self._queued = itertools.count(1)

    # Set-up and faults ---------------------------------------------------------

    def submit(self, task: str, payload: Any = None, *, queue: str = "q", max_attempts: int = 3,
               run_at: datetime | None = None) -> str:
        """Put a job in directly (no replay, no notification)."""
        job_id = f"job-{next(self._ids)}"
        row = Row(job_id, queue, task, payload, max_attempts, run_at=run_at, created_at=self.now(),
                  claims_left=self.new_claims_left, queued=next(self._queued))
        self.rows[job_id] = row
        self._submitted(row)
        return job_id

    def lose(self, operation: str, times: int = 1) -> None:
        self._lose[operation] += times

    def drop(self, operation: str, times: int = 1) -> None:
        self._drop[operation] += times

    def notify(self, channel: str, payload: str) -> None:
        self._notes.put_nowait(Notification(channel, payload))

    def claimable(self, row: Row, queues: Sequence[str]) -> bool:
        return (row.status == "pending" and row.queue in queues and row.claims_left != 0
                and (row.run_at is None or row.run_at <= self.now()) and not self._blocked(row))

    def _blocked(self, row: Row) -> bool:
        """Waiting on a dependency that has not completed."""
        return not all(self.rows[job_id].status == "completed" for job_id in row.depends_on)

    def _due_at(self, row: Row) -> datetime:
        """The run_at the database would hold (a job due from the start: its submission time)."""
        return row.run_at or row.created_at or EARLIEST

    def idle(self, queues: Sequence[str]) -> bool:
        """Nothing claimed, and nothing these queues could claim now."""
        return not any(row.status == "claimed" or self.claimable(row, queues) for row in self.rows.values())

    def called(self, operation: str) -> list[dict[str, Any]]:
        return [arguments for name, _, arguments in self.calls if name == operation]

    # AsyncBackend ------------------------------------------------------------

    async def run(self, op: Op) -> Any:
        await asyncio.sleep(0)  # a call yields, as a real one does
        arguments = {arg.name: arg.value for arg in op.args}
        self.calls.append((op.name, self.clock.monotonic(), arguments))
        if self._drop[op.name]:
            self._drop[op.name] -= 1
            raise PersistenceFailed()
        method = getattr(self, METHODS.get(op.name, op.name), None)
        if method is None:
            raise config_error("QF100", f"the in-memory backend does not model {op.name}: "
                               "test it against a database (fenceq_postgres)")
        answer = method(**arguments)
        if op.shape is Shape.ROW and isinstance(answer, list):
            answer = answer[0] if answer else None  # as the database's first row: recover_claim's answers rows
        self.applied[op.name] += 1
        if self._lose[op.name]:
            self._lose[op.name] -= 1
            raise PersistenceFailed()
        return answer

    async def close(self) -> None:
        pass  # one shared store; every "connection" is the same

    @contextlib.asynccontextmanager
    async def listen(self, channels: Sequence[str]) -> AsyncIterator[AsyncIterator[Notification]]:
        async def notifications() -> AsyncIterator[Notification]:
            while True:
                note = await self._notes.get()
                if note.channel in channels:
                    yield note

        yield notifications()

    @contextlib.asynccontextmanager
    async def exclusive(self, duty: str) -> AsyncIterator["MemoryBackend"]:
        yield self

    def schema_missing(self, error: BaseException) -> bool:
        return False

    # Operations ----------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.wall(), timezone.utc)

    def _live(self, job_id: str, owner_id: str, generation: int, claim_token: str) -> Row | None:
        row = self.rows.get(job_id)
        if (row is None or row.status != "claimed" or row.generation != generation or row.owner_id != owner_id
                or row.claim_token != claim_token or row.lease_expires_at is None
                or row.lease_expires_at <= self.now()):
            return None
        return row

    def _claim_of(self, row: Row) -> Claim:
        return Claim(job_id=row.job_id, queue=row.queue, task=row.task, payload=row.payload, priority=0,
                     attempt=row.attempts, max_attempts=row.max_attempts, owner_id=row.owner_id or "",
                     generation=row.generation, claim_token=row.claim_token or "",
                     lease_expires_at=row.lease_expires_at, budget_expires_at=row.budget_expires_at,
                     cancel_requested=row.cancel_requested, checkpoints=dict(row.checkpoints))

    def version(self) -> str:
        return "1"

    def claim_batch(self, queues: list[str], owner_id: str, claim_tokens: list[str],
                    lease: timedelta | None = None, budget: timedelta | None = None) -> list[Claim]:
        if len(set(claim_tokens)) != len(claim_tokens) or any(token in self.ledger for token in claim_tokens):
            raise fenceq_error("QF301")  # tokens and claim_jobs nonces: one namespace
        claims = self._claim(queues, owner_id, claim_tokens, lease, budget)
        for claim in claims:
            self.ledger[claim.claim_token] = ((claim.job_id, claim.generation),)
        return claims

    def claim_jobs(self, queues: list[str], owner_id: str, claim_nonce: str, max_jobs: int,
                   lease: timedelta | None = None, budget: timedelta | None = None) -> list[Claim]:
        if claim_nonce in self.ledger:
            raise fenceq_error("QF301")
        claims = self._claim(queues, owner_id, [claim_nonce] * max_jobs, lease, budget)
        if claims:  # nothing claimed: the nonce is not spent
            self.ledger[claim_nonce] = tuple((claim.job_id, claim.generation) for claim in claims)
        return claims

    def _claim(self, queues: list[str], owner_id: str, claim_tokens: list[str],
               lease: timedelta | None, budget: timedelta | None) -> list[Claim]:
        """The next claimable jobs, one per token, in claim order (the ledger is the caller's)."""
        pending = sorted((row for row in self.rows.values() if self.claimable(row, queues)),
                         key=lambda row: (-row.priority, self._due_at(row), row.queued))
        claims = []
        for row, token in zip(pending, claim_tokens):
            row.status, row.owner_id, row.claim_token = "claimed", owner_id, token
            if row.claims_left is not None:
                row.claims_left -= 1
            row.generation += 1
            row.attempts += 1
            row.lease = lease or self._queue(row.queue).lease
            row.lease_expires_at = self.now() + row.lease
            row.budget_expires_at = None if budget is None else self.now() + budget
            self._event(row, "claimed", {"attempt": row.attempts}, self._held_by(row))
            claims.append(self._claim_of(row))
        return claims

    def claim_next(self, queues: list[str], owner_id: str, claim_token: str, lease: timedelta | None = None,
                   budget: timedelta | None = None) -> Claim | None:
        claims = self.claim_batch(queues, owner_id, [claim_token], lease, budget)
        return claims[0] if claims else None

    def recover_claim(self, owner_id: str, claim_token: str) -> list[Claim]:
        """Every claim made with the token or nonce that is still live, in
        claim order (``run`` gives recover_claim's ROW-shaped call the first)."""
        live = (self._live(job_id, owner_id, generation, claim_token)
                for job_id, generation in self.ledger.get(claim_token, ()))
        return [self._claim_of(row) for row in live if row is not None]

    def heartbeat(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                  lease: timedelta | None = None) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None:
            return False
        row.lease_expires_at = self.now() + (lease or row.lease or DEFAULT_LEASE)
        if row.budget_expires_at is not None:
            row.lease_expires_at = min(row.lease_expires_at, row.budget_expires_at)
        return True

    def progress(self, job_id: str, owner_id: str, generation: int, claim_token: str, progress: str) -> bool:
        renewed = self.heartbeat(job_id, owner_id, generation, claim_token)
        if renewed:
            self.rows[job_id].progress = json.loads(progress)
        return renewed

    def heartbeat_batch(self, job_ids: list[str], owner_ids: list[str], generations: list[int],
                        claim_tokens: list[str], lease: timedelta | None = None) -> list[bool]:
        return [self.heartbeat(*fence, lease=lease) for fence in zip(job_ids, owner_ids, generations, claim_tokens)]

    def complete(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                 result: str | None = None) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None:
            return False
        self._event(row, "completed", {}, self._held_by(row))
        row.status, row.lease_expires_at, row.finished_at = "completed", None, self.now()
        row.result = None if result is None else json.loads(result)
        for dependent in self._dependents(row):
            if dependent.status == "pending" and not self._blocked(dependent):
                # Due from now on (or from the run_at it asked for, if later), as on the database.
                dependent.run_at, dependent.queued = max(self._due_at(dependent), self.now()), next(self._queued)
                self._event(dependent, "unblocked", {}, UNCLAIMED)
        return True

    def complete_batch(self, job_ids: list[str], owner_ids: list[str], generations: list[int],
                       claim_tokens: list[str], results: list[str | None] | None = None) -> list[bool]:
        results = results or [None] * len(job_ids)
        return [self.complete(*fence, result=result)
                for fence, result in zip(zip(job_ids, owner_ids, generations, claim_tokens), results)]

    def fail(self, job_id: str, owner_id: str, generation: int, claim_token: str, error: str, retry: bool,
             retry_at: datetime | None = None) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None:
            return False
        self._retry_or_fail(row, error, retry, retry_at)
        return True

    def _retry_or_fail(self, row: Row, error: str, retry: bool, retry_at: datetime | None) -> str:
        """A claimed job's attempt failed: pending again at ``retry_at`` (else
        after the back-off) while attempts are left and ``retry``, else failed."""
        fence = self._held_by(row)
        row.last_error, row.lease_expires_at = error, None
        if retry and row.attempts < row.max_attempts:
            row.status, row.owner_id, row.queued = "pending", None, next(self._queued)
            row.run_at = retry_at or self.now() + self._backoff(row)
            self._event(row, "retried", {"error": error[:ERROR_IN_EVENT], "retry_at": _time(row.run_at)}, fence)
            return "pending"
        self._event(row, "failed", {"error": error[:ERROR_IN_EVENT]}, fence)
        self._finish(row, "failed")
        return "failed"

    def next_due(self, queues: list[str]) -> datetime | None:
        due = [row.run_at or datetime.min.replace(tzinfo=timezone.utc) for row in self.rows.values()
               if row.status == "pending" and row.queue in queues]
        return min(due, default=None)

    def extend(self, job_id: str, owner_id: str, generation: int, claim_token: str, budget: timedelta) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None:
            return False
        row.budget_expires_at = max(row.budget_expires_at or self.now() + budget, self.now() + budget)
        row.lease_expires_at = min(self.now() + (row.lease or DEFAULT_LEASE), row.budget_expires_at)
        return True

    def release(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                run_at: datetime | None = None) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None or row.cancel_requested or self._live_dispatch(row) is not None:
            return False
        fence = self._held_by(row)
        row.status, row.owner_id, row.lease_expires_at = "pending", None, None
        row.run_at, row.queued = run_at or self.now(), next(self._queued)
        row.attempts -= 1  # a release spends no attempt
        self._event(row, "released", {"run_at": _time(row.run_at)}, fence)
        return True

    def checkpoint(self, job_id: str, owner_id: str, generation: int, claim_token: str, step: str,
                   value: str) -> Any:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None:
            return None
        row.checkpoints.setdefault(step, json.loads(value))
        row.lease_expires_at = self.now() + (row.lease or DEFAULT_LEASE)
        return row.checkpoints[step]

    def set_pid(self, job_id: str, owner_id: str, generation: int, claim_token: str, pid: int) -> bool:
        return self._live(job_id, owner_id, generation, claim_token) is not None

    def claim_state(self, job_id: str, owner_id: str, generation: int, claim_token: str) -> ClaimState | None:
        row = self._live(job_id, owner_id, generation, claim_token)
        return None if row is None else ClaimState(cancel_requested=row.cancel_requested, pid=None)

    def acknowledge_cancel(self, job_id: str, owner_id: str, generation: int, claim_token: str) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None or not row.cancel_requested:
            return False
        self._event(row, "cancelled", {"reason": "acknowledged"}, self._held_by(row))
        self._finish(row, "cancelled")
        return True

    def reap(self, max_rows: int | None = None) -> ReapResult:
        """Lapsed claims without a live dispatch, oldest first: cancelled when
        their cancel was requested, else retried (due as the queue's
        requeue_priority says) or failed like a failure."""
        lapsed = sorted((row for row in self.rows.values() if self._lapsed(row) and self._live_dispatch(row) is None),
                        key=lambda row: row.lease_expires_at)[:max_rows or REAP_ROWS]
        outcomes: Counter[str] = Counter()
        for row in lapsed:
            fence = self._held_by(row)
            self._event(row, "reaped", {"lease_expires_at": _time(row.lease_expires_at)}, fence)
            if row.cancel_requested:
                self._event(row, "cancelled", {"reason": "reaped"}, fence)
                self._finish(row, "cancelled")
                outcomes["cancelled"] += 1
            else:
                outcomes[self._retry_or_fail(row, "lease_expired", True, self._requeue_at(row))] += 1
        return ReapResult(requeued=outcomes["pending"], failed=outcomes["failed"],
                          cancelled=outcomes["cancelled"], expired=0)

    def _requeue_at(self, row: Row) -> datetime | None:
        """When a job reap requeues is due (docs/design-v6.md): None for keep
        (the back-off); first: ahead of every pending job of its queue and
        priority; last: after the back-off and behind them all."""
        order = self._queue(row.queue).requeue_priority
        if order == "keep":
            return None
        due = [self._due_at(other) for other in self.rows.values()
               if other.status == "pending" and other.queue == row.queue and other.priority == row.priority
               and not self._blocked(other)]
        if order == "first":
            return min([self.now()] + [moment - MICROSECOND for moment in due])
        return max([self.now() + self._backoff(row)] + [moment + MICROSECOND for moment in due])

    def _backoff(self, row: Row) -> timedelta:
        """The delay before a retry of the job's latest attempt: the queue's
        base * factor^(attempt - 1), at most its max (``retry_backoff`` for
        a queue not declared)."""
        settings = self.queues.get(row.queue)
        if settings is None:
            return self.retry_backoff
        base, longest = settings.backoff_base.total_seconds(), settings.backoff_max.total_seconds()
        exponent = max(row.attempts - 1, 0)
        if base <= 0:
            return timedelta(0)
        if math.log(base) + exponent * math.log(settings.backoff_factor) >= math.log(longest):
            return settings.backoff_max
        return timedelta(seconds=base * settings.backoff_factor ** exponent)

    def _lapsed(self, row: Row) -> bool:
        return row.status == "claimed" and row.lease_expires_at is not None and row.lease_expires_at <= self.now()

    # External dispatches ---------------------------------------------------------

    def _live_dispatch(self, row: Row) -> DispatchRow | None:
        dispatch = self.dispatch_rows.get(row.job_id)
        if dispatch is None or row.status != "claimed" or dispatch.generation != row.generation:
            return None
        return dispatch

    def reserve_dispatch(self, job_id: str, owner_id: str, generation: int, claim_token: str, backend: str,
                         reservation_ref: str) -> bool:
        row = self._live(job_id, owner_id, generation, claim_token)
        if row is None or row.cancel_requested:
            return False
        dispatch = self._live_dispatch(row)
        if dispatch is None:
            self.dispatch_rows[job_id] = DispatchRow(backend, generation, reservation_ref)
            self._event(row, "dispatch_reserved", {"backend": backend, "reservation_ref": reservation_ref},
                        self._held_by(row))
            return True
        if (dispatch.backend, dispatch.reservation_ref) != (backend, reservation_ref):
            raise fenceq_error("QF305")
        return True

    def _fenced_dispatch(self, job_id: str, owner_id: str, generation: int, claim_token: str) -> DispatchRow | None:
        row = self._live(job_id, owner_id, generation, claim_token)
        return None if row is None else self._live_dispatch(row)

    def _dispatch_event(self, job_id: str, event: str, dispatch: DispatchRow, **detail: str) -> None:
        """An event of a live claim's dispatch call (its fence holds the job)."""
        row = self.rows[job_id]
        self._event(row, event, {"backend": dispatch.backend, **detail}, self._held_by(row))

    def finalize_dispatch(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                          reservation_ref: str, execution_ref: str) -> bool:
        dispatch = self._fenced_dispatch(job_id, owner_id, generation, claim_token)
        if dispatch is None or dispatch.reservation_ref != reservation_ref:
            return False
        if dispatch.state == "running":
            return dispatch.execution_ref == execution_ref
        dispatch.state, dispatch.execution_ref = "running", execution_ref
        self._dispatch_event(job_id, "dispatch_finalized", dispatch, reservation_ref=reservation_ref,
                             execution_ref=execution_ref)
        return True

    def release_dispatch(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                         reservation_ref: str) -> bool:
        dispatch = self._fenced_dispatch(job_id, owner_id, generation, claim_token)
        if dispatch is None or dispatch.state != "reserved" or dispatch.reservation_ref != reservation_ref:
            return False
        del self.dispatch_rows[job_id]
        self._dispatch_event(job_id, "dispatch_released", dispatch, reservation_ref=reservation_ref)
        return True

    def replace_dispatch_ref(self, job_id: str, owner_id: str, generation: int, claim_token: str,
                             expected_ref: str, execution_ref: str) -> bool:
        dispatch = self._fenced_dispatch(job_id, owner_id, generation, claim_token)
        if dispatch is None or dispatch.state != "running" or dispatch.execution_ref not in (expected_ref,
                                                                                           execution_ref):
            return False
        if dispatch.execution_ref != execution_ref:  # else a retried call: nothing written
            dispatch.execution_ref = execution_ref
            self._dispatch_event(job_id, "dispatch_replaced", dispatch, expected_ref=expected_ref,
                                 execution_ref=execution_ref)
        return True

    def adopt_dispatch(self, job_id: str, backend: str, expected_ref: str, owner_id: str, claim_token: str,
                       lease: timedelta | None = None) -> Claim | None:
        row = self.rows.get(job_id)
        dispatch = None if row is None or not self._lapsed(row) else self._live_dispatch(row)
        if dispatch is None or dispatch.backend != backend or dispatch.ref != expected_ref:
            return None
        if claim_token in self.ledger:
            raise fenceq_error("QF301")
        previous_owner_id = row.owner_id
        row.generation += 1
        row.owner_id, row.claim_token = owner_id, claim_token
        row.lease = lease or row.lease or DEFAULT_LEASE
        row.lease_expires_at = self.now() + row.lease
        dispatch.generation = row.generation
        self.ledger[claim_token] = ((job_id, row.generation),)
        self._event(row, "dispatch_adopted", {"backend": backend, "ref": expected_ref,
                                              "previous_owner_id": previous_owner_id}, self._held_by(row))
        return self._claim_of(row)

    def dispatch_repair_candidates(self, backend: str, max_rows: int | None = None) -> list[DispatchCandidate]:
        lapsed = [(row, dispatch) for row in self.rows.values()
                  if self._lapsed(row) and (dispatch := self._live_dispatch(row)) is not None
                  and dispatch.backend == backend]
        lapsed.sort(key=lambda pair: (pair[1].checked_at is not None, pair[1].checked_at or pair[0].lease_expires_at,
                                      pair[0].job_id))
        candidates = []
        for row, dispatch in lapsed[:max_rows or 100]:
            dispatch.checked_at = max(dispatch.checked_at or self.now(), self.now())
            candidates.append(DispatchCandidate(job_id=row.job_id, queue=row.queue, task=row.task,
                                                state=dispatch.state, ref=dispatch.ref, generation=row.generation,
                                                lapsed_at=row.lease_expires_at, checked_at=dispatch.checked_at))
        return candidates

    def dispatches(self, backend: str | None, after_job_id: str, limit: int) -> list[Dispatch]:
        live = sorted(((row, dispatch) for row in self.rows.values() if row.job_id > after_job_id
                       and (dispatch := self._live_dispatch(row)) is not None and backend in (None, dispatch.backend)),
                      key=lambda pair: pair[0].job_id)
        return [Dispatch(job_id=row.job_id, queue=row.queue, backend=dispatch.backend, state=dispatch.state,
                         reservation_ref=dispatch.reservation_ref, execution_ref=dispatch.execution_ref,
                         owner_id=row.owner_id or "", generation=row.generation,
                         lease_expires_at=row.lease_expires_at, checked_at=dispatch.checked_at)
                for row, dispatch in live[:limit]]

    def get_job(self, job_id: str) -> Job | None:
        row = self.rows.get(job_id)
        if row is None:
            return None
        return Job(job_id=row.job_id, queue=row.queue, task=row.task, payload=row.payload, priority=row.priority,
                   status=row.status, attempts=row.attempts, max_attempts=row.max_attempts,
                   run_at=row.run_at or row.created_at or self.now(),
                   expires_at=None, owner_id=row.owner_id, generation=row.generation,
                   lease_expires_at=row.lease_expires_at, budget_expires_at=row.budget_expires_at,
                   cancel_requested=row.cancel_requested, pid=None, result=row.result, last_error=row.last_error,
                   submission_id=row.submission_id, fingerprint=None, active_key=row.active_key, dlq_id=None,
                   created_at=row.created_at or self.now(), finished_at=row.finished_at, progress=row.progress)

    # Producers and operators ------------------------------------------------------

    def submit_request(self, queue: str, task: str, payload: str | None = None, submission_id: str | None = None,
                       job_id: str | None = None, priority: int | None = None, run_at: datetime | None = None,
                       expires_at: datetime | None = None, max_attempts: int | None = None,
                       active_key: str | None = None, force: bool = False, concurrency_key: str | None = None,
                       depends_on: Sequence[str] | None = None) -> str:
        """The ``submit`` operation (``payload`` is its canonical JSON text)."""
        for option, value in (("expires_at", expires_at), ("force", force), ("concurrency_key", concurrency_key)):
            if value:
                raise config_error("QF100", f"the in-memory backend does not model {option}: "
                                   "test it against a database (fenceq_postgres)")
        request = (queue, task, payload, job_id, priority, run_at, max_attempts, active_key, tuple(depends_on or ()))
        if submission_id is not None and submission_id in self._submissions:
            kept_id, kept_request = self._submissions[submission_id]
            if kept_request != request:
                raise fenceq_error("QF201")
            return kept_id
        if job_id is not None and job_id in self.rows:
            raise fenceq_error("QF203")
        if active_key is not None and any(row.queue == queue and row.active_key == active_key
                                          and row.status in ("pending", "claimed") for row in self.rows.values()):
            raise fenceq_error("QF202")
        unknown = [each for each in depends_on or () if each not in self.rows]
        if unknown:
            raise config_error("QF100", "a dependency names no job")
        new_id = job_id or f"job-{next(self._ids)}"
        row = Row(new_id, queue, task, None if payload is None else json.loads(payload),
                  max_attempts or self._queue(queue).max_attempts, run_at=run_at, priority=priority or 0,
                  submission_id=submission_id, active_key=active_key, depends_on=tuple(depends_on or ()),
                  claims_left=self.new_claims_left, created_at=self.now(), queued=next(self._queued))
        self.rows[new_id] = row
        if submission_id is not None:
            self._submissions[submission_id] = (new_id, request)
        self._submitted(row)
        if any(self.rows[each].status in ("failed", "cancelled", "expired") for each in row.depends_on):
            row.last_error = "dependency_failed"  # stored cancelled: it never was anything else (no event)
            self._finish(row, "cancelled")
        elif self.capabilities.notifications:
            self.notify(JOBS_CHANNEL, queue)
        return new_id

    def submit_batch_request(self, queue: str, requests: Sequence[SubmitRequest]) -> list[str]:
        """The ``submit_batch`` operation (its requests already validated)."""
        return [self.submit_request(queue, request.task, request.payload_value, request.submission_id,
                                    request.job_id, request.priority, request.run_at, request.expires_at,
                                    request.max_attempts, request.active_key, request.force,
                                    request.concurrency_key, request.depends_on)
                for request in requests]

    def cancel(self, job_id: str, force: bool = False) -> str | None:
        row = self.rows.get(job_id)
        if row is None or row.status in FINISHED:
            return None if row is None else row.status
        if row.status == "pending" or force:
            self._event(row, "cancelled", {"reason": "force" if row.status == "claimed" else "cancel"},
                        self._held_by(row))
            self._finish(row, "cancelled")
            answer = "cancelled"
        else:
            if not row.cancel_requested:  # a repeated request is no transition
                self._event(row, "cancel_requested", {}, self._held_by(row))
            row.cancel_requested = True
            answer = "cancel_requested"
        if self.capabilities.notifications:
            self.notify(CONTROL_CHANNEL, job_id)
        return answer

    def _finish(self, row: Row, status: str) -> None:
        """A job ends other than completed: so do its dependents (``dependency_failed``)."""
        row.status, row.lease_expires_at, row.finished_at = status, None, self.now()
        for dependent in self._dependents(row):
            if dependent.status in ("pending", "claimed"):
                dependent.last_error = "dependency_failed"
                self._event(dependent, "cancelled", {"reason": "dependency_failed"}, self._held_by(dependent))
                self._finish(dependent, "cancelled")

    def _dependents(self, row: Row) -> list[Row]:
        return [dependent for dependent in self.rows.values() if row.job_id in dependent.depends_on]

    # Queues and history -----------------------------------------------------------

    def _queue(self, queue: str) -> QueueRow:
        return self.queues.get(queue) or QueueRow()

    def _declared(self, queue: str) -> QueueRow:
        """The queue's settings to change (a queue not declared yet has the defaults)."""
        return self.queues.setdefault(queue, QueueRow())

    @staticmethod
    def _checked(settings: QueueRow) -> QueueRow:
        if settings.backoff_max < settings.backoff_base:
            raise config_error("QF105", "backoff_max must not be less than backoff_base")
        return settings

    def create_queue(self, queue: str, **settings: Any) -> bool:
        asked = self._checked(replace(QueueRow(), **settings))
        if queue not in self.queues:
            self.queues[queue] = asked
            return True
        kept = self.queues[queue]
        # requeue_priority left out (NULL) matches any setting of an existing queue.
        compared = [name for name in QUEUE_SETTINGS if name != "requeue_priority" or "requeue_priority" in settings]
        if any(getattr(kept, name) != getattr(asked, name) for name in compared):
            raise config_error("QF100", "the queue exists with other settings; use alter_queue")
        return False

    def alter_queue(self, queue: str, **settings: Any) -> None:
        changed = self._checked(replace(self._declared(queue), **{name: value for name, value in settings.items()
                                                                  if value is not None}))
        self.queues[queue] = changed

    def set_queue_history(self, queue: str, enabled: bool, retention: timedelta | None = None) -> bool:
        settings = self._declared(queue)
        if (settings.history, settings.history_retention) == (enabled, retention):
            return False
        settings.history, settings.history_retention = enabled, retention
        return True

    def get_job_events(self, job_id: str) -> list[JobEvent]:
        return [event for event in self.events if event.job_id == job_id]

    def _held_by(self, row: Row) -> tuple[int | None, str | None]:
        """The generation and owner an event of the job names now: its claim's, or none."""
        return (row.generation, row.owner_id) if row.status == "claimed" else UNCLAIMED

    def _event(self, row: Row, event: str, detail: dict[str, Any], by: tuple[int | None, str | None]) -> None:
        """One transition of a job, recorded when its queue keeps a history."""
        if not self._queue(row.queue).history:
            return
        generation, owner_id = by
        self.events.append(JobEvent(job_id=row.job_id, seq=next(self._seq), at=self.now(), event=event,
                                    generation=generation if owner_id is not None else None, owner_id=owner_id,
                                    detail=detail))

    def _submitted(self, row: Row) -> None:
        # The run_at it asked for, also while it waits on dependencies (as get_job shows it).
        self._event(row, "submitted", {"priority": row.priority, "run_at": _time(self._due_at(row))}, UNCLAIMED)
