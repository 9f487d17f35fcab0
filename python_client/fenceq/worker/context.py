"""What a handler sees: its context (``JobContext`` in a thread,
``AsyncJobContext`` on the loop) and the exceptions it raises or meets."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import threading
from datetime import timedelta
from types import MappingProxyType
from typing import Any, AsyncContextManager, Awaitable, Callable, Iterator, Mapping, Protocol, Sequence

from .. import ops
from ..types import Fence
from .settings import seconds
from .state import InFlight

task_log = logging.getLogger("fenceq.task")


class NonRetryable(Exception):
    """Raise from a handler to fail the job without retry: it becomes
    ``failed`` at once (with a dead letter when its queue keeps them)."""


class LeaseLost(Exception):
    """The claim is no longer live: the database refused a fenced write or a
    heartbeat, or the worker released the job. Nothing the handler writes
    from now on is recorded; the job belongs to whoever claims it next."""


class JobCancelled(Exception):
    """Raise (or let ``ctx.raise_if_cancelled()`` raise) after a cancel
    request: the worker acknowledges the cancellation."""


class JobCalls(Protocol):
    """The worker's side of a context: the calls a handler may make."""

    def now(self) -> float:
        """The clock that lease deadlines are kept on."""

    async def checkpoint(self, job: InFlight, step: str, value: Any) -> Any: ...

    async def heartbeat(self, job: InFlight) -> bool: ...

    async def extend(self, job: InFlight, budget: timedelta) -> bool: ...

    def transaction(self, job: InFlight) -> AsyncContextManager[AsyncJobTransaction]: ...

    async def reserve_dispatch(self, job: InFlight, backend: str) -> str: ...

    async def finalize_dispatch(self, job: InFlight, reservation_ref: str, execution_ref: str) -> None: ...

    async def release_dispatch(self, job: InFlight, reservation_ref: str) -> None: ...


