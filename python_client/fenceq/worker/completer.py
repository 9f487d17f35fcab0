"""Completion, batched: results wait in a queue and go out as one
``complete_batch`` with whatever queued up while the previous call was in
flight (optionally after ``complete_window``); a lone result goes out as
``complete``. A call whose outcome became unknown is re-sent by the fenced
writer on its own: the results queued behind it go out meanwhile, instead
of waiting for the database to answer it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError
from .fenced_writer import FencedWriter, Verdict
from .settings import MAX_BATCH
from .state import InFlight, WorkerState


Resend = Callable[[], None]   # told when a call's outcome is unknown and it will be re-sent


@dataclass(eq=False)
class _Pending:
    job: InFlight
    result: Any
    answer: asyncio.Future   # of the Verdict


class Completer:
    def __init__(self, state: WorkerState, writer: FencedWriter):
        self._state = state
        self._writer = writer
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()

    async def complete(self, job: InFlight, result: Any) -> Verdict:
        """Raises ConfigError when the result is not storable JSON."""
        if not self._state.settings.batch_completions:
            return await self._writer.complete(job, result)
        pending = _Pending(job, result, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(pending)
        return await pending.answer

    async def run(self) -> None:
        window = self._state.settings.complete_window
        flights: set[asyncio.Task] = set()
        try:
            while True:
                batch = [await self._queue.get()]
                if window:
                    await self._state.clock.sleep(window)
                while not self._queue.empty() and len(batch) < MAX_BATCH:
                    batch.append(self._queue.get_nowait())
                resending = asyncio.Event()
                flight = asyncio.create_task(self._send(batch, resending.set))
                flights.add(flight)
                flight.add_done_callback(flights.discard)
                # The next batch gathers while this one is in flight; it goes
                # out when this one is answered, or once this one is re-sent.
                waiting = asyncio.create_task(resending.wait())
                try:
                    await asyncio.wait((flight, waiting), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiting.cancel()
        finally:
            for flight in flights:
                flight.cancel()

    async def _send(self, batch: list[_Pending], on_resend: Resend) -> None:
        try:
            await self._flush(batch, on_resend)
        except Exception as error:  # noqa: BLE001 - hand it to the waiting jobs
            for pending in batch:
                if not pending.answer.done():
                    pending.answer.set_exception(error)

    async def _flush(self, batch: list[_Pending], on_resend: Resend) -> None:
        if len(batch) == 1:
            await self._complete_one(batch[0], on_resend)
            return
        try:
            verdicts = await self._writer.complete_batch([p.job for p in batch], [p.result for p in batch],
                                                         on_resend)
        except ConfigError:
            # One result is not storable JSON: complete them one by one.
            await asyncio.gather(*(self._complete_one(pending, on_resend) for pending in batch))
            return
        for pending, verdict in zip(batch, verdicts):
            if not pending.answer.done():
                pending.answer.set_result(verdict)

    async def _complete_one(self, pending: _Pending, on_resend: Resend) -> None:
        try:
            verdict = await self._writer.complete(pending.job, pending.result, on_resend)
        except BaseException as error:  # noqa: BLE001 - the job's settle decides
            if not pending.answer.done():
                pending.answer.set_exception(error)
            return
        if not pending.answer.done():
            pending.answer.set_result(verdict)
