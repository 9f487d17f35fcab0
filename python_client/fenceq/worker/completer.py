"""Completion, batched: results wait in a queue and go out as one
``complete_batch`` with whatever queued up while the previous call was in
flight (optionally after ``complete_window``); a lone result goes out as
``complete``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .fenced_writer import FencedWriter, Verdict
from .settings import MAX_BATCH
from .state import InFlight, WorkerState


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
        while True:
            batch = [await self._queue.get()]
            if window:
                await self._state.clock.sleep(window)
            while not self._queue.empty() and len(batch) < MAX_BATCH:
                batch.append(self._queue.get_nowait())
            try:
                await self._flush(batch)
            except Exception as error:  # noqa: BLE001 - hand it to the waiting jobs
                for pending in batch:
                    if not pending.answer.done():
                        pending.answer.set_exception(error)

    async def _flush(self, batch: list[_Pending]) -> None:
        if len(batch) == 1:
            await self._complete_one(batch[0])
            return
        try:
            verdicts = await self._writer.complete_batch([p.job for p in batch], [p.result for p in batch])
        except ConfigError:
            # One result is not storable JSON: complete them one by one.
            await asyncio.gather(*(self._complete_one(pending) for pending in batch))
            return
        for pending, verdict in zip(batch, verdicts):
            if not pending.answer.done():
                pending.answer.set_result(verdict)

    async def _complete_one(self, pending: _Pending) -> None:
        try:
            verdict = await self._writer.complete(pending.job, pending.result)
        except BaseException as error:  # noqa: BLE001 - the job's settle decides
            if not pending.answer.done():
                pending.answer.set_exception(error)
            return
        if not pending.answer.done():
            pending.answer.set_result(verdict)
