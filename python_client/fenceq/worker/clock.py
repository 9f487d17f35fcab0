"""Time, as the worker's units see it: injected, so that unit tests drive a
manual clock instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (lease deadlines, schedules)."""

    def wall(self) -> float:
        """Seconds since the epoch (to read the database's timestamps)."""

    async def sleep(self, seconds: float) -> None: ...

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Until ``event`` is set (True) or ``timeout`` seconds pass (False)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return event.is_set()
