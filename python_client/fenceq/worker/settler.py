"""Writing a handler's outcome under the fence: complete (through the
completer), fail (retry or not), acknowledge a cancel request; and, when the
database says no, finding out why (a cancel request, or a stale fence).
Every job leaves the worker here (``WorkerState.finish``): once its outcome
is written, or, for a batched completion, once the completer tells its
verdict (``answered``)."""

from __future__ import annotations

import enum
import logging
from typing import Any, Coroutine

from ..errors import ConfigError, PersistenceFailed
from ..validate import CheckedJSON
from .completer import Completer
from .fenced_writer import FencedWriter, Verdict
from .outcome import Cancelled, Committed, Completed, Dispatched, Failed, Lost, Outcome
from .pool import Pool
from .state import InFlight, WorkerState


class Standing(enum.Enum):
    """Where a claim stands after the database refused one of its writes."""
    CANCEL_REQUESTED = "cancel_requested"  # a cancel request is pending (now acknowledged)
    LIVE = "live"                          # the claim stands, with no cancel request
    GONE = "gone"                          # no claim state: the fence is stale (or the database is unreachable)


class Settler:
    def __init__(self, state: WorkerState, pool: Pool, writer: FencedWriter):
        self._state = state
        self._pool = pool
        self._writer = writer
        self.completer = Completer(state, writer, self.answered)

    def hand_over(self, job: InFlight, outcome: Outcome) -> bool:
        """A completion to batch goes to the completer, which finishes the
        job once answered (True); anything else needs ``settle`` (False)."""
        if (type(outcome) is not Completed or not self._state.settings.batch_completions
                or job.cancelled.is_set() or job.abandoned):
            return False
        result = outcome.result
        if result is not None:  # null needs no check (a no-op handler's result)
            try:
                result = CheckedJSON(result, "result")
            except ConfigError:
                return False  # settle fails the job: its result is not storable
        self.completer.add(job, result)
        return True

    async def settle(self, job: InFlight, outcome: Outcome) -> None:
        """Write the outcome; the job leaves the worker once it is written."""
        if job.abandoned:
            return  # the drain releases it
        try:
            await self._write(job, outcome)
        finally:
            self._state.finish(job)

    def answered(self, job: InFlight, verdict: Verdict | BaseException) -> None:
        """A batched completion's verdict (or the error that kept it from being written)."""
        if verdict is Verdict.ACCEPTED or verdict is Verdict.LANDED:  # took effect
            self._completed(job)
            self._state.finish(job)
        elif verdict is Verdict.REFUSED:
            self._state.spawn(self._finish_after(job, self._refused(job, "complete")))
        else:
            if isinstance(verdict, BaseException):
                self._state.events.emit("settle_error", f"writing the outcome failed: {verdict!r}",
                                        level=logging.ERROR, **job.fields)
            self._state.finish(job)

    async def _finish_after(self, job: InFlight, writing: Coroutine[Any, Any, None]) -> None:
        try:
            await writing
        finally:
            self._state.finish(job)

    def _bad_result(self, job: InFlight, error: ConfigError) -> str:
        """The result is not storable JSON: no retry would fix it."""
        self._state.events.emit("bad_result", f"handler result refused: {error}", level=logging.ERROR,
                                **job.fields)
        return f"the handler's result could not be stored: {error}"

    async def _write(self, job: InFlight, outcome: Outcome) -> None:
        if isinstance(outcome, Committed):
            self._completed(job, in_transaction=True)
            return
        if isinstance(outcome, Dispatched):
            self._left_running_externally(job, outcome)
            return
        if job.cancelled.is_set() and not isinstance(outcome, Lost):
            await self.acknowledge(job)
            return
        match outcome:
            case Completed(result):
                await self._complete(job, result)
            case Failed(error, retry):
                await self._fail(job, error, retry)
            case Lost():
                self._state.counts["lost"] += 1
                self._state.events.emit("lease_lost", "handler stopped: the claim is no longer live "
                                        "(nothing written)", level=logging.WARNING, **job.fields)
            case Cancelled():
                await self._cancelled_unasked(job)

    async def _complete(self, job: InFlight, result: object) -> None:
        try:
            verdict = await self._writer.complete(job, result)
        except ConfigError as error:
            await self._fail(job, self._bad_result(job, error), False)
            return
        if verdict.took_effect:
            self._completed(job)
        elif verdict is Verdict.REFUSED:
            await self._refused(job, "complete")

    def _completed(self, job: InFlight, in_transaction: bool = False) -> None:
        state = self._state
        state.counts["completed"] += 1
        if state.events.wanted(logging.INFO):
            state.events.emit("completed", "job completed" + (" with its transaction" if in_transaction else ""),
                              **job.fields, seconds=round(state.clock.monotonic() - job.started, 3),
                              in_transaction=in_transaction)

    def _left_running_externally(self, job: InFlight, outcome: Dispatched) -> None:
        """Nothing is written: the claim stays, unrenewed, until its lease
        lapses and a reconciler adopts it (also after a cancel request: the
        reconciler stops the external work, then acknowledges)."""
        job.next_heartbeat = float("inf")
        self._state.counts["dispatched"] += 1
        self._state.events.emit("dispatched", "job left running externally: its lease lapses and a reconciler "
                                "adopts it", **job.fields, reservation_ref=job.reservation_ref,
                                execution_ref=outcome.execution_ref)

    async def _fail(self, job: InFlight, error: str, retry: bool) -> None:
        state = self._state
        verdict = await self._writer.fail(job, error, retry)
        if verdict is Verdict.REFUSED:
            await self._refused(job, "fail")
        if not verdict.took_effect:
            return
        after = await self._writer.read_job(job)
        generation = job.fence.generation
        if retry and after is not None and (after.status != "failed" or after.generation != generation):
            state.counts["retried"] += 1
            state.events.emit("retry_scheduled", "job failed; retry scheduled", level=logging.WARNING,
                              **job.fields, run_at=after.run_at.isoformat() if after.status == "pending" else None)
        else:
            state.counts["failed"] += 1
            dlq_id = None if after is None else after.dlq_id
            state.events.emit("failed", "job failed for good" + (" and was dead-lettered" if dlq_id else ""),
                              level=logging.WARNING, **job.fields, retry=retry, dlq_id=dlq_id)

    async def acknowledge(self, job: InFlight) -> None:
        state = self._state
        verdict = await self._writer.acknowledge_cancel(job)
        if verdict.took_effect:
            state.counts["cancelled"] += 1
            state.events.emit("cancelled", "cancel acknowledged: job cancelled", **job.fields)
            return
        if verdict is Verdict.ABANDONED:
            return
        current = await self._writer.read_job(job)
        if current is not None and current.status == "cancelled":
            state.counts["cancelled"] += 1
            state.events.emit("cancelled", "job was cancelled (forced)", **job.fields)
            return
        job.lost.set()
        state.counts["refused"] += 1
        state.events.emit("acknowledge_refused", "acknowledge_cancel refused: the fence is stale",
                          level=logging.WARNING, **job.fields,
                          current_status=None if current is None else current.status,
                          current_generation=None if current is None else current.generation)

    async def standing(self, job: InFlight) -> Standing:
        """Read the claim's state; a pending cancel request is acknowledged."""
        try:
            async with self._pool.client() as client:
                claim_state = await client.claim_state(job.fence)
        except PersistenceFailed:
            return Standing.GONE
        if claim_state is None:
            return Standing.GONE
        if not claim_state.cancel_requested:
            return Standing.LIVE
        job.cancelled.set()
        await self.acknowledge(job)
        return Standing.CANCEL_REQUESTED

    async def _refused(self, job: InFlight, what: str) -> None:
        """The database answered no to a fenced write: find out why."""
        if await self.standing(job) is not Standing.CANCEL_REQUESTED:
            await self._stale(job, what)

    async def _cancelled_unasked(self, job: InFlight) -> None:
        """JobCancelled without a cancel request this worker knows of."""
        standing = await self.standing(job)
        if standing is Standing.GONE:
            await self._stale(job, "cancel")
        elif standing is Standing.LIVE:
            verdict = await self._writer.write(job, "fail", lambda c: c.fail(
                job.fence, "the handler raised JobCancelled without a cancel request", retry=False))
            self._state.events.emit("failed", "handler gave up (JobCancelled without a request)",
                                    level=logging.WARNING, **job.fields, written=verdict.took_effect)

    async def _stale(self, job: InFlight, what: str) -> None:
        state = self._state
        job.lost.set()
        state.counts["refused"] += 1
        current = await self._writer.read_job(job)
        state.events.emit(f"{what}_refused", f"{what} refused: this claim's fence is stale "
                          "(its lease lapsed, or the job was taken over or cancelled)",
                          level=logging.WARNING, **job.fields,
                          current_status=None if current is None else current.status,
                          current_generation=None if current is None else current.generation,
                          current_owner=None if current is None else current.owner_id)
