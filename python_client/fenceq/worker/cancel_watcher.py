"""Cancel requests: every ``control_poll`` a running job's ``claim_state`` is
read (and any held job's, on a control notification, through the notifier);
a buffered job's request is seen once it runs, or by its heartbeats. A request
sets ``ctx.cancelled``; an async handler still running ``cancel_grace``
later is cancelled. A claim with no state left was force-cancelled or
taken over: the handler is told it is lost."""

from __future__ import annotations

import logging

from ..errors import PersistenceFailed
from .fenced_writer import FencedWriter
from .pool import Pool
from .state import InFlight, WorkerState


class CancelWatcher:
    def __init__(self, state: WorkerState, pool: Pool, writer: FencedWriter):
        self._state = state
        self._pool = pool
        self._writer = writer

    async def run(self) -> None:
        state = self._state
        assert state.settings.control_poll is not None
        while True:
            await state.clock.sleep(state.settings.control_poll)
            for job in list(state.inflight.values()):
                if (job.task is not None and not job.cancelled.is_set() and not job.lost.is_set()
                        and not job.settling):
                    await self.check(job)

    async def check(self, job: InFlight) -> None:
        """Read the job's claim state now."""
        state = self._state
        try:
            async with self._pool.client() as client:
                claim_state = await client.claim_state(job.fence)
        except PersistenceFailed:
            return
        if job.settling or job.abandoned or state.inflight.get(job.fence.job_id) is not job:
            return
        if claim_state is None:
            current = await self._writer.read_job(job)
            if job.settling or job.abandoned:
                return
            if current is not None and current.status == "cancelled":
                self._cancelled(job, forced=True)
            state.lose(job, "the claim is no longer live")
            return
        if claim_state.cancel_requested:
            self._cancelled(job)

    def _cancelled(self, job: InFlight, forced: bool = False) -> None:
        if job.cancelled.is_set():
            return
        job.cancelled.set()
        settings = self._state.settings
        self._state.events.emit("cancel_requested", "cancel requested; the handler is told"
                                + (" (forced: the fence is already dead)" if forced else ""), **job.fields)
        if job.is_async and settings.cancel_grace is not None and job.task is not None:
            self._state.spawn(self._cancel_after_grace(job, settings.cancel_grace))

    async def _cancel_after_grace(self, job: InFlight, grace: float) -> None:
        await self._state.clock.sleep(grace)
        if job.task is not None and not job.task.done() and not job.settling:
            self._state.events.emit("cancel_enforced", "async handler ignored the cancel request; cancelling it",
                                    level=logging.WARNING, **job.fields)
            job.task.cancel()
