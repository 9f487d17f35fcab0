"""The reconciler: settles the jobs a handler left running in an external
system (``ctx.dispatch``) once their claim lapsed (docs/external-execution.md).

Each round reads a page of ``dispatch_repair_candidates(backend)``, adopts
each job (``adopt_dispatch``: a new claim under a fresh token, the ref it
expects being the one the candidate showed) and asks the external system
about that ref with the caller's ``poll``:

| dispatch | poll says | then |
|---|---|---|
| reserved | done / failed / running | the call happened: ``finalize_dispatch``, then as running |
| reserved | unknown | the call never happened: ``release_dispatch``, then ``release`` (the job runs again) |
| running | done | ``complete`` with the result |
| running | failed | ``fail`` (``retry`` as poll says) |
| running | running | nothing: the adopted claim lapses and the job is checked again |
| running | unknown | nothing, logged: running work is never released |

A job whose cancel was requested is not polled: the ``cancel`` hook (if
given) stops the external work, then ``acknowledge_cancel``.

Work still running is left to lapse rather than kept and heartbeaten: a
reconciler then holds nothing between rounds (any number may run, and one
that dies loses nothing), and the adoption lease (``lease``) is how often
running work is checked. Every adoption is a claim (one entry in the job's
attempts, no attempt counted). A failed poll, hook or database call leaves
the adopted claim to lapse as a crash would: the next round takes it again.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Awaitable, Callable

from ..client import AsyncClient, connect_async
from ..errors import ConfigError, PersistenceFailed
from ..types import DispatchCandidate, new_claim_token
from .clock import Clock, SystemClock
from .events import Events
from .settings import default_owner_id, seconds


@dataclass(frozen=True)
class PollResult:
    """What the external system says about a ref: build it with ``done``,
    ``failed``, ``running`` or ``unknown``. ``execution_ref``: the external
    system's id of the work, when asked by a reservation ref (None: the
    reservation ref serves as its id)."""

    status: str  # one of STATUSES
    result: Any = None
    error: str | None = None
    retry: bool = False
    execution_ref: str | None = None

    STATUSES = ("done", "failed", "running", "unknown")

    def __post_init__(self) -> None:
        if self.status not in self.STATUSES:
            raise ValueError("a PollResult's status is one of " + ", ".join(self.STATUSES))

    @classmethod
    def done(cls, result: Any = None, *, execution_ref: str | None = None) -> "PollResult":
        return cls("done", result=result, execution_ref=execution_ref)

    @classmethod
    def failed(cls, error: str, *, retry: bool = False, execution_ref: str | None = None) -> "PollResult":
        """The external work ended in failure; ``retry``: run the job again
        (a new dispatch) when it has attempts left."""
        return cls("failed", error=error, retry=retry, execution_ref=execution_ref)

    @classmethod
    def running(cls, *, execution_ref: str | None = None) -> "PollResult":
        return cls("running", execution_ref=execution_ref)

    @classmethod
    def unknown(cls) -> "PollResult":
        """The external system has no work under this ref."""
        return cls("unknown")


class Reconciled(str, enum.Enum):
    """What one round did with one candidate."""
    NOT_ADOPTED = "not_adopted"  # settled, renewed or adopted by another since it was listed
    COMPLETED = "completed"
    FAILED = "failed"
    RUNNING = "running"          # left to lapse and be checked again
    RELEASED = "released"        # the external call never happened: the job runs again
    UNKNOWN = "unknown"          # running work the external system does not know: left, logged
    CANCELLED = "cancelled"
    REFUSED = "refused"          # a write under the adopted claim was refused
    ERROR = "error"              # poll, a hook or the database failed: left to lapse


DEFAULT_PAGE = 100  # dispatch_repair_candidates' own default max_rows

Poll = Callable[[str], PollResult | Awaitable[PollResult]]
CancelHook = Callable[[str], Any]


class Reconciler:
    """Settles ``backend``'s dispatched jobs whose claim lapsed.

    ``client``: a database URL or an ``AsyncClient``. ``poll(ref)`` and
    ``cancel(ref)`` may be sync (run in a thread) or async. ``owner_id``
    names the adopting claims (default: host, pid and a random part);
    ``lease`` (seconds or timedelta; default the queue's) is how long an
    adopted claim lasts, so how often running work is checked; ``interval``
    the wait between rounds (none after a full page); ``max_rows`` a round's
    page (default DEFAULT_PAGE).

    ``run()`` blocks until ``stop()``; ``await run_async()`` is its async
    form; ``await reconcile_once()`` runs one round.
    """

    def __init__(self, client: str | AsyncClient, backend: str, poll: Poll, *, cancel: CancelHook | None = None,
                 owner_id: str | None = None, lease: timedelta | float | None = None,
                 interval: timedelta | float = 5.0, max_rows: int | None = None, clock: Clock | None = None):
        if not isinstance(client, (str, AsyncClient)):
            raise TypeError("Reconciler needs a database URL or an AsyncClient")
        self.backend = backend
        self.owner_id = owner_id or default_owner_id()
        self.lease = None if lease is None else timedelta(seconds=seconds(lease, "lease"))
        self.interval = seconds(interval, "interval")
        self.max_rows = max_rows
        self._poll = poll
        self._cancel = cancel
        self._url = client if isinstance(client, str) else None
        self._client = client if isinstance(client, AsyncClient) else None
        self._clock = clock or SystemClock()
        self._events = Events(self.owner_id)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked = threading.Event()

    def run(self) -> None:
        asyncio.run(self.run_async())

    async def run_async(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if self._stop_asked.is_set():
            self._stop.set()
        try:
            while not self._stop.is_set():
                try:
                    full = len(await self.reconcile_once()) == (self.max_rows or DEFAULT_PAGE)
                except PersistenceFailed:
                    self._events.emit("reconcile_error", "the database could not be reached; next round later",
                                      level=logging.WARNING, backend=self.backend)
                    full = False
                if not full:
                    await self._clock.wait(self._stop, self.interval)
        finally:
            if self._url is not None and self._client is not None:
                await self._client.close()
                self._client = None

    def stop(self) -> None:
        """End ``run`` after the round in progress; safe from any thread."""
        self._stop_asked.set()
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)

    async def reconcile_once(self) -> dict[str, Reconciled]:
        """One round: a page of candidates, each adopted and settled."""
        if self._client is None:
            self._client = await connect_async(self._url)
        candidates = await self._client.dispatch_repair_candidates(self.backend, max_rows=self.max_rows)
        done = {}
        for candidate in candidates:
            try:
                done[candidate.job_id] = await self._reconcile(self._client, candidate)
            except Exception:  # noqa: BLE001 - one job's trouble must not stop the round
                self._events.exception("reconcile_error", "reconciling a dispatched job failed; its adopted "
                                       "claim lapses and it is checked again", job_id=candidate.job_id)
                done[candidate.job_id] = Reconciled.ERROR
            self._events.emit("reconciled", f"dispatched job {done[candidate.job_id].value}",
                              job_id=candidate.job_id, backend=self.backend, state=candidate.state,
                              ref=candidate.ref)
        return done

    async def _reconcile(self, client: AsyncClient, candidate: DispatchCandidate) -> Reconciled:
        claim = await client.adopt_dispatch(candidate.job_id, self.backend, candidate.ref, self.owner_id,
                                            new_claim_token(), lease=self.lease)
        if claim is None:
            return Reconciled.NOT_ADOPTED
        fence = claim.fence
        if claim.cancel_requested:
            if self._cancel is not None:
                await _answer(self._cancel, candidate.ref)
            return Reconciled.CANCELLED if await client.acknowledge_cancel(fence) else Reconciled.REFUSED
        answer = await _answer(self._poll, candidate.ref)
        if not isinstance(answer, PollResult):
            raise TypeError("poll must answer a fenceq.PollResult")
        if candidate.state == "reserved":
            if answer.status == "unknown":
                released = await client.release_dispatch(fence, candidate.ref) and await client.release(fence)
                return Reconciled.RELEASED if released else Reconciled.REFUSED
            if not await client.finalize_dispatch(fence, candidate.ref, answer.execution_ref or candidate.ref):
                return Reconciled.REFUSED
        elif answer.status == "unknown":
            self._events.emit("dispatch_unknown", "the external system does not know this running work; left "
                              "as it is (running work is never released)", level=logging.ERROR,
                              job_id=candidate.job_id, backend=self.backend, execution_ref=candidate.ref)
            return Reconciled.UNKNOWN
        elif answer.execution_ref not in (None, candidate.ref):
            if not await client.replace_dispatch_ref(fence, candidate.ref, answer.execution_ref):
                return Reconciled.REFUSED
        if answer.status == "running":
            return Reconciled.RUNNING
        if answer.status == "done":
            return await _complete(client, fence, answer.result)
        settled = await client.fail(fence, answer.error or "the external work failed", retry=answer.retry)
        return Reconciled.FAILED if settled else Reconciled.REFUSED


async def _complete(client: AsyncClient, fence: Any, result: Any) -> Reconciled:
    try:
        settled = await client.complete(fence, result)
    except ConfigError as error:  # a result that cannot be stored: no later round would store it either
        settled = await client.fail(fence, f"the external work's result could not be stored: {error}", retry=False)
        return Reconciled.FAILED if settled else Reconciled.REFUSED
    return Reconciled.COMPLETED if settled else Reconciled.REFUSED


async def _answer(hook: Callable[[str], Any], ref: str) -> Any:
    """A hook's answer: an async hook awaited, a sync one run in a thread."""
    if inspect.iscoroutinefunction(hook):
        return await hook(ref)
    answer = await asyncio.to_thread(hook, ref)
    return await answer if inspect.isawaitable(answer) else answer
