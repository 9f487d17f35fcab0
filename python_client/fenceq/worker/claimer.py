"""The claim loop: fill free slots and the buffer behind them with
``claim_next`` (one) or, for several, ``claim_jobs`` (one nonce for the
call, on a schema of version 8 or later) or ``claim_batch`` (a nonce per
job, before version 8), backing off from 10 ms to
``poll_interval`` while the queues are empty, but never waiting past the
moment ``next_due`` says the next pending job falls due.

The buffer (``WorkerState.prefetch`` jobs beyond the slots) follows the
rate at which jobs finish here: as many as finish in ``PREFETCH_HORIZON``,
at most ``MAX_PREFETCH``, so that fast jobs are fetched hundreds per call
and slow ones are not hoarded (an idle worker's buffer shrinks to none).

Fresh nonces are generated and kept before every claim call; when its
outcome is unknown, each nonce is asked about with ``recover_claim``
(which answers every job a ``claim_jobs`` nonce claimed): an uncertain
claim is never made anew, a nonce never reused."""

from __future__ import annotations

import logging
from typing import Callable

from ..errors import ConfigError, PersistenceFailed
from ..types import Claim, new_claim_tokens
from .pool import Pool
from .settings import MAX_BATCH
from .state import WorkerState

Admit = Callable[[Claim, float], object]  # a claim and when its call was sent -> into the buffer
Fill = Callable[[], None]                  # start buffered jobs in free slots

FIRST_IDLE_WAIT = 0.01
NEXT_DUE_FROM = 0.05     # seconds: a shorter idle wait is not worth a next_due round trip
PREFETCH_HORIZON = 0.2   # seconds of work, at the rate jobs finish, held claimed ahead
MAX_PREFETCH = 500       # jobs held claimed ahead at most (graphile-worker's local queue)
RATE_WINDOW = 0.05       # seconds: the shortest span the finishing rate is measured over
CLAIM_JOBS_FROM_VERSION = 8


