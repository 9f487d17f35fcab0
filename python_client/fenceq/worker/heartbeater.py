"""Heartbeats: one loop renews every in-flight job every lease ×
``heartbeat_fraction``, in one ``heartbeat_batch`` for all jobs due within
half a period. Each job keeps a local deadline (send time of its last
renewal + lease) so that after a pause the handler knows at once that its
lease may be gone. A job whose handler reported progress (``ctx.progress``)
is renewed by writing its latest report with ``progress`` instead, which
renews the lease as a heartbeat does: one write per job per beat either
way."""

from __future__ import annotations

import logging

from typing import Any

from ..errors import PersistenceFailed
from .context import NO_REPORT
from .fenced_writer import FencedWriter, Verdict
from .pool import Pool
from .state import InFlight, WorkerState

IDLE_CHECK = 5.0  # seconds: the longest sleep; a new job wakes the loop anyway


class Heartbeater:
    def __init__(self, state: WorkerState, pool: Pool, writer: FencedWriter):
        self._state = state
        self._pool = pool
        self._writer = writer

    async def run(self) -> None:
        state = self._state
        while True:
            state.heartbeat_wake.clear()
            delay = await self.tick()
            if delay > 0:
                delay = min(max(delay, 0.001), IDLE_CHECK)
                state.next_beat_at = state.clock.monotonic() + delay
                await state.clock.wait(state.heartbeat_wake, delay)
                state.next_beat_at = float("-inf")  # awake: a job joining now needs no wake-up

    async def tick(self) -> float:
        """Renew the jobs that are due; the seconds until the next one is."""
        settings, now = self._state.settings, self._state.clock.monotonic()
        jobs = [j for j in self._state.inflight.values() if not j.lost.is_set() and not j.abandoned]
        if not jobs:
            return IDLE_CHECK
        due = min(j.next_heartbeat for j in jobs)
        if due > now:
            return due - now
        # Jobs due within half a period go along, so renewals stay in step.
        await self._send([j for j in jobs if j.next_heartbeat <= now + j.lease * settings.heartbeat_fraction / 2])
        return 0.0

    async def _send(self, batch: list[InFlight]) -> None:
        state = self._state
        fraction, clock = state.settings.heartbeat_fraction, state.clock
        lease = state.settings.lease_delta
        sent = clock.monotonic()
        reports = {job: report for job in batch if (report := _take_report(job)) is not NO_REPORT}
        beats = [job for job in batch if job not in reports]
        answers: dict[InFlight, bool] = {}
        try:
            async with self._pool.client() as client:
                for job, report in reports.items():
                    answers[job] = await client.progress(job.fence, report)
                if len(beats) == 1:
                    answers[beats[0]] = await client.heartbeat(beats[0].fence, lease=lease)
                elif beats:
                    answers.update(zip(beats, await client.heartbeat_batch([j.fence for j in beats], lease=lease)))
        except PersistenceFailed:
            state.events.emit("heartbeat_failed", "heartbeat could not reach the database; retrying",
                              level=logging.WARNING, jobs=len(batch) - len(answers))
            for job in batch:
                if job not in answers:
                    job.next_heartbeat = clock.monotonic() + min(0.25, job.lease * fraction / 2)
                    if job in reports:
                        job.ctx.pending_progress.put_back(reports[job])
        for job, ok in answers.items():
            if ok:
                job.renewed(sent, fraction)
            elif not (job.settling or job.completing):
                write = "progress" if job in reports else "heartbeat"
                state.lose(job, f"{write} refused: the lease lapsed or the job was taken over")
            else:
                job.next_heartbeat = float("inf")

    async def beat_now(self, job: InFlight) -> bool:
        """A handler's ``ctx.heartbeat()``: renew this job now."""
        sent = self._state.clock.monotonic()
        verdict = await self._writer.heartbeat(job)
        if verdict is Verdict.ACCEPTED:
            job.renewed(sent, self._state.settings.heartbeat_fraction)
            return True
        if verdict is Verdict.REFUSED:
            self._state.lose(job, "heartbeat refused")
        return False


def _take_report(job: InFlight) -> Any:
    """The job's waiting progress report; none once its handler is done
    (the outcome supersedes it)."""
    if job.ctx is None or job.settling:
        return NO_REPORT
    return job.ctx.pending_progress.take()
