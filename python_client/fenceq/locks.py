"""Named locks held for a block of code (docs/guarantees.md §15).

``client.lock(lock, owner_id, ttl=...)`` is a context manager (``async
with`` on an ``AsyncClient``) that acquires the lock, renews it every ttl/3
in the background (a thread; on the async client a task), and releases it
when the block ends::

    with client.lock("nightly-report", owner_id, ttl=timedelta(seconds=30)) as held:
        ...  # in each transaction that writes: SELECT fenceq.check_lock(lock, held.token)

Entering raises ``LockBusy`` while another owner holds the lock live.
``held.token`` is the fencing token. The lock is *lost* when a renewal is
refused (the hold lapsed and may have been taken over) or fails with an
error other than an unknown outcome, when renewals fail for a whole ttl (the
database unreachable: the hold may have lapsed), or when the release on exit
finds the hold gone. Then ``held.lost`` is set, ``on_lost`` (if given) is
called once, from the renewer, and leaving the block raises ``LockLost``
unless the block is raising already. A lost hold is not released: if it is
still live, it lapses after its ttl.

The renewer learns of a loss only after the fact, so its flag is a hint to
stop early, not a fence: what must not be written by a stale holder is
written in a transaction that calls ``check_lock`` first: ``held.transaction()``
packages that (or by hand, on SQLite with ``check_lock_in_transaction``). Renewals go through the client the lock was
taken with: give it a client of its own (a URL or a pool), not one bound to a
connection inside your transaction, where a renewal would not commit until
your transaction does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from datetime import timedelta
from typing import Any, AsyncIterator, Callable, Iterator

from . import ops
from .errors import FenceqError, PersistenceFailed

# Seconds between attempts while renewals cannot reach the database.
UNREACHABLE_RETRY = 0.25


class LockBusy(Exception):
    """Another owner holds the lock live: it was not acquired."""


class LockLost(Exception):
    """The lock may have passed to another owner while the block ran: a
    renewal was refused or failed, renewals could not reach the database
    for a whole ttl, or the release found the hold gone. Once another owner
    took the lock, check_lock answers false for this token."""


class _Schedule:
    """When the holder renews next, and until when its last confirmed
    renewal vouches for the lock, in monotonic seconds. The database
    computed the expiry from a clock read after the call was sent, so the
    send time + ttl is never later than the real expiry."""

    def __init__(self, ttl: timedelta, sent: float):
        self.ttl = ttl.total_seconds()
        self._renewed(sent)

    def _renewed(self, sent: float) -> None:
        self.deadline = sent + self.ttl
        self.next_renewal = sent + self.ttl / 3

    def wait(self) -> float:
        return max(self.next_renewal - time.monotonic(), 0.0)

    def after(self, answer: bool | FenceqError, sent: float) -> str | None:
        """Take in a renewal's answer (or its error); the reason the lock
        counts as lost, or None to go on."""
        if answer is True:
            self._renewed(sent)
            return None
        if answer is False:
            return "a renewal was refused: the hold lapsed or was taken over"
        if not isinstance(answer, PersistenceFailed):
            return f"a renewal failed: {answer}"
        now = time.monotonic()
        if now >= self.deadline:
            return "no renewal reached the database for a whole ttl"
        # Try again soon, and once more at the deadline.
        self.next_renewal = min(now + min(UNREACHABLE_RETRY, self.ttl / 6), self.deadline)
        return None


class _Held:
    """What the sync and async context managers share: the lock's identity,
    its token and the loss report."""

    def __init__(self, lock: str, owner_id: str, ttl: timedelta, on_lost: Callable[[], Any] | None):
        # Validated now, so that a bad argument raises before anything is sent.
        ops.acquire_lock(lock, owner_id, ttl)
        self.lock, self.owner_id, self.ttl = lock, owner_id, ttl
        self.token: int | None = None
        self.lost_reason: str | None = None
        self._on_lost = on_lost

    def _took(self, token: int | None, sent: float) -> _Schedule:
        if token is None:
            raise LockBusy("fenceq: the lock is held by another owner")
        self.token = token
        return _Schedule(self.ttl, sent)

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost()

    def _released(self, answer: bool) -> None:
        if not answer:
            self._lose("the hold had lapsed or was taken over before the release")

    def raise_if_lost(self) -> None:
        """Raise ``LockLost`` once the lock counts as lost."""
        if self.lost_reason is not None:
            raise LockLost(f"fenceq: the lock was lost: {self.lost_reason}")

    def _checked(self, current: bool) -> None:
        """A fenced transaction's ``check_lock`` answer: go on, or lose the lock."""
        if not current:
            self._lose("check_lock answered false: the hold lapsed or was taken over")
            self.raise_if_lost()