class Claimer:
    def __init__(self, state: WorkerState, pool: Pool, admit: Admit, fill: Fill = lambda: None):
        self._state = state
        self._pool = pool
        self._admit = admit
        self._fill = fill
        self._ask_next_due = True
        self._rate: float | None = None  # jobs finished per second, smoothed
        self._rate_since = (state.clock.monotonic(), state.finished)
        self._by_call: bool | None = None  # claim_jobs there? known once the schema's version is read

    async def run(self) -> None:
        """Until a stop is requested; raises ConfigError when the database
        refuses the claims themselves (an unknown queue, a missing grant)."""
        state, poll_interval = self._state, self._state.settings.poll_interval
        assert poll_interval is not None
        idle = FIRST_IDLE_WAIT
        while not state.stop_requested:
            self._measure_rate()
            if not state.claim_due():
                state.wake.clear()
                await state.wake.wait()
                continue
            state.wake.clear()
            try:
                claimed = await self.claim(min(state.claim_room(), MAX_BATCH))
            except ConfigError as error:
                state.events.emit("claim_refused", f"claim refused: {error}", level=logging.ERROR,
                                  reason=error.reason)
                raise
            except PersistenceFailed:
                # Nothing was left uncertain (recovery ran): try again later.
                idle = min(max(idle * 2, 0.1), poll_interval)
                await state.clock.wait(state.wake, idle)
                continue
            if claimed:
                idle = FIRST_IDLE_WAIT
                continue
            wait = await self.idle_wait(idle)
            until = state.clock.monotonic() + wait
            woken = await state.clock.wait(state.wake, wait)
            # At the moment next_due named: claim again briskly, in case the
            # database's clock is a little behind this one. Woken before it
            # (a notification, a freed slot): keep backing off, so that the
            # next idle wait asks next_due again rather than polling from
            # 10 ms up.
            reached_due = wait < idle and (not woken or state.clock.monotonic() >= until)
            idle = FIRST_IDLE_WAIT if reached_due else min(idle * 2, poll_interval)

    def _measure_rate(self) -> None:
        """Size the buffer to the rate at which jobs finish here."""
        state = self._state
        now, finished = state.clock.monotonic(), state.finished
        since, finished_then = self._rate_since
        if now - since < RATE_WINDOW:
            return
        rate = (finished - finished_then) / (now - since)
        self._rate = rate if self._rate is None else (self._rate + rate) / 2
        self._rate_since = (now, finished)
        state.prefetch = min(MAX_PREFETCH, int(self._rate * PREFETCH_HORIZON))

    async def idle_wait(self, backoff: float) -> float:
        """How long to wait after a claim found nothing: the backoff, cut
        short to when the next pending job of the queues falls due
        (``next_due``), so that a retry or a delayed job starts on time
        rather than at the next poll. A job due already but not claimable
        (another worker is taking it) leaves the backoff as it is."""
        if backoff <= NEXT_DUE_FROM or not self._ask_next_due:
            return backoff
        state = self._state
        try:
            async with self._pool.client() as client:
                due = await client.next_due(state.settings.queues)
        except PersistenceFailed:
            return backoff
        except ConfigError as error:
            # A database not migrated to version 3 yet, or a role without
            # the grant: poll as before, and say so once.
            state.events.emit("next_due_refused", f"next_due refused: {error}; polling without it",
                              level=logging.WARNING, reason=error.reason)
            self._ask_next_due = False
            return backoff
        if due is None:
            return backoff
        until_due = due.timestamp() - state.clock.wall()
        return min(backoff, until_due) if until_due > 0 else backoff

    async def claim(self, count: int) -> list[Claim]:
        """Claim up to ``count`` jobs into the buffer, and start what fits."""
        settings, clock = self._state.settings, self._state.clock
        lease, budget = settings.lease_delta, settings.budget_delta
        if count > 1 and self._by_call is None:
            self._by_call = await self._has_claim_jobs()
        tokens = new_claim_tokens(1 if count == 1 or self._by_call else count)
        sent = clock.monotonic()
        try:
            async with self._pool.client() as client:
                if count == 1:
                    claim = await client.claim_next(settings.queues, settings.owner_id, tokens[0],
                                                    lease=lease, budget=budget)
                    claims = [claim] if claim is not None else []
                elif self._by_call:
                    claims = await client.claim_jobs(settings.queues, settings.owner_id, tokens[0], count,
                                                     lease=lease, budget=budget)
                else:
                    claims = await client.claim_batch(settings.queues, settings.owner_id, tokens,
                                                      lease=lease, budget=budget)
        except PersistenceFailed:
            self._state.events.emit("claim_uncertain", "claim outcome unknown; recovering it with the same nonce",
                                    level=logging.WARNING, tokens=len(tokens))
            claims = await self.recover(tokens, sent)
        for claim in claims:
            self._admit(claim, sent)
        self._fill()
        return claims

    async def _has_claim_jobs(self) -> bool | None:
        """Whether the schema has claim_jobs (version 8 or later); None
        (ask again next time) when the database cannot be reached."""
        try:
            async with self._pool.client() as client:
                version = await client.version()
        except PersistenceFailed:
            return None
        return (version or "0").isdigit() and int(version) >= CLAIM_JOBS_FROM_VERSION

    async def recover(self, tokens: list[str], sent: float) -> list[Claim]:
        """The claims an uncertain call made, asked for by their nonces until
        the database answers (or gives up after max(2 × lease, 10 s))."""
        state, clock, events = self._state, self._state.clock, self._state.events
        found: list[Claim] = []
        give_up = sent + max(2 * (state.settings.lease or 30.0), 10.0)
        for token in tokens:
            delay = 0.05
            while True:
                try:
                    async with self._pool.client() as client:
                        claims = await client.recover_claims(state.settings.owner_id, token)
                    break
                except PersistenceFailed:
                    if state.stop_requested or clock.monotonic() > give_up:
                        events.emit("claim_unrecovered", "could not reach the database to recover an "
                                    "uncertain claim; if it was made, its lease will lapse and reap "
                                    "will hand the job on", level=logging.ERROR)
                        claims = []
                        break
                    await clock.sleep(delay)
                    delay = min(delay * 2, 1.0)
            for claim in claims:
                state.counts["recovered_claims"] += 1
                events.emit("claim_recovered", "uncertain claim recovered with its nonce",
                            level=logging.WARNING, job_id=claim.job_id, queue=claim.queue, task=claim.task,
                            generation=claim.generation)
                found.append(claim)
        if not found:
            events.emit("claim_not_made", "the uncertain claim did not take a job (or its lease "
                        "already lapsed)", level=logging.INFO, tokens=len(tokens))
        return found
