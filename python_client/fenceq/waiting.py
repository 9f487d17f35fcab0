"""Waiting for a job to finish: ``Client.wait`` and ``AsyncClient.wait``
(docs/guarantees.md §17).

A wait reads the job with ``get_job`` until it is terminal. Where the
backend can listen (PostgreSQL, on a connection of its own), the wait
subscribes to ``fenceq_done`` before the read that decides to wait, so a
job that finishes in between is not missed, and reads the job again as soon
as a notification names it. Notifications are hints (the queue's
notify_done switch may be off, a listener may miss one), so the wait also
reads again on a backoff schedule, 10 ms doubling to 1 s; where there is no
listener (SQLite, or the caller's own connection) the schedule is all there
is.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import ops
from .backends.protocol import DONE_CHANNEL, AsyncBackend, AsyncListener, Backend, Listener, Notification
from .errors import PersistenceFailed, config_error
from .types import Job

TERMINAL = frozenset({"completed", "failed", "cancelled", "expired"})


class WaitTimeout(TimeoutError):
    """The job was not terminal within the timeout. ``job_id`` names it
    (the message never does)."""

    def __init__(self, job_id: str):
        super().__init__("fenceq: the job did not finish within the timeout")
        self.job_id = job_id


def timeout_seconds(timeout: Any) -> float | None:
    """None (wait for as long as it takes), or a non-negative number of
    seconds or ``timedelta``."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise config_error("QF105", "timeout must be None or a non-negative duration")
    return float(timeout)


def finished(job: Job | None) -> bool:
    """Terminal, or gone (never submitted, or purged): nothing to wait for."""
    return job is None or job.status in TERMINAL


def names(notes: list[Notification], job_id: str) -> bool:
    return any(note.payload == job_id for note in notes)


class _Schedule:
    """One wait's deadline and its backoff between reads."""

    def __init__(self, waiter: "Waiter", job_id: str, timeout: Any):
        seconds = timeout_seconds(timeout)
        self._job_id = job_id
        self._deadline = None if seconds is None else time.monotonic() + seconds
        self._delay = waiter.first_poll
        self._longest = waiter.longest_poll

    def remaining(self) -> float:
        """Seconds left; WaitTimeout once the deadline has passed."""
        left = float("inf") if self._deadline is None else self._deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(self._job_id)
        return left

    def pause(self) -> float:
        """How long to wait before the next read."""
        pause, self._delay = min(self._delay, self.remaining()), min(self._delay * 2, self._longest)
        return pause


@dataclass
class Waiter:
    """How a wait reads the job again (``first_poll`` seconds after a read
    that found it running, doubling up to ``longest_poll``), and what its
    waits did: ``reads`` of the job and wake-ups by a notification naming
    it (``notified``)."""

    first_poll: float = 0.01
    longest_poll: float = 1.0
    reads: int = 0
    notified: int = 0

    def _read(self, backend: Backend, op: ops.Op) -> Job | None:
        self.reads += 1
        return backend.run(op)

    def wait(self, backend: Backend, job_id: str, timeout: Any = None) -> Job | None:
        """The job once it is terminal (None when there is no such job);
        ``WaitTimeout`` after ``timeout`` seconds."""
        op = ops.get_job(job_id)
        schedule = _Schedule(self, job_id, timeout)
        job = self._read(backend, op)
        if finished(job):
            return job
        schedule.remaining()  # out of time already: no listener either
        with backend.listener([DONE_CHANNEL]) as listener:
            if listener is not None:
                job = self._read(backend, op)  # it may have finished before LISTEN
            while not finished(job):
                pause = schedule.pause()
                if listener is None:
                    time.sleep(pause)
                else:
                    listener = self._listen(listener, job_id, pause)
                job = self._read(backend, op)
        return job

    def _listen(self, listener: Listener, job_id: str, pause: float) -> Listener | None:
        """Wait ``pause`` seconds or until a notification names the job;
        the listener, or None once its connection is lost."""
        end = time.monotonic() + pause
        while True:
            try:
                notes = listener.notifications(max(0.0, end - time.monotonic()))
            except PersistenceFailed:
                time.sleep(max(0.0, end - time.monotonic()))
                return None  # polling alone is still a complete wait
            if names(notes, job_id):
                self.notified += 1
                return listener
            if not notes or time.monotonic() >= end:
                return listener

    async def _read_async(self, backend: AsyncBackend, op: ops.Op) -> Job | None:
        self.reads += 1
        return await backend.run(op)

    async def wait_async(self, backend: AsyncBackend, job_id: str, timeout: Any = None) -> Job | None:
        """As ``wait``, on the event loop."""
        op = ops.get_job(job_id)
        schedule = _Schedule(self, job_id, timeout)
        job = await self._read_async(backend, op)
        if finished(job):
            return job
        schedule.remaining()
        async with backend.listener([DONE_CHANNEL]) as listener:
            if listener is not None:
                job = await self._read_async(backend, op)
            while not finished(job):
                pause = schedule.pause()
                if listener is None:
                    await asyncio.sleep(pause)
                else:
                    listener = await self._listen_async(listener, job_id, pause)
                job = await self._read_async(backend, op)
        return job

    async def _listen_async(self, listener: AsyncListener, job_id: str, pause: float) -> AsyncListener | None:
        end = time.monotonic() + pause
        while True:
            try:
                notes = await listener.notifications(max(0.0, end - time.monotonic()))
            except PersistenceFailed:
                await asyncio.sleep(max(0.0, end - time.monotonic()))
                return None
            if names(notes, job_id):
                self.notified += 1
                return listener
            if not notes or time.monotonic() >= end:
                return listener
