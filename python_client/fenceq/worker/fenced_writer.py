"""The uncertain-write protocol: every write a worker makes for a job
carries the claim's fence, and is re-sent unchanged while its outcome is
unknown (a fenced write is idempotent: a second copy of one that landed is
refused). When a re-sent write is refused, the job row tells whether an
earlier copy landed and only the acknowledgement was lost.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from ..errors import PersistenceFailed
from ..types import Job
from .pool import Pool
from .state import InFlight, WorkerState

Call = Callable[[Any], Awaitable[Any]]   # client -> the write's answer
Landed = Callable[[Job], bool]           # does the job row show this write took effect?


class Verdict(enum.Enum):
    ACCEPTED = "accepted"    # the database answered yes
    LANDED = "landed"        # a re-sent copy was refused, but the job shows an earlier copy took effect
    REFUSED = "refused"      # the fence is stale (or the write does not apply to the job any more)
    ABANDONED = "abandoned"  # the database stayed unreachable: outcome unknown, given up

    @property
    def took_effect(self) -> bool:
        return self in (Verdict.ACCEPTED, Verdict.LANDED)


@dataclass(frozen=True)
class Delivery:
    """The answer to a write sent until the database answered."""
    value: Any
    resent: bool   # an earlier copy's outcome was unknown


@dataclass(frozen=True)
class Checkpointed:
    verdict: Verdict
    value: Any = None  # the value recorded for the step (possibly an earlier claim's)


# What each write leaves in the job row when it lands.

def completed_by(job: InFlight) -> Landed:
    fence = job.fence
    return lambda row: (row.status == "completed" and row.generation == fence.generation
                        and row.owner_id == fence.owner_id)


def failed_by(job: InFlight, error: str) -> Landed:
    fence = job.fence
    return lambda row: (row.generation == fence.generation and row.last_error == error[:65536]
                        and row.status in ("pending", "failed"))


def cancelled_by(job: InFlight) -> Landed:
    fence = job.fence
    return lambda row: row.status == "cancelled" and row.generation == fence.generation


def released_by(job: InFlight) -> Landed:
    fence = job.fence
    return lambda row: (row.status == "pending" and row.generation == fence.generation
                        and row.last_error != "lease_expired")


class FencedWriter:
    def __init__(self, state: WorkerState, pool: Pool):
        self._state = state
        self._pool = pool

    async def send(self, job: InFlight | None, what: str, call: Call, *,
                   abandon_on_hard_stop: bool = False,
                   on_resend: Callable[[], None] | None = None) -> Delivery | None:
        """Send ``call`` until the database answers; None once it stayed
        unreachable for max(2 × lease, 10 s) (or at once on a stop without
        drain, with ``abandon_on_hard_stop``): the lease then lapses and
        reap hands the job on. ``on_resend`` is called when the first
        copy's outcome is unknown, before the first re-send."""
        clock, events = self._state.clock, self._state.events
        fields = job.fields if job is not None else {}
        delay, resent = 0.05, False
        limit = clock.monotonic() + (max(2 * job.lease, 10.0) if job is not None else 10.0)
        while True:
            try:
                async with self._pool.client() as client:
                    return Delivery(await call(client), resent)
            except PersistenceFailed:
                if not resent and on_resend is not None:
                    on_resend()
                resent = True
                if clock.monotonic() > limit or (abandon_on_hard_stop and self._state.hard_stop):
                    events.emit("write_abandoned", f"{what}: the database stayed unreachable; giving up "
                                "(the lease will lapse and reap hands the job on)", level=logging.ERROR, **fields)
                    return None
                events.emit("write_uncertain", f"{what}: outcome unknown; re-sending the same fenced write",
                            level=logging.WARNING, **fields)
                await clock.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def write(self, job: InFlight, what: str, call: Call, landed: Landed | None = None, *,
                    abandon_on_hard_stop: bool = False,
                    on_resend: Callable[[], None] | None = None) -> Verdict:
        """A fenced write answered yes or no."""
        delivery = await self.send(job, what, call, abandon_on_hard_stop=abandon_on_hard_stop,
                                   on_resend=on_resend)
        if delivery is None:
            return Verdict.ABANDONED
        if delivery.value:
            return Verdict.ACCEPTED
        if delivery.resent and landed is not None and await self.landed(job, what, landed):
            return Verdict.LANDED
        return Verdict.REFUSED

    async def landed(self, job: InFlight, what: str, landed: Landed) -> bool:
        current = await self.read_job(job)
        if current is None or not landed(current):
            return False
        self._state.events.emit("ack_recovered", f"{what}'s acknowledgement was lost; the job shows "
                                "this claim's write", level=logging.WARNING, **job.fields)
        return True

    async def read_job(self, job: InFlight) -> Job | None:
        """The job row, or None when the database could not be reached."""
        for _ in range(5):
            try:
                async with self._pool.client() as client:
                    return await client.get_job(job.fence.job_id)
            except PersistenceFailed:
                await self._state.clock.sleep(0.1)
        return None

    # The fenced writes -----------------------------------------------------------

    async def complete(self, job: InFlight, result: Any,
                       on_resend: Callable[[], None] | None = None) -> Verdict:
        return await self.write(job, "complete", lambda c: c.complete(job.fence, result), completed_by(job),
                                on_resend=on_resend)

    async def complete_batch(self, jobs: Sequence[InFlight], results: Sequence[Any],
                             on_resend: Callable[[], None] | None = None) -> list[Verdict]:
        fences, checked = [j.fence for j in jobs], list(results)
        delivery = await self.send(None, "complete_batch", lambda c: c.complete_batch(fences, checked),
                                   on_resend=on_resend)
        if delivery is None:
            return [Verdict.ABANDONED] * len(jobs)
        verdicts = []
        for job, answer in zip(jobs, delivery.value):
            if answer:
                verdicts.append(Verdict.ACCEPTED)
            elif delivery.resent and await self.landed(job, "complete", completed_by(job)):
                verdicts.append(Verdict.LANDED)
            else:
                verdicts.append(Verdict.REFUSED)
        return verdicts

    async def fail(self, job: InFlight, error: str, retry: bool) -> Verdict:
        return await self.write(job, "fail", lambda c: c.fail(job.fence, error, retry=retry),
                                failed_by(job, error))

    async def acknowledge_cancel(self, job: InFlight) -> Verdict:
        return await self.write(job, "acknowledge_cancel", lambda c: c.acknowledge_cancel(job.fence),
                                cancelled_by(job))

    async def release(self, job: InFlight) -> Verdict:
        return await self.write(job, "release", lambda c: c.release(job.fence), released_by(job),
                                abandon_on_hard_stop=True)

    async def heartbeat(self, job: InFlight) -> Verdict:
        lease = self._state.settings.lease_delta
        return await self.write(job, "heartbeat", lambda c: c.heartbeat(job.fence, lease=lease))

    async def checkpoint(self, job: InFlight, step: str, value: Any) -> Checkpointed:
        delivery = await self.send(job, "checkpoint", lambda c: c.checkpoint(job.fence, step, value))
        if delivery is None:
            return Checkpointed(Verdict.ABANDONED)
        if delivery.value is None:  # SQL NULL: no live fence, nothing recorded
            return Checkpointed(Verdict.REFUSED)
        return Checkpointed(Verdict.ACCEPTED, delivery.value)