class HeldLock(_Held):
    """``with client.lock(...) as held``: see the module docstring.
    ``held.lost`` is a ``threading.Event``; ``on_lost`` runs in the renewer
    thread."""

    def __init__(self, client: Any, lock: str, owner_id: str, ttl: timedelta,
                 on_lost: Callable[[], Any] | None = None):
        super().__init__(lock, owner_id, ttl, on_lost)
        self._client = client
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> "HeldLock":
        sent = time.monotonic()
        schedule = self._took(self._client.acquire_lock(self.lock, self.owner_id, self.ttl), sent)
        self._renewer = threading.Thread(target=self._renew, args=(schedule,), name="fenceq-lock", daemon=True)
        self._renewer.start()
        return self

    def _renew(self, schedule: _Schedule) -> None:
        while not self._stop.wait(schedule.wait()):
            sent = time.monotonic()
            try:
                answer = self._client.renew_lock(self.lock, self.owner_id, self.token, self.ttl)
            except FenceqError as error:
                answer = error
            if (reason := schedule.after(answer, sent)) is not None:
                return self._lose(reason)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lost_reason is None:
            try:
                self._released(self._client.release_lock(self.lock, self.owner_id, self.token))
            except PersistenceFailed:
                pass  # unknown outcome: an unreleased hold lapses after its ttl
        if exc_type is None:
            self.raise_if_lost()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """``with held.transaction() as tx``: a transaction of its own
        (``client.transaction()``) fenced by this hold. It begins with
        ``check_lock``, which keeps every acquire of the lock waiting until
        it ends, and commits only when ``check_lock`` still answers true at
        its end; else it rolls back and raises ``LockLost``."""
        with self._client.transaction() as tx:
            self._checked(tx.check_lock(self.lock, self.token))
            yield tx
            self._checked(tx.check_lock(self.lock, self.token))


class AsyncHeldLock(_Held):
    """``async with client.lock(...) as held``: see the module docstring.
    ``held.lost`` is an ``asyncio.Event``; ``on_lost`` runs in the renewer
    task."""

    def __init__(self, client: Any, lock: str, owner_id: str, ttl: timedelta,
                 on_lost: Callable[[], Any] | None = None):
        super().__init__(lock, owner_id, ttl, on_lost)
        self._client = client
        self.lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._renewer: asyncio.Task | None = None

    async def __aenter__(self) -> "AsyncHeldLock":
        sent = time.monotonic()
        schedule = self._took(await self._client.acquire_lock(self.lock, self.owner_id, self.ttl), sent)
        self._renewer = asyncio.create_task(self._renew(schedule), name="fenceq-lock")
        return self

    async def _stopped_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _renew(self, schedule: _Schedule) -> None:
        while not await self._stopped_within(schedule.wait()):
            sent = time.monotonic()
            try:
                answer = await self._client.renew_lock(self.lock, self.owner_id, self.token, self.ttl)
            except FenceqError as error:
                answer = error
            if (reason := schedule.after(answer, sent)) is not None:
                return self._lose(reason)

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self._stop.set()
        if self._renewer is not None:
            await self._renewer
        if self.lost_reason is None:
            try:
                self._released(await self._client.release_lock(self.lock, self.owner_id, self.token))
            except PersistenceFailed:
                pass  # unknown outcome: an unreleased hold lapses after its ttl
        if exc_type is None:
            self.raise_if_lost()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """``async with held.transaction() as tx``: as ``HeldLock.transaction``."""
        async with self._client.transaction() as tx:
            self._checked(await tx.check_lock(self.lock, self.token))
            yield tx
            self._checked(await tx.check_lock(self.lock, self.token))


def check_lock_in_transaction(connection: Any, lock: str, token: int) -> bool:
    """``check_lock`` on your own ``sqlite3`` connection, inside the write
    transaction (``BEGIN IMMEDIATE``) whose writes it fences: that
    transaction keeps every acquire waiting until it ends. Commit the writes
    only when it answers True. (On PostgreSQL, ``fenceq.connect(connection=
    conn).check_lock(...)`` runs in your transaction already.)"""
    from .backends.sqlite import run_in_transaction

    return run_in_transaction(connection, ops.check_lock(lock, token))
