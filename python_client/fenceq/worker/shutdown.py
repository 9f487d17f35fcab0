"""Stopping: no new claims, the buffered jobs released at once (never
started here), ``ctx.stopping`` set, up to ``drain_timeout`` for running
handlers, then ``release`` of every unfinished job (back to pending at once,
no attempt spent; its fence dies, so the abandoned handler's writes are
refused). A second request skips the wait."""

from __future__ import annotations

import asyncio
import logging

from .fenced_writer import FencedWriter, Verdict
from .settler import Settler, Standing
from .state import InFlight, WorkerState

SETTLING_GRACE = 5.0  # seconds for outcomes already being written to land


class Shutdown:
    def __init__(self, state: WorkerState, writer: FencedWriter, settler: Settler):
        self._state = state
        self._writer = writer
        self._settler = settler

    def request(self, now: bool) -> None:
        """A stop request (a signal, ``Worker.stop``); on the loop only."""
        state = self._state
        first = not state.stop_requested
        state.stop_requested = True
        state.hard_stop = state.hard_stop or now or not first
        state.events.emit("stopping", "stop requested: no new claims; draining" if first and not state.hard_stop
                          else "stop requested again: releasing unfinished jobs now",
                          in_flight=len(state.inflight), drain_timeout=state.settings.drain_timeout)
        for job in state.inflight.values():
            job.stopping.set()
        state.wake.set()
        if state.hard_stop:
            state.idle.set()

    async def drain(self) -> None:
        state, clock = self._state, self._state.clock
        if not state.inflight:
            return
        buffered = list(state.buffer)
        state.buffer.clear()
        giving_back = asyncio.gather(*(self._release(job) for job in buffered))
        for job in state.inflight.values():
            job.stopping.set()
        timeout = state.settings.drain_timeout
        if not state.hard_stop and timeout:
            state.events.emit("draining", "waiting for running jobs", in_flight=len(state.inflight),
                              timeout=timeout)
            deadline = clock.monotonic() + timeout
            while state.inflight and not state.hard_stop and clock.monotonic() < deadline:
                state.idle.clear()
                await clock.wait(state.idle, deadline - clock.monotonic())
        unfinished = [j for j in state.inflight.values() if not j.settling and j.task is not None]
        for job in unfinished:
            job.abandoned = True
            job.lost.set()
            if job.task is not None:
                job.task.cancel()
        if unfinished:
            state.events.emit("drain_timeout", "releasing unfinished jobs", jobs=len(unfinished),
                              level=logging.WARNING)
        await asyncio.gather(giving_back, *(self._release(job) for job in unfinished))
        grace_ends = clock.monotonic() + SETTLING_GRACE
        while state.inflight and clock.monotonic() < grace_ends:  # outcomes still being written
            state.idle.clear()
            await clock.wait(state.idle, grace_ends - clock.monotonic())

    async def _release(self, job: InFlight) -> None:
        state = self._state
        verdict = await self._writer.release(job)
        if verdict.took_effect:
            state.counts["released"] += 1
            state.events.emit("released", "job released unfinished (no attempt spent)", **job.fields)
        elif verdict is Verdict.REFUSED and await self._settler.standing(job) is not Standing.CANCEL_REQUESTED:
            # A cancel-requested job cannot be released; standing() acknowledged it.
            state.events.emit("release_refused", "release refused: the fence is stale",
                              level=logging.WARNING, **job.fields)
        state.finish(job)