class AsyncJobTransaction:
    """``async with ctx.transaction() as tx`` (docs/transactions.md): run
    statements with ``execute`` and submit follow-up jobs in the
    transaction; set ``result`` to the job's result. Leaving the block
    completes the job under its fence in the same transaction and commits
    only when that completion answered true."""

    def __init__(self, transaction: Any):
        self._transaction = transaction
        self.result: Any = None
        self.backend: str = transaction.backend  # "postgres" or "sqlite": whose placeholders execute takes

    async def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run one statement (psycopg's or sqlite3's placeholders and
        errors); its rows, none for a statement without."""
        return await self._transaction.execute(sql, params)

    async def submit(self, queue: str, task: str, payload: Any = None, **options: Any) -> str:
        """``Client.submit`` inside the transaction: the job exists only if it commits."""
        return await self._transaction.submit(queue, task, payload, **options)

    async def submit_batch(self, queue: str, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        return await self._transaction.submit_batch(queue, requests)


class JobTransaction:
    """``with ctx.transaction() as tx`` in a thread handler: as
    ``AsyncJobTransaction``, each call waited for."""

    def __init__(self, block: AsyncJobTransaction, call: Callable[[Awaitable[Any]], Any]):
        self._block = block
        self._call = call
        self.backend = block.backend

    @property
    def result(self) -> Any:
        return self._block.result

    @result.setter
    def result(self, value: Any) -> None:
        self._block.result = value

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        return self._call(self._block.execute(sql, params))

    def submit(self, queue: str, task: str, payload: Any = None, **options: Any) -> str:
        return self._call(self._block.submit(queue, task, payload, **options))

    def submit_batch(self, queue: str, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        return self._call(self._block.submit_batch(queue, requests))


NO_REPORT = object()  # no progress report waiting (None is a report: it clears the last one)


class PendingProgress:
    """The latest progress report a handler made that the heartbeater has
    not sent yet: put from the handler (its thread, or the loop), taken by
    the heartbeater, which sends it instead of the job's next heartbeat.
    One lock serves every job's report (each holds it for an assignment or
    two), so that a job does not make a lock of its own."""

    _lock = threading.Lock()
    _value: Any = NO_REPORT  # until the first report (no ``__init__``: one is made per job)

    def put(self, value: Any) -> None:
        with self._lock:
            self._value = value

    def take(self) -> Any:
        """The waiting report (``NO_REPORT`` when none), which is no longer waiting."""
        with self._lock:
            value, self._value = self._value, NO_REPORT
        return value

    def put_back(self, value: Any) -> None:
        """A report whose write did not reach the database, unless a newer one came meanwhile."""
        with self._lock:
            if self._value is NO_REPORT:
                self._value = value


class _ContextBase:
    def __init__(self, job: InFlight, calls: JobCalls):
        self._job = job
        self._calls = calls
        self.pending_progress = PendingProgress()
        claim = job.claim
        self.job_id: str = claim.job_id
        self.queue: str = claim.queue
        self.task: str = claim.task
        self.payload: Any = claim.payload
        self.attempt: int = claim.attempt
        self.max_attempts: int = claim.max_attempts
        self.generation: int = claim.generation
        self.owner_id: str = claim.owner_id
        self.submission_id: str | None = claim.submission_id

    @functools.cached_property
    def log(self) -> logging.LoggerAdapter:
        """A logger adapter carrying the job's fields (built when first used)."""
        return logging.LoggerAdapter(task_log, {"fenceq": self._job.fields, "event": "task_log"})

    @property
    def fence(self) -> Fence:
        return self._job.fence

    @property
    def checkpoints(self) -> Mapping[str, Any]:
        """Steps recorded for this job so far (by this or earlier claims)."""
        return MappingProxyType(dict(self._job.recorded))

    @property
    def fence_live(self) -> bool:
        """False once the database refused this claim, or once the local
        lease deadline passed without a confirmed renewal (e.g. after a
        pause). Only the database can say yes for sure; this is the
        handler's cue to stop producing side effects."""
        return not self._job.lost.is_set() and self._calls.now() < self._job.deadline

    @property
    def cancel_requested(self) -> bool:
        return self._job.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        if self._job.cancelled.is_set():
            raise JobCancelled()

    def raise_if_lost(self) -> None:
        if not self.fence_live:
            raise LeaseLost()

    def progress(self, value: Any) -> None:
        """Report progress (JSON, at most 64 KiB in canonical form): the
        latest report is written with the job's next heartbeat, in its place
        (so a tight loop of reports costs at most one write per heartbeat
        interval), and a report still waiting when the handler returns is
        not written. Does not wait. Raises QF103 for a bad value at once,
        and ``LeaseLost`` once the claim is known to be lost."""
        if self._job.lost.is_set() or self._job.abandoned:
            raise LeaseLost()
        self.pending_progress.put(json.loads(ops.progress_text(value)))  # a snapshot


def _budget(budget: timedelta | float) -> timedelta:
    """A handler's budget, seconds or timedelta, as the timedelta sent."""
    return timedelta(seconds=seconds(budget, "budget"))


