"""What the worker's units share: the jobs in flight, the wake-up events,
the stop request and the counts. Every unit gets this one object; none
reaches into another unit."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Coroutine

from ..types import Claim, Fence
from .clock import Clock
from .events import Events
from .settings import WorkerSettings

COUNTS = ("claimed", "completed", "failed", "retried", "cancelled", "released", "refused", "lost",
          "recovered_claims", "reaped", "server_switches", "dispatched")


class Flag:
    """One condition, visible to thread handlers (threading.Event) and to
    async handlers (asyncio.Event). Set only from the worker's loop. Each
    event is made when a handler's context first asks for it (in the
    loop), so a job pays only for the kind of handler it runs. Unset, a
    flag's state is its class's (no ``__init__``: three flags a job)."""

    _set = False
    _thread: threading.Event | None = None
    _loop: asyncio.Event | None = None

    def set(self) -> None:
        self._set = True
        if self._thread is not None:
            self._thread.set()
        if self._loop is not None:
            self._loop.set()

    def is_set(self) -> bool:
        return self._set

    @property
    def thread(self) -> threading.Event:
        if self._thread is None:
            self._thread = threading.Event()
            if self._set:
                self._thread.set()
        return self._thread

    @property
    def loop(self) -> asyncio.Event:
        if self._loop is None:
            self._loop = asyncio.Event()
            if self._set:
                self._loop.set()
        return self._loop


@dataclass(eq=False, slots=True)
class InFlight:
    """One claimed job while this worker holds it. Times are the clock's
    monotonic seconds."""

    claim: Claim
    lease: float                      # seconds: the lease length in force
    deadline: float                   # the lease is surely live before this
    budget_deadline: float            # inf without a budget
    next_heartbeat: float
    is_async: bool
    recorded: dict[str, Any]          # checkpoints: step -> value
    started: float                    # when its handler started (when it was claimed, while buffered)
    cancelled: Flag = field(default_factory=Flag)
    lost: Flag = field(default_factory=Flag)
    stopping: Flag = field(default_factory=Flag)
    task: asyncio.Task | None = None  # None while the job waits in the buffer
    settling: bool = False            # the handler is done; the outcome is being written
    abandoned: bool = False           # drain timed out: the job is being released
    completing: bool = False          # its ctx.transaction() is completing the job (or did)
    committed: bool = False           # its ctx.transaction() committed: the job is completed
    reservation_ref: str | None = None  # its ctx.dispatch reserved under this ref (None again once released)
    execution_ref: str | None = None    # ... and finalized with this one
    ctx: Any = None
    fence: Fence = field(init=False)  # the claim's, made once: every write of the job carries it

    def __post_init__(self) -> None:
        self.fence = self.claim.fence

    @property
    def fields(self) -> dict[str, Any]:
        return {"job_id": self.claim.job_id, "queue": self.claim.queue, "task": self.claim.task,
                "generation": self.claim.generation, "attempt": self.claim.attempt}

    def renewed(self, sent: float, heartbeat_fraction: float) -> None:
        """The database renewed the lease by a call sent at ``sent``."""
        self.deadline = min(sent + self.lease, self.budget_deadline)
        self.next_heartbeat = sent + self.lease * heartbeat_fraction

    def extended(self, sent: float, budget: float, heartbeat_fraction: float) -> None:
        """The database extended the budget (and renewed the lease) by a call
        sent at ``sent``: the budget now ends no earlier than sent + budget,
        since the database read its clock later."""
        self.budget_deadline = (sent + budget if self.budget_deadline == float("inf")
                                else max(self.budget_deadline, sent + budget))
        self.renewed(sent, heartbeat_fraction)


class WorkerState:
    """Every job this worker holds is in ``inflight``: claimed and waiting in
    ``buffer`` for a slot, running (``running`` of them), or settling (its
    handler is done; its outcome is being written)."""

    def __init__(self, settings: WorkerSettings, clock: Clock, events: Events, counts: dict[str, int]):
        self.settings = settings
        self._concurrency = settings.concurrency
        self.clock = clock
        self.events = events
        self.counts = counts
        self.inflight: dict[str, InFlight] = {}
        self.buffer: deque[InFlight] = deque()  # claimed ahead, oldest first
        self.running = 0                       # handlers running now
        self.prefetch = 0                      # jobs to hold claimed beyond the slots (the claimer sets it)
        self.finished = 0                      # jobs that left this worker, ever (the claimer's rate)
        self.wake = asyncio.Event()            # the claimer: room to claim, work arrived, or stop
        self.heartbeat_wake = asyncio.Event()  # the heartbeater: a job joined that is due before its next beat
        self.next_beat_at = float("inf")       # when the heartbeater wakes next, unless woken
        self.idle = asyncio.Event()            # the drain: nothing left in flight (or stop now)
        self.stop_requested = False
        self.hard_stop = False                 # skip the drain wait
        self._side_tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run a side task (cancelled when the worker stops)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    @property
    def side_tasks(self) -> list[asyncio.Task]:
        return list(self._side_tasks)

    def claim_room(self) -> int:
        """How many jobs the claimer may claim now: enough to fill the
        ``concurrency`` slots and a buffer of ``prefetch`` behind them. Jobs
        whose outcome is being written do not count, so the next claim
        overlaps the last completions, but at most as many of them as
        slots and buffer together are held besides (the database is not answering)."""
        limit = self._concurrency + self.prefetch
        return min(limit - self.running - len(self.buffer), 2 * limit - len(self.inflight))

    def claim_due(self) -> bool:
        """Whether the room is worth a claim call: one free slot without a
        buffer, else half the buffer, so that one call fetches many."""
        return self.claim_room() >= (self.prefetch >> 1 or 1)

    def finish(self, job: InFlight) -> None:
        """The job leaves this worker: its slot is free."""
        if self.inflight.get(job.claim.job_id) is job:
            del self.inflight[job.claim.job_id]
            self.finished += 1
        if not self.wake.is_set() and self.claim_due():
            self.wake.set()
        if not self.inflight:
            self.idle.set()

    def lose(self, job: InFlight, why: str) -> None:
        """The claim is no longer live: tell the handler, stop renewing it."""
        if job.lost.is_set():
            return
        job.lost.set()
        job.next_heartbeat = float("inf")
        self.events.emit("lease_lost", why, level=logging.WARNING, **job.fields)
