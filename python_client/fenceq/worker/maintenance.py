"""The maintenance duty: ``reap`` every ``reap_interval`` (with jitter), then
``tick`` (the jobs of due schedules, in a transaction of its own so that a
refused tick never undoes or stops reaping), ``sample_activity`` at most
once a minute (the operator's charts, on a schema of version 7 or later),
and ``purge`` every ``purge_interval`` when a retention is set. Each round runs
as the fleet's only holder of the duty (``AsyncBackend.exclusive``), on a
backend of its own; a round that finds the duty held elsewhere is skipped.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any

from ..backends import AsyncBackend
from ..client import AsyncClient
from ..errors import ConfigError, PersistenceFailed
from ..types import ReapResult
from .pool import BackendOpener
from .settings import MAX_BATCH
from .state import WorkerState

DUTY = "maintenance"
PURGE_ROWS = 10_000
# sample_activity writes each closed minute once, whoever calls it: more
# often would only find nothing new.
SAMPLE_INTERVAL = 60.0
SAMPLED_FROM_VERSION = 7


class Maintenance:
    def __init__(self, state: WorkerState, open_backend: BackendOpener):
        self._state = state
        self._open_backend = open_backend
        self._backend: AsyncBackend | None = None
        self._last_purge: float | None = None
        self._last_sample: float | None = None
        self._ticking = True
        self._sampling: bool | None = None  # known once the schema's version is read

    async def run(self) -> None:
        state, clock = self._state, self._state.clock
        interval = state.settings.reap_interval
        assert interval is not None
        await clock.sleep(random.uniform(0, interval))
        failing = False
        try:
            while True:
                full = False
                try:
                    full = await self.round()
                    failing = False
                except PersistenceFailed:
                    if not failing:  # once per outage, not every round
                        state.events.emit("reap_failed", "reap could not reach the database; retrying",
                                          level=logging.WARNING)
                    failing = True
                    await self._close()
                except ConfigError as error:
                    state.events.emit("reap_disabled", f"reap/purge refused ({error.reason}); this worker "
                                      "stops reaping", level=logging.ERROR)
                    return
                await clock.sleep(0.01 if full else interval * random.uniform(0.8, 1.2))
        finally:
            await self._close()

    async def round(self) -> bool:
        """One reap, tick (and purge, when due); True when reap hit its row limit
        (more is waiting: go again at once)."""
        settings, clock = self._state.settings, self._state.clock
        if self._backend is None:
            self._backend = await self._open_backend()
        async with self._backend.exclusive(DUTY) as holder:
            if holder is None:
                return False
            full = self._reaped(await AsyncClient(holder).reap(max_rows=MAX_BATCH))
        if self._ticking:
            await self._tick()
        if self._sampling is not False and (
                self._last_sample is None or clock.monotonic() - self._last_sample >= SAMPLE_INTERVAL):
            await self._sample()
        purge_due = settings.purge_after is not None and (
            self._last_purge is None or clock.monotonic() - self._last_purge >= settings.purge_interval)
        if purge_due:
            async with self._backend.exclusive(DUTY) as holder:
                if holder is not None:
                    await self._purge(AsyncClient(holder))
                    self._last_purge = clock.monotonic()
        return full

    def _reaped(self, result: ReapResult) -> bool:
        total = result.requeued + result.failed + result.cancelled + result.expired
        if total:
            self._state.counts["reaped"] += total
            self._state.events.emit("reaped", "reap settled expired claims and overdue jobs",
                                    requeued=result.requeued, failed=result.failed,
                                    cancelled=result.cancelled, expired=result.expired)
        return total >= MAX_BATCH

    async def _tick(self) -> None:
        assert self._backend is not None
        try:
            async with self._backend.exclusive(DUTY) as holder:
                jobs = 0 if holder is None else await AsyncClient(holder).tick(max_rows=MAX_BATCH)
        except ConfigError as error:
            self._ticking = False
            self._state.events.emit("tick_disabled", f"tick refused ({error.reason}); this worker stops "
                                    "submitting the jobs of schedules", level=logging.ERROR)
            return
        if jobs:
            self._state.events.emit("ticked", "tick submitted the jobs of due schedules", jobs=jobs)

    async def _sample(self) -> None:
        assert self._backend is not None
        async with self._backend.exclusive(DUTY) as holder:
            if holder is None:
                return
            client = AsyncClient(holder)
            if self._sampling is None:
                version = await client.version()
                self._sampling = (version or "0").isdigit() and int(version) >= SAMPLED_FROM_VERSION
                if not self._sampling:
                    return
            try:
                await client.sample_activity()
            except ConfigError as error:
                self._sampling = False
                self._state.events.emit("sample_disabled", f"sample_activity refused ({error.reason}); this "
                                        "worker stops sampling the queues' activity", level=logging.ERROR)
                return
        self._last_sample = self._state.clock.monotonic()

    async def _purge(self, client: Any) -> None:
        """``client`` is an AsyncClient (its methods are typed as the sync client's)."""
        settings = self._state.settings
        assert settings.purge_after is not None
        count = await client.purge(settings.purge_after, max_rows=PURGE_ROWS,
                                   submissions_older_than=settings.purge_submissions_after)
        if count:
            self._state.events.emit("purged", "retention purge deleted finished jobs", jobs=count)

    async def _close(self) -> None:
        if self._backend is not None:
            with contextlib.suppress(Exception):
                await self._backend.close()
        self._backend = None