class JobContext(_ContextBase):
    """What a plain (thread) handler receives. ``cancelled``, ``lost`` and
    ``stopping`` are ``threading.Event``s."""

    def __init__(self, job: InFlight, calls: JobCalls, loop: asyncio.AbstractEventLoop):
        super().__init__(job, calls)
        self._loop = loop
        self.cancelled: threading.Event = job.cancelled.thread
        self.lost: threading.Event = job.lost.thread
        self.stopping: threading.Event = job.stopping.thread

    def _call(self, coroutine: Awaitable[Any]) -> Any:
        """Run a worker call on the loop and wait for it (from the handler's thread)."""
        if self._loop.is_closed() or self._job.abandoned:
            if inspect.iscoroutine(coroutine):
                coroutine.close()
            raise LeaseLost()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()  # type: ignore[arg-type]

    def checkpoint(self, step: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` unless ``step`` is already recorded for this job, record
        its (non-null, JSON) value under the fence, and return the recorded
        value. Raises ``LeaseLost`` when the claim is no longer live."""
        if step in self._job.recorded:
            return self._job.recorded[step]
        if self._job.lost.is_set():
            raise LeaseLost()
        return self._call(self._calls.checkpoint(self._job, step, fn()))

    def heartbeat(self) -> bool:
        """Renew the lease now; False (and ``lost`` set) when refused."""
        return self._call(self._calls.heartbeat(self._job))

    def extend(self, budget: timedelta | float) -> bool:
        """Let this claim run until at least ``budget`` from now (seconds or
        a timedelta): its budget only grows, and a claim without one gets
        one. Renews the lease too. False (and ``lost`` set) when refused."""
        return self._call(self._calls.extend(self._job, _budget(budget)))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[JobTransaction]:
        """Your writes, follow-up jobs and this job's completion in one
        transaction (docs/transactions.md): see ``AsyncJobTransaction``.
        Leaving raises ``LeaseLost`` or ``JobCancelled`` when the completion
        was refused (nothing of the block is written)."""
        opening = self._calls.transaction(self._job)
        block = self._call(opening.__aenter__())
        try:
            yield JobTransaction(block, self._call)
        except BaseException as error:
            if not self._call(opening.__aexit__(type(error), error, error.__traceback__)):
                raise
        else:
            self._call(opening.__aexit__(None, None, None))

    def dispatch(self, backend: str, call: Callable[[str], str]) -> str:
        """Hand the job's work to the external system ``backend`` (a name of
        1 to 255 characters) under the fence (docs/external-execution.md):
        reserve a dispatch under a fresh reservation ref, run
        ``call(reservation_ref)`` in this thread, which starts the work there
        with that ref as its idempotency key and returns the external
        system's id for it (the execution ref), then record that ref.
        Returns the execution ref; return ``fenceq.Dispatched(execution_ref)``
        to leave the job running externally for a ``fenceq.Reconciler``.

        ``call`` may raise only when the external system surely did not
        start the work: the reservation is then released and the error
        goes on (the job fails or retries as usual). When the outcome of the
        call is unknown (a timeout, a lost answer), ``call`` must return
        (the reservation ref will do where the external system finds work
        by its key) or the process must die, never raise: the reconciler
        asks the external system about that ref later.

        Raises ``LeaseLost`` when the reservation or its record was refused
        (after a refused record the job is left to the reconciler), and
        ``JobCancelled`` when a cancel was requested before the reservation.
        Once reserved, a handler that raises (other than ``NonRetryable``)
        leaves the job to the reconciler too: it is never retried here."""
        reservation_ref = self._call(self._calls.reserve_dispatch(self._job, backend))
        try:
            execution_ref = call(reservation_ref)
        except Exception:
            self._call(self._calls.release_dispatch(self._job, reservation_ref))
            raise
        self._call(self._calls.finalize_dispatch(self._job, reservation_ref, execution_ref))
        return execution_ref


class AsyncJobContext(_ContextBase):
    """What an ``async def`` handler receives. ``cancelled``, ``lost`` and
    ``stopping`` are ``asyncio.Event``s."""

    # Each event is made when the handler first asks for it (on the loop),
    # not for every job.
    @property
    def cancelled(self) -> asyncio.Event:
        return self._job.cancelled.loop

    @property
    def lost(self) -> asyncio.Event:
        return self._job.lost.loop

    @property
    def stopping(self) -> asyncio.Event:
        return self._job.stopping.loop

    async def checkpoint(self, step: str, fn: Callable[[], Any]) -> Any:
        """As ``JobContext.checkpoint``; ``fn`` may be sync or async."""
        if step in self._job.recorded:
            return self._job.recorded[step]
        if self._job.lost.is_set() or self._job.abandoned:
            raise LeaseLost()
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        return await self._calls.checkpoint(self._job, step, value)

    async def heartbeat(self) -> bool:
        return await self._calls.heartbeat(self._job)

    async def extend(self, budget: timedelta | float) -> bool:
        """As ``JobContext.extend``."""
        return await self._calls.extend(self._job, _budget(budget))

    def transaction(self) -> AsyncContextManager[AsyncJobTransaction]:
        """``async with ctx.transaction() as tx``: as ``JobContext.transaction``."""
        return self._calls.transaction(self._job)

    async def dispatch(self, backend: str, call: Callable[[str], Any]) -> str:
        """As ``JobContext.dispatch``; ``call`` may be sync or async. A
        cancellation while it runs (``cancel_grace``) keeps the reservation:
        the call may have started."""
        reservation_ref = await self._calls.reserve_dispatch(self._job, backend)
        try:
            execution_ref = call(reservation_ref)
            if inspect.isawaitable(execution_ref):
                execution_ref = await execution_ref
        except Exception:
            await self._calls.release_dispatch(self._job, reservation_ref)
            raise
        await self._calls.finalize_dispatch(self._job, reservation_ref, execution_ref)
        return execution_ref

