"""A pure-Python model of docs/guarantees.md, for the lockstep test
(tests/model/test_model.py): what each call must answer and how it changes
the jobs, claims, submission identities, dead letters, schedules and locks.

Jobs are named by handles (0, 1, ...): each engine gives a job its own id
when the caller names none, and the test maps handles to those ids.

Time. The model has no clock of its own: every lease or ttl is either long
(an hour: never lapses within an example) or short (lapsed before the next
step, because the test sleeps past the expiry the engines answered). Due
times are kept as ``(seconds, step)`` keys: an explicit timestamp, or the
local clock read before the step that set "now" (the test keeps steps apart
in time, so their order is the engines' order).

External execution (§19). A claim's dispatch is live while its job is
claimed at the dispatch's generation; a record an earlier claim left stays
unread until the next reservation or the purge. A claim lapses with a
dispatch only by a short heartbeat (a short claim lapses before anything
could reserve under it); reap leaves it claimed, and adopt_dispatch takes it
over. The repair page's order is modelled: never-checked rows by the step
that set their (equally short) lease, then by the step of their last check;
rows checked by the same call tie, and each engine breaks the tie by its own
job ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("completed", "failed", "cancelled", "expired")
MAX_DEPENDENCY_DEPTH = 16


class Refused(Exception):
    """The call raises this SQLSTATE."""

    def __init__(self, sqlstate: str):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class Request:
    """One submit call as written (depends_on as job handles)."""

    queue: str
    task: str
    payload: Any
    submission_id: str | None
    job_id: str | None
    priority: int | None
    run_at: float | None        # explicit timestamp (epoch seconds) or None = now
    expires_at: float | None
    max_attempts: int | None
    active_key: str | None
    force: bool
    depends_on: tuple[int, ...]

    def same_as(self, other: "Request") -> bool:
        """Same fingerprint (§4): the dependencies as a set."""
        return self._key() == other._key()

    def _key(self) -> tuple:
        return (self.queue, self.task, self.payload, self.submission_id,
                self.job_id, self.priority, self.run_at, self.expires_at, self.max_attempts, self.active_key,
                self.force, frozenset(self.depends_on))


@dataclass
class Queue:
    max_attempts: int
    dead_letter: bool
    paused: bool = False


@dataclass
class Letter:
    handled: bool = False
    ids: dict = field(default_factory=dict)     # engine -> dlq_id


@dataclass
class Dispatch:
    backend: str
    generation: int               # the claim it belongs to
    reservation_ref: str
    state: str = "reserved"
    execution_ref: str | None = None
    checked_step: int | None = None   # the step of the last repair page that returned it

    @property
    def recorded_ref(self) -> str:
        """What adopt_dispatch expects and the repair page shows."""
        return self.reservation_ref if self.state == "reserved" else self.execution_ref


@dataclass
class Job:
    handle: int
    request: Request | None      # None for a job a schedule submitted
    queue: str
    task: str
    payload: Any
    priority: int
    max_attempts: int
    explicit_id: str | None
    submission_id: str | None
    active_key: str | None
    seq: int                      # submission order
    due: tuple | None             # None: due later (an hour ahead) or waiting on dependencies
    asked_due: tuple | None       # what the request asked for, for a freed dependent
    expires_past: bool            # expires_at lies in the past
    status: str = "pending"
    attempts: int = 0
    generation: int = 0
    owner: str | None = None
    token: str | None = None
    short_lease: bool = False
    lease_step: int = 0           # the step that set the lease: orders lapsed claims
    cancel_requested: bool = False
    pid: int | None = None
    result: Any = None
    last_error: str | None = None
    progress: Any = None
    checkpoints: dict = field(default_factory=dict)
    waiting_on: set = field(default_factory=set)
    depends_on: tuple = ()
    depth: int = 0
    letters: list = field(default_factory=list)
    purged: bool = False
    stored_cancelled: bool = False  # cancelled by its own submit: a dependency had failed
    dispatch: Dispatch | None = None
    claims: list = field(default_factory=list)   # (generation, owner) of each claim: the attempts view

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True)
class Fence:
    handle: int
    owner: str
    generation: int
    token: str


@dataclass
class Lock:
    last_token: int = 0
    owner: str | None = None
    token: int | None = None
    short: bool = False           # the hold lapses before the next step

    def live(self) -> bool:
        return self.owner is not None and not self.short


@dataclass
class Schedule:
    queue: str
    task: str
    payload: Any
    paused: bool
    last_occurrence: float | None = None


class Model:
    def __init__(self, queues: dict[str, Queue]):
        self.queues = queues
        self.jobs: list[Job] = []
        self.identities: dict[str, tuple[Request, int]] = {}   # submission id -> (request, job handle)
        self.ledger: dict[str, tuple[int, ...]] = {}            # claim token or call nonce -> job handles
        self.locks: dict[str, Lock] = {}
        self.schedules: dict[str, Schedule] = {}
        self.seq = 0

    # Reads ---------------------------------------------------------------
    def live_jobs(self) -> list[Job]:
        return [j for j in self.jobs if not j.purged]

    def by_explicit_id(self, job_id: str) -> Job | None:
        for job in self.live_jobs():
            if job.explicit_id == job_id:
                return job
        return None

    def live(self, fence: Fence) -> Job | None:
        job = self.jobs[fence.handle]
        if (job.purged or job.status != "claimed" or job.short_lease or job.owner != fence.owner
                or job.generation != fence.generation or job.token != fence.token):
            return None
        return job

    def live_dispatch(self, job: Job) -> Dispatch | None:
        dispatch = job.dispatch
        if dispatch is None or job.purged or job.status != "claimed" or dispatch.generation != job.generation:
            return None
        return dispatch

    def active_holder(self, queue: str, key: str | None) -> Job | None:
        if key is None:
            return None
        for job in self.live_jobs():
            if job.queue == queue and job.active_key == key and job.status in ("pending", "claimed"):
                return job
        return None

    # Producers -------------------------------------------------------------
    def submit(self, request: Request, now: tuple) -> tuple[int, bool]:
        """(job handle, created) or Refused."""
        # The order of the checks is the engines' (sql/postgres/040_submit.sql).
        deps = [self.jobs[h] for h in dict.fromkeys(request.depends_on)]
        if request.job_id is not None and any(d.explicit_id == request.job_id for d in deps):
            raise Refused("QF100")      # a self-dependency
        if request.submission_id is not None and request.submission_id in self.identities:
            kept, handle = self.identities[request.submission_id]
            if kept.same_as(request):
                return handle, False
            raise Refused("QF201")
        if request.job_id is not None and self._job_id_reserved(request.job_id):
            raise Refused("QF203")
        if any(d.purged for d in deps):
            raise Refused("QF100")
        depth = 1 + max((d.depth for d in deps), default=-1)
        if deps and depth > MAX_DEPENDENCY_DEPTH:
            raise Refused("QF100")
        # A job stored cancelled (a dependency failed already) holds no key:
        # it neither waits for the key's holder nor replaces it. A job forced
        # over its own dependency (the key's holder, cancelled by the force)
        # is stored cancelled too (§16; finding M1, fixed in version 5).
        failed_before = [d.status in ("failed", "cancelled", "expired") for d in deps]
        waiting_before = {d.handle for d in deps if d.status != "completed"}
        holder = None if any(failed_before) else self.active_holder(request.queue, request.active_key)
        if holder is not None and not request.force:
            raise Refused("QF202")
        if holder is not None:
            self._cancel_now(holder, None, now)
            failed_before.append(holder.handle in {d.handle for d in deps})
        queue = self.queues[request.queue]
        asked = (request.run_at, 0) if request.run_at is not None else now
        job = Job(handle=len(self.jobs), request=request, queue=request.queue, task=request.task,
                  payload=request.payload, priority=request.priority or 0,
                  max_attempts=request.max_attempts or queue.max_attempts, explicit_id=request.job_id,
                  submission_id=request.submission_id, active_key=request.active_key, seq=self._next_seq(),
                  due=self._due(asked, now), asked_due=asked,
                  expires_past=request.expires_at is not None and request.expires_at < now[0],
                  depends_on=tuple(d.handle for d in deps), depth=depth if deps else 0)
        self.jobs.append(job)
        if request.submission_id is not None:
            self.identities[request.submission_id] = (request, job.handle)
        if any(failed_before):
            job.status = "cancelled"
            job.last_error = "dependency_failed"
            job.active_key = None       # stored terminal: it never held the key
            job.stored_cancelled = True
        else:
            job.waiting_on = waiting_before
            if job.waiting_on:
                job.due = None
        return job.handle, True

    def _job_id_reserved(self, job_id: str) -> bool:
        if self.by_explicit_id(job_id) is not None:
            return True
        return any(self.jobs[h].explicit_id == job_id for _, h in self.identities.values())

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @staticmethod
    def _due(key: tuple, now: tuple) -> tuple | None:
        """A due key, or None for a time ahead (an hour: never due here)."""
        return None if key[0] > now[0] else key

    # Workers -------------------------------------------------------------------
    def claim(self, queues: list[str], owner: str, token: str, short: bool, now: tuple) -> Job | None:
        jobs = self.claim_jobs(queues, owner, token, 1, short, now)
        return jobs[0] if jobs else None

    def claim_jobs(self, queues: list[str], owner: str, nonce: str, max_jobs: int, short: bool,
                   now: tuple) -> list[Job]:
        """Up to max_jobs claims under one nonce (claim_next's rules; one
        token is a call of one)."""
        if nonce in self.ledger:
            raise Refused("QF301")
        eligible = sorted((j for j in self.live_jobs()
                           if j.queue in queues and j.status == "pending" and j.due is not None
                           and j.due <= now and not j.waiting_on and not j.expires_past
                           and not self.queues[j.queue].paused),
                          key=lambda j: (-j.priority, j.due, j.seq))[:max_jobs]
        for job in eligible:
            job.status = "claimed"
            job.attempts += 1
            job.generation += 1
            job.owner, job.token, job.short_lease, job.lease_step = owner, nonce, short, now[1]
            job.cancel_requested = False
            job.claims.append((job.generation, owner))
        if eligible:
            self.ledger[nonce] = tuple(job.handle for job in eligible)
        return eligible

    def recover(self, owner: str, token: str) -> list[Job]:
        """The live claims of this token or call nonce, in claim order."""
        found = []
        for handle in self.ledger.get(token, ()):
            job = self.jobs[handle]
            if job.token == token and self.live(Fence(handle, owner, job.generation, token)):
                found.append(job)
        return found

    def renew(self, fence: Fence, short: bool, now: tuple) -> bool:
        """A heartbeat; a short one lets the claim lapse before the next step."""
        job = self.live(fence)
        if job is None:
            return False
        if short:
            job.short_lease, job.lease_step = True, now[1]
        return True

    def checkpoint(self, fence: Fence, step: str, value: Any) -> Any:
        job = self.live(fence)
        if job is None:
            return None
        return job.checkpoints.setdefault(step, value)

    def report_progress(self, fence: Fence, value: Any) -> bool:
        job = self.live(fence)
        if job is None:
            return False
        job.progress = value
        return True

    def complete(self, fence: Fence, result: Any, now: tuple) -> bool:
        job = self.live(fence)
        if job is None or job.cancel_requested:
            return False
        job.status, job.result = "completed", result
        for dependent in self.live_jobs():
            if job.handle in dependent.waiting_on and dependent.status == "pending":
                dependent.waiting_on.discard(job.handle)
                if not dependent.waiting_on:
                    dependent.due = self._due(max(dependent.asked_due, now), now)
        return True

    def fail(self, fence: Fence, error: str, retry: bool, retry_later: bool, now: tuple) -> bool:
        job = self.live(fence)
        if job is None or job.cancel_requested:
            return False
        job.last_error = error
        if retry and job.attempts < job.max_attempts:
            self._to_pending(job, None if retry_later else now)
        else:
            self._fail_for_good(job, now)
        return True

    def release(self, fence: Fence, later: bool, now: tuple) -> bool:
        job = self.live(fence)
        # Work handed to another system may exist: never requeued.
        if job is None or job.cancel_requested or self.live_dispatch(job) is not None:
            return False
        job.attempts -= 1
        self._to_pending(job, None if later else now)
        return True

    def acknowledge_cancel(self, fence: Fence, now: tuple) -> bool:
        job = self.live(fence)
        if job is None or not job.cancel_requested:
            return False
        job.pid = None
        self._finish(job, "cancelled", now)
        return True

    def claim_state(self, fence: Fence) -> tuple | None:
        job = self.live(fence)
        return None if job is None else (job.cancel_requested, job.pid)

    def set_pid(self, fence: Fence, pid: int) -> bool:
        job = self.live(fence)
        if job is None or job.cancel_requested:
            return False
        job.pid = pid
        return True

    def reap(self, now: tuple) -> tuple[int, int, int, int]:
        requeued = failed = cancelled = 0
        for job in list(self.live_jobs()):
            if job.status == "claimed" and job.short_lease and self.live_dispatch(job) is None:
                if job.cancel_requested:
                    self._finish(job, "cancelled", now)
                    cancelled += 1
                elif job.attempts < job.max_attempts:
                    job.last_error = "lease_expired"
                    self._to_pending(job, now)
                    requeued += 1
                else:
                    job.last_error = "lease_expired"
                    self._fail_for_good(job, now)
                    failed += 1
        # Every overdue pending job expires at once (one statement), and only
        # then are their dependents cancelled: an overdue job that depends on
        # another overdue one expires too, rather than being cancelled.
        overdue = [job for job in self.live_jobs() if job.status == "pending" and job.expires_past]
        for job in overdue:
            job.status = "expired"
        for job in overdue:
            self._finish(job, "expired", now)
        return requeued, failed, cancelled, len(overdue)

    # External execution (§19) ---------------------------------------------------
    def reserve_dispatch(self, fence: Fence, backend: str, reservation_ref: str) -> bool:
        job = self.live(fence)
        if job is None or job.cancel_requested:
            return False
        dispatch = self.live_dispatch(job)
        if dispatch is not None:
            if (dispatch.backend, dispatch.reservation_ref) == (backend, reservation_ref):
                return True
            raise Refused("QF305")
        job.dispatch = Dispatch(backend, job.generation, reservation_ref)
        return True

    def fenced_dispatch(self, fence: Fence) -> Dispatch | None:
        """The live dispatch of a live fence's claim."""
        job = self.live(fence)
        return None if job is None else self.live_dispatch(job)

    def finalize_dispatch(self, fence: Fence, reservation_ref: str, execution_ref: str) -> bool:
        dispatch = self.fenced_dispatch(fence)
        if dispatch is None or dispatch.reservation_ref != reservation_ref:
            return False
        if dispatch.state == "running":
            return dispatch.execution_ref == execution_ref
        dispatch.state, dispatch.execution_ref = "running", execution_ref
        return True

    def release_dispatch(self, fence: Fence, reservation_ref: str) -> bool:
        dispatch = self.fenced_dispatch(fence)
        if dispatch is None or dispatch.state != "reserved" or dispatch.reservation_ref != reservation_ref:
            return False
        self.jobs[fence.handle].dispatch = None
        return True

    def replace_dispatch_ref(self, fence: Fence, expected_ref: str, execution_ref: str) -> bool:
        dispatch = self.fenced_dispatch(fence)
        if dispatch is None or dispatch.state != "running":
            return False
        if dispatch.execution_ref == execution_ref:
            return True
        if dispatch.execution_ref != expected_ref:
            return False
        dispatch.execution_ref = execution_ref
        return True

    def adopt_dispatch(self, handle: int, backend: str, expected_ref: str, owner: str, token: str,
                       short: bool, now: tuple) -> Job | None:
        """A claim of a lapsed, dispatched job: generation + 1, no attempt
        counted, the cancel request kept."""
        job = self.jobs[handle]
        if job.status != "claimed" or not job.short_lease:
            return None
        dispatch = self.live_dispatch(job)
        if dispatch is None or dispatch.backend != backend or dispatch.recorded_ref != expected_ref:
            return None
        if token in self.ledger:
            raise Refused("QF301")
        job.generation += 1
        job.owner, job.token, job.short_lease, job.lease_step, job.pid = owner, token, short, now[1], None
        dispatch.generation = job.generation
        self.ledger[token] = (job.handle,)
        job.claims.append((job.generation, owner))
        return job

    def lapsed_dispatches(self, backend: str) -> list[Job]:
        """Every job whose repair page row would be this backend's, in the
        page's order (ties by handle here; see repair_key)."""
        lapsed = [job for job in self.live_jobs() if job.status == "claimed" and job.short_lease
                  and (dispatch := self.live_dispatch(job)) is not None and dispatch.backend == backend]
        return sorted(lapsed, key=lambda job: (self.repair_key(job), job.handle))

    def repair_key(self, job: Job) -> tuple:
        """Never checked first, by when the claim lapsed; then by the last check."""
        checked = job.dispatch.checked_step
        return (0, job.lease_step) if checked is None else (1, checked)

    def dispatch_repair_candidates(self, backend: str, max_rows: int, now: tuple) -> list[Job]:
        page = self.lapsed_dispatches(backend)[:max_rows]
        for job in page:
            job.dispatch.checked_step = now[1]
        return page

    # Operators -------------------------------------------------------------
    def cancel(self, handle: int, force: bool, now: tuple) -> str | None:
        job = self.jobs[handle]
        if job.purged:
            return None
        if job.terminal:
            return job.status
        if job.status == "pending" or force:
            self._cancel_now(job, None, now)
            return "cancelled"
        job.cancel_requested = True
        return "cancel_requested"

    def purge(self, forget_identities: bool) -> int:
        purged = 0
        for job in self.live_jobs():
            if job.terminal and all(letter.handled for letter in job.letters):
                job.purged = True
                purged += 1
        # A ledger entry goes with the last of its jobs.
        for token in [t for t, hs in self.ledger.items() if all(self.jobs[h].purged for h in hs)]:
            del self.ledger[token]
        if forget_identities:
            for sid in [s for s, (_, h) in self.identities.items() if self.jobs[h].purged]:
                del self.identities[sid]
        return purged

    def replay_dead_letter(self, handle: int, index: int, now: tuple) -> bool:
        job = self.jobs[handle]
        letter = job.letters[index]
        if letter.handled or job.purged:
            return False
        letter.handled = True
        job.status, job.attempts = "pending", 0
        job.due = now
        return True

    def discard_dead_letter(self, handle: int, index: int) -> bool:
        letter = self.jobs[handle].letters[index]
        if letter.handled or self.jobs[handle].purged:
            return False
        letter.handled = True
        return True

    def pause(self, queue: str, paused: bool) -> bool:
        changed = self.queues[queue].paused != paused
        self.queues[queue].paused = paused
        return changed

    # Locks (§15) ---------------------------------------------------------------
    def acquire_lock(self, name: str, owner: str, short: bool) -> int | None:
        lock = self.locks.setdefault(name, Lock())
        if lock.live():
            if lock.owner != owner:
                return None
            lock.short = short
            return lock.token
        lock.last_token += 1
        lock.owner, lock.token, lock.short = owner, lock.last_token, short
        return lock.token

    def renew_lock(self, name: str, owner: str, token: int, short: bool) -> bool:
        lock = self.locks.get(name)
        if lock is None or not lock.live() or lock.owner != owner or lock.token != token:
            return False
        lock.short = short
        return True

    def release_lock(self, name: str, owner: str, token: int) -> bool:
        lock = self.locks.get(name)
        if lock is None or not lock.live() or lock.owner != owner or lock.token != token:
            return False
        lock.owner = lock.token = None
        return True

    def check_lock(self, name: str, token: int) -> bool:
        lock = self.locks.get(name)
        return lock is not None and lock.live() and lock.token == token

    # Schedules (§14) -----------------------------------------------------------
    def set_schedule(self, name: str, queue: str, task: str, payload: Any, paused: bool) -> bool:
        old = self.schedules.get(name)
        if old is not None and (old.queue, old.task, old.payload, old.paused) == (queue, task, payload, paused):
            return False
        self.schedules[name] = Schedule(queue, task, payload, paused,
                                        old.last_occurrence if old is not None else None)
        return True

    def tick_submit(self, name: str, occurrence: float) -> int:
        """The job a tick submits for this occurrence of the schedule."""
        schedule = self.schedules[name]
        schedule.last_occurrence = occurrence
        queue = self.queues[schedule.queue]
        job = Job(handle=len(self.jobs), request=None, queue=schedule.queue, task=schedule.task,
                  payload=schedule.payload, priority=0, max_attempts=queue.max_attempts, explicit_id=None,
                  submission_id=None, active_key=None, seq=self._next_seq(), due=(occurrence, 0),
                  asked_due=(occurrence, 0), expires_past=False)
        self.jobs.append(job)
        return job.handle

    # Transitions ------------------------------------------------------------
    def _to_pending(self, job: Job, due: tuple | None) -> None:
        job.status, job.owner, job.pid = "pending", None, None
        job.short_lease = False
        job.cancel_requested = False
        job.due = due

    def _fail_for_good(self, job: Job, now: tuple) -> None:
        if self.queues[job.queue].dead_letter:
            job.letters.append(Letter())
        self._finish(job, "failed", now)

    def _cancel_now(self, job: Job, error: str | None, now: tuple) -> None:
        if error is not None:
            job.last_error = error
        self._finish(job, "cancelled", now)

    def _finish(self, job: Job, status: str, now: tuple) -> None:
        job.status = status
        job.short_lease = False
        if status != "completed":
            self._cascade(job, now)

    def _cascade(self, job: Job, now: tuple) -> None:
        """§16: every job that depends on a job that did not complete,
        transitively, is cancelled with last_error dependency_failed. The
        engines walk the whole graph below the job, through dependents that
        are terminal already."""
        seen, below = {job.handle}, [job.handle]
        while below:
            handle = below.pop()
            for dependent in self.live_jobs():
                if handle in dependent.depends_on and dependent.handle not in seen:
                    seen.add(dependent.handle)
                    below.append(dependent.handle)
                    if not dependent.terminal:
                        dependent.status, dependent.last_error = "cancelled", "dependency_failed"
                        dependent.short_lease = False
