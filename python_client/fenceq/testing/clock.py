"""A ``Clock`` that moves only when the test says so, and helpers that run
the event loop until a condition holds, counted in loop turns and clock
steps (never in wall-clock time)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any, Callable

WALL_AT_ZERO = 1_700_000_000.0
TURNS = 200  # loop turns that everything in memory settles within


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return WALL_AT_ZERO + self.now

    def _timer(self, seconds: float) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(seconds, 0.0), next(self._order), future))
        return future

    async def sleep(self, seconds: float) -> None:
        await self._timer(seconds)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        timer, waiter = self._timer(timeout), asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({timer, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            waiter.cancel()
        return event.is_set()

    def advance(self, seconds: float) -> None:
        """Move time on, waking every sleeper that is due."""
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


async def settle() -> None:
    """Let every task that can run without the clock moving run."""
    for _ in range(TURNS):
        await asyncio.sleep(0)


async def until(predicate: Callable[[], Any], clock: ManualClock | None = None, *, step: float = 0.05,
                steps: int = 2000) -> Any:
    """Run the loop (and, with a clock, move it on by ``step``) until the
    predicate holds; fail after ``steps`` steps."""
    for _ in range(steps):
        for _ in range(TURNS):
            await asyncio.sleep(0)
            value = predicate()
            if value:
                return value
        if clock is not None:
            clock.advance(step)
    raise AssertionError(f"never happened: {getattr(predicate, '__name__', predicate)}")
