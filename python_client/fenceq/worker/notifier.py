"""Wake-ups and control messages, where the backend has notifications: a
job of one of this worker's queues became due (wake the claimer), or an
in-flight job's claim changed (check it now). A notification is only a
hint; the lost connection is re-established with backoff, and since
messages may have been missed meanwhile, the worker then claims and
re-checks its jobs.

LISTEN needs a session of its own. The notifier listens on the worker's
``listen_url`` when it has one, else on its database URL; a connection
through a pooler (PgBouncer) cannot hold a session, so there the notifier
says so once and stops, and the worker polls (``poll_interval``,
``control_poll``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable, Coroutine

from ..backends.protocol import CONTROL_CHANNEL, JOBS_CHANNEL
from .pool import BackendOpener
from .state import InFlight, WorkerState

Check = Callable[[InFlight], Coroutine[None, None, None]]


class Notifier:
    def __init__(self, state: WorkerState, open_backend: BackendOpener, check: Check):
        self._state = state
        self._open_backend = open_backend
        self._check = check
        self.listening = asyncio.Event()  # first subscribed (or failed to): the worker may start

    async def run(self) -> None:
        state = self._state
        queues = set(state.settings.queues)
        delay = 0.1
        while True:
            backend = None
            try:
                backend = await self._open_backend()
                if getattr(backend, "pooled", False):  # only PostgreSQL's backends can tell
                    self._poll_instead()
                    return
                async with backend.listen([JOBS_CHANNEL, CONTROL_CHANNEL]) as notifications:
                    delay = 0.1
                    if self.listening.is_set():
                        state.events.emit("listener_reconnected", "LISTEN connection restored")
                        self._catch_up()
                    self.listening.set()
                    async for note in notifications:
                        if note.channel == JOBS_CHANNEL and note.payload in queues:
                            state.wake.set()
                        elif note.channel == CONTROL_CHANNEL and note.payload in state.inflight:
                            state.spawn(self._check(state.inflight[note.payload]))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - reconnect on anything
                state.events.emit("listener_lost", f"LISTEN connection lost ({type(error).__name__}); "
                                  "polling until it is back", level=logging.WARNING)
                self.listening.set()
            finally:
                if backend is not None:
                    with contextlib.suppress(Exception):
                        await backend.close()
            await state.clock.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _poll_instead(self) -> None:
        settings = self._state.settings
        where = "the listen_url" if settings.listen_url else "the database URL (no listen_url given)"
        self._state.events.emit(
            "listen_unavailable", f"{where} goes through a connection pooler, where LISTEN cannot hold "
            f"a session: polling for jobs every {settings.poll_interval}s and for cancel requests every "
            f"{settings.control_poll}s (give a direct listen_url to be woken instead)", level=logging.WARNING)
        self.listening.set()

    def _catch_up(self) -> None:
        """Notifications may have been missed while disconnected."""
        self._state.wake.set()
        for job in list(self._state.inflight.values()):
            self._state.spawn(self._check(job))
