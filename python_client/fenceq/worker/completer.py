"""Completion, batched: results wait in a queue and go out as one
``complete_batch`` with whatever queued up while the previous call was in
flight (optionally after ``complete_window``). A job hands its result over
and is done with it: the completer tells the settler each job's verdict
(``Answered``), so no job's task waits on a call. A call whose outcome
became unknown is re-sent by the fenced writer on its own: the results
queued behind it go out meanwhile, instead of waiting for the database to
answer it."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable

from ..validate import CheckedJSON
from .fenced_writer import FencedWriter, Verdict
from .settings import MAX_BATCH
from .state import InFlight, WorkerState

Resend = Callable[[], None]   # told when a call's outcome is unknown and it will be re-sent
# Told each job's verdict, or the error that kept its completion from being written.
Answered = Callable[[InFlight, "Verdict | BaseException"], None]


class Completer:
    def __init__(self, state: WorkerState, writer: FencedWriter, answered: Answered):
        self._state = state
        self._writer = writer
        self._answered = answered
        self._waiting: deque[tuple[InFlight, CheckedJSON | None]] = deque()  # a job and its result
        self._arrived = asyncio.Event()

    def add(self, job: InFlight, result: CheckedJSON | None) -> None:
        """Queue a job's completion (its result checked, None for null)."""
        self._waiting.append((job, result))
        self._arrived.set()

    async def run(self) -> None:
        window = self._state.settings.complete_window
        waiting, arrived = self._waiting, self._arrived
        flights: set[asyncio.Task] = set()
        try:
            while True:
                if not waiting:
                    arrived.clear()
                    await arrived.wait()
                if window:
                    await self._state.clock.sleep(window)
                batch = [waiting.popleft() for _ in range(min(len(waiting), MAX_BATCH))]
                resending = asyncio.Event()
                flight = asyncio.create_task(self._send(batch, resending.set))
                flights.add(flight)
                flight.add_done_callback(flights.discard)
                # The next batch gathers while this one is in flight; it goes
                # out when this one is answered, or once this one is re-sent.
                waiting_for_resend = asyncio.create_task(resending.wait())
                try:
                    await asyncio.wait((flight, waiting_for_resend), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiting_for_resend.cancel()
        finally:
            for flight in flights:
                flight.cancel()

    async def _send(self, batch: list[tuple[InFlight, CheckedJSON | None]], on_resend: Resend) -> None:
        jobs = [job for job, _ in batch]
        try:
            verdicts: list[Verdict | BaseException] = list(
                await self._writer.complete_batch(jobs, [result for _, result in batch], on_resend))
        except Exception as error:  # noqa: BLE001 - handed to each job's settle
            verdicts = [error] * len(jobs)
        for job, verdict in zip(jobs, verdicts):
            self._answered(job, verdict)

