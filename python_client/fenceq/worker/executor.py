"""Running a claimed job: build its ``InFlight`` record and context, invoke
the handler (a plain function in a thread of its own, an ``async def`` on
the loop), turn how it ended into an ``Outcome`` and hand that to the
settler. The handler's own calls (checkpoint, heartbeat) come back here."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import queue
import threading
import traceback
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from ..errors import PersistenceFailed
from ..observability.tracing import handler_span
from ..types import Claim
from .context import AsyncJobContext, JobCancelled, JobContext, LeaseLost, NonRetryable
from .dispatch import Dispatcher
from .fenced_writer import FencedWriter, Verdict
from .heartbeater import Heartbeater
from .outcome import Cancelled, Committed, Completed, Dispatched, Failed, Lost, Outcome
from .pool import Pool
from .settler import Settler
from .state import InFlight, WorkerState
from .transaction import Transactions

Handler = Callable[[Any], Any]


@runtime_checkable
class Registry(Protocol):
    """What the runtime needs of an ``App``."""

    queues: list[str]

    @property
    def tasks(self) -> Mapping[str, Handler]: ...

    def handler(self, name: str) -> Handler | None: ...


class HandlerThreads:
    """Daemon threads for plain handlers, each kept for the next job rather
    than one started per job. Daemon, so that a handler that never returns
    (abandoned by a stop) cannot keep the process alive; a thread is added
    whenever none is free, so every running handler has one. A thread counts
    itself free before it hands over what its work returned, so the next job
    that the answer lets in finds it free. ``close`` lets every thread end
    once its handler (if any) returns."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any], None]] | None] = queue.SimpleQueue()
        self._threads = 0
        self._free = 0
        self._lock = threading.Lock()

    def run(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Run ``work`` on a kept thread, then call ``then`` with what it returned."""
        with self._lock:
            if self._free:
                self._free -= 1
            else:
                self._threads += 1
                threading.Thread(target=self._serve, name="fenceq-handler", daemon=True).start()
        self._work.put((work, then))

    def close(self) -> None:
        with self._lock:
            for _ in range(self._threads):
                self._work.put(None)
            self._threads = self._free = 0

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            work, then = item
            answer = work()
            with self._lock:
                self._free += 1
            then(answer)


def error_text(error: BaseException) -> str:
    """``Type: message`` and the traceback, bounded, for the job's last_error."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    head = f"{type(error).__name__}: {error}"
    if len(text) > 16000:
        text = text[:2000] + "\n…\n" + text[-12000:]
    return head + "\n\n" + text if text.strip() else head


class Executor:
    def __init__(self, state: WorkerState, registry: Registry, pool: Pool, writer: FencedWriter,
                 heartbeater: Heartbeater, settler: Settler):
        self._state = state
        self._registry = registry
        self._pool = pool
        self._writer = writer
        self._heartbeater = heartbeater
        self._settler = settler
        self._transactions = Transactions(state, pool, writer)
        self._dispatcher = Dispatcher(state, pool, writer)
        self._kinds: dict[str, tuple[Handler, bool]] = {}  # task -> its handler, and whether it is async
        self._slots = 0  # slot tasks running
        self._threads = HandlerThreads()
        # The last claim call's receipt (``_received``); NaN equals no send time.
        self._receipt: tuple[float, datetime | None, float, float] = (float("nan"), None, 0.0, 0.0)

    def _is_async(self, task: str, handler: Handler | None) -> bool:
        if handler is None:
            return False
        known = self._kinds.get(task)
        if known is None or known[0] is not handler:
            known = self._kinds[task] = (handler, inspect.iscoroutinefunction(handler))
        return known[1]

    def admit(self, claim: Claim, sent: float) -> InFlight:
        """Take a claim made by a call sent at ``sent`` (monotonic): it waits
        in the buffer, its lease renewed by the heartbeater, until a slot
        frees (``fill``)."""
        state, settings = self._state, self._state.settings
        receipt = self._receipt
        if sent != receipt[0] or claim.lease_expires_at != receipt[1]:
            receipt = self._receipt = self._received(claim.lease_expires_at, sent)
        lease = receipt[3]
        budget_deadline = float("inf")
        if claim.budget_expires_at is not None:
            budget_deadline = sent + max(0.0, claim.budget_expires_at.timestamp() - receipt[2])
        job = InFlight(claim=claim, lease=lease, deadline=min(sent + lease, budget_deadline),
                       budget_deadline=budget_deadline, next_heartbeat=sent + lease * settings.heartbeat_fraction,
                       is_async=False, recorded=dict(claim.checkpoints) if claim.checkpoints else {},
                       started=sent)
        state.inflight[claim.job_id] = job
        state.buffer.append(job)
        state.counts["claimed"] += 1
        if state.events.wanted(logging.INFO):
            state.events.emit("claimed", "job claimed", **job.fields, lease=round(lease, 3),
                              cancel_requested=claim.cancel_requested, checkpoints=len(job.recorded))
        if claim.cancel_requested:
            job.cancelled.set()
        if job.next_heartbeat < state.next_beat_at:
            state.heartbeat_wake.set()
        return job

    def _received(self, lease_expires_at: datetime | None, sent: float) -> tuple[float, datetime | None, float, float]:
        """The receipt of a claim call's answer: when it was sent, the end of
        its claims' lease (they share it), the wall clock read on receipt,
        and the lease length in force: the one asked for, else the
        queue's as seen from the claim (conservative: measured from
        receipt, not from sending). Read once for the claims of one call:
        a wall reading and a zoned moment's timestamp cost about a
        microsecond each."""
        now_wall = self._state.clock.wall()
        expires = lease_expires_at.timestamp() if lease_expires_at else now_wall
        return sent, lease_expires_at, now_wall, self._state.settings.lease or max(0.05, expires - now_wall)

    def fill(self) -> None:
        """Put free slots to work on buffered jobs (none once a stop was
        requested: the drain releases them). A slot is a task that runs
        buffered jobs one after the other until the buffer is empty, so a
        busy worker starts no task per job."""
        state = self._state
        while self._slots < state.settings.concurrency and state.buffer and not state.stop_requested:
            self._slots += 1
            state.spawn(self._slot())

    async def _slot(self) -> None:
        state = self._state
        buffer, task = state.buffer, asyncio.current_task()
        try:
            while buffer and not state.stop_requested:
                job = buffer.popleft()
                if job.lost.is_set():  # lost while buffered: dropped unrun
                    state.finish(job)
                    continue
                now = state.clock.monotonic()
                if now >= job.deadline:
                    # Its lease may have lapsed (a pause, an outage): start
                    # nothing this worker cannot vouch for; give it back.
                    state.spawn(self._give_back(job))
                    continue
                job.task, job.started = task, now
                await self._run(job)
        finally:
            self._slots -= 1

    async def _run(self, job: InFlight) -> None:
        """Run a job whose handler starts now (``job.started``)."""
        state, claim = self._state, job.claim
        handler = self._registry.handler(claim.task)
        job.is_async = self._is_async(claim.task, handler)
        job.ctx = AsyncJobContext(job, self) if job.is_async else JobContext(job, self, self._loop)
        state.running += 1
        try:
            try:
                if state.settings.record_pid:
                    state.spawn(self._set_pid(job))
                if handler is None:
                    outcome: Outcome = Failed(f"no handler for task {claim.task!r} on this worker "
                                              f"(tasks: {', '.join(sorted(self._registry.tasks)) or 'none'})",
                                              True)
                    state.events.emit("unknown_task", "no handler registered for this task",
                                      level=logging.ERROR, **job.fields)
                else:
                    outcome = await self._invoke(job, handler)
            except asyncio.CancelledError:
                if job.abandoned or state.hard_stop:
                    raise  # the drain releases it; this slot ends
                if not job.cancelled.is_set():
                    raise
                job.task.uncancel()  # the cancel was this job's: the slot goes on
                outcome = Cancelled()
        finally:
            state.running -= 1
            job.settling = True
        if handler is not None and state.events.wanted(logging.DEBUG):
            state.events.emit("handler_finished", "handler finished", level=logging.DEBUG, **job.fields,
                              outcome=type(outcome).__name__.lower(),
                              seconds=round(state.clock.monotonic() - job.started, 6))
        if not self._settler.hand_over(job, outcome):
            state.spawn(self._settle(job, outcome))  # written beside the slot, which goes on
        if not state.wake.is_set() and state.claim_due():
            state.wake.set()

    async def _give_back(self, job: InFlight) -> None:
        try:
            if (await self._writer.release(job)).took_effect:
                self._state.counts["released"] += 1
                self._state.events.emit("released", "buffered job released unstarted: its lease could not "
                                        "be vouched for", level=logging.WARNING, **job.fields)
        finally:
            self._state.finish(job)

    async def _settle(self, job: InFlight, outcome: Outcome) -> None:
        try:
            await self._settler.settle(job, outcome)  # finishes the job once its outcome is written
        except Exception:  # noqa: BLE001 - a bug must not leak the slot silently
            self._state.events.exception("settle_error", "writing the outcome failed", **job.fields)
            self._state.finish(job)

    def close(self) -> None:
        """The worker stopped: its handler threads end."""
        self._threads.close()

    @functools.cached_property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def _invoke(self, job: InFlight, handler: Handler) -> Outcome:
        events = self._state.events
        if events.wanted(logging.DEBUG):
            events.emit("started", "handler started", level=logging.DEBUG, **job.fields)
        try:
            with handler_span(job.claim):
                result = await handler(job.ctx) if job.is_async else await self._in_thread(job, handler)
        except NonRetryable as error:
            events.emit("handler_error", f"handler raised NonRetryable: {error}", level=logging.WARNING,
                        **job.fields, retry=False)
            outcome: Outcome = Failed(error_text(error), False)
        except LeaseLost:
            outcome = Lost()
        except JobCancelled:
            outcome = Cancelled()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if job.reservation_ref is not None:
                events.emit("handler_error", f"handler raised {type(error).__name__} after dispatching: {error}; "
                            "the job is left to the reconciler", level=logging.WARNING, **job.fields)
                outcome = Dispatched(job.execution_ref)
            else:
                events.emit("handler_error", f"handler raised {type(error).__name__}: {error}",
                            level=logging.WARNING, **job.fields, retry=True)
                outcome = Failed(error_text(error), True)
        else:
            outcome = self._dispatched(job, result) if isinstance(result, Dispatched) else Completed(result)
        if not job.committed:
            return outcome
        if not isinstance(outcome, Completed):
            events.emit("raised_after_commit", "the handler raised after its transaction committed: the job "
                        "stays completed", level=logging.WARNING, **job.fields)
        return Committed()

    def _dispatched(self, job: InFlight, answer: Dispatched) -> Outcome:
        """A handler's ``Dispatched``: the job is left running externally,
        which only a dispatch of this claim (``ctx.dispatch``) makes safe."""
        if job.reservation_ref is None:
            return Failed("the handler returned Dispatched without a dispatch of its own (ctx.dispatch): "
                          "nothing records the external work", False)
        if answer.execution_ref != job.execution_ref:
            self._state.events.emit("dispatch_ref_mismatch", "the handler returned Dispatched with another ref "
                                    "than its ctx.dispatch recorded; the recorded one stands",
                                    level=logging.WARNING, **job.fields, returned=answer.execution_ref,
                                    recorded=job.execution_ref)
        return Dispatched(job.execution_ref)

    async def _in_thread(self, job: InFlight, handler: Handler) -> Any:
        loop = self._loop
        future: asyncio.Future = loop.create_future()

        def deliver(ok: bool, value: Any) -> None:
            if not future.done():
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

        def call() -> tuple[bool, Any]:
            try:
                return True, handler(job.ctx)
            except BaseException as error:  # noqa: BLE001 - handed to the loop
                return False, error

        def hand_over(answer: tuple[bool, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the job was released
                loop.call_soon_threadsafe(deliver, *answer)

        # The handler's thread sees the span (and other context) of its job.
        context = contextvars.copy_context()
        self._threads.run(lambda: context.run(call), hand_over)
        return await future

    async def _set_pid(self, job: InFlight) -> None:
        with contextlib.suppress(PersistenceFailed):  # only informative: a lost write costs nothing
            async with self._pool.client() as client:
                await client.set_pid(job.fence, os.getpid())

    # The handler's calls (JobCalls) --------------------------------------------

    def now(self) -> float:
        return self._state.clock.monotonic()

    async def checkpoint(self, job: InFlight, step: str, value: Any) -> Any:
        state = self._state
        sent = state.clock.monotonic()
        written = await self._writer.checkpoint(job, step, value)
        if written.verdict is Verdict.ABANDONED:
            if state.clock.monotonic() > job.deadline:
                state.lose(job, "checkpoint could not be written before the lease ran out")
                raise LeaseLost()
            raise PersistenceFailed()
        if written.verdict is Verdict.REFUSED:
            state.counts["refused"] += 1
            state.events.emit("checkpoint_refused", "checkpoint refused: this claim's fence is stale",
                              level=logging.WARNING, **job.fields, step=step)
            state.lose(job, "checkpoint refused: the claim is no longer live")
            raise LeaseLost()
        job.renewed(sent, state.settings.heartbeat_fraction)
        job.recorded[step] = written.value
        return written.value

    async def heartbeat(self, job: InFlight) -> bool:
        return await self._heartbeater.beat_now(job)

    async def extend(self, job: InFlight, budget: timedelta) -> bool:
        state = self._state
        sent = state.clock.monotonic()
        verdict = await self._writer.write(job, "extend", lambda c: c.extend(job.fence, budget))
        if verdict is Verdict.ACCEPTED:
            job.extended(sent, budget.total_seconds(), state.settings.heartbeat_fraction)
            return True
        if verdict is Verdict.REFUSED:
            state.lose(job, "extend refused: the claim is no longer live")
        return False

    def transaction(self, job: InFlight) -> contextlib.AbstractAsyncContextManager:
        return self._transactions.open(job)

    async def reserve_dispatch(self, job: InFlight, backend: str) -> str:
        return await self._dispatcher.reserve(job, backend)

    async def finalize_dispatch(self, job: InFlight, reservation_ref: str, execution_ref: str) -> None:
        await self._dispatcher.finalize(job, reservation_ref, execution_ref)

    async def release_dispatch(self, job: InFlight, reservation_ref: str) -> None:
        await self._dispatcher.release(job, reservation_ref)
