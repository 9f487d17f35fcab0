"""The worker's side of ``ctx.dispatch`` (docs/external-execution.md): the
fenced steps around a handler's call to an external system. Reserve a
dispatch under the attempt's reservation ref (the idempotency key the call
carries), then finalize it with the external system's execution ref, or
release it when the call surely never started the work.

Once a reservation is recorded, nothing here settles the job: a step that
is refused or never answered leaves the dispatch to a ``Reconciler``, which
adopts the job once its lease lapses (reap never requeues it)."""

from __future__ import annotations

import logging

from ..errors import PersistenceFailed
from .context import JobCancelled, LeaseLost
from .fenced_writer import FencedWriter, Verdict
from .pool import Pool
from .state import InFlight, WorkerState


def reservation_ref_of(job: InFlight) -> str:
    """The idempotency key of this attempt's external call: the same for
    every claim of one attempt (a release, or a reconciler that found the
    reservation unknown and released it, does not count an attempt), so a
    late call from a paused dispatcher and the re-run's call carry one key,
    and an external system that honours idempotency keys starts the work
    once. A retry after a failure is a new attempt and a new key."""
    return f"fenceq:{job.claim.job_id}:{job.claim.attempt}"


class Dispatcher:
    def __init__(self, state: WorkerState, pool: Pool, writer: FencedWriter):
        self._state = state
        self._pool = pool
        self._writer = writer

    async def reserve(self, job: InFlight, backend: str) -> str:
        """A reservation ref recorded under the job's fence. Raises
        ``LeaseLost`` (or ``JobCancelled`` after a cancel request) when
        refused, ``PersistenceFailed`` when the database stayed
        unreachable: the external call must not be made then."""
        reservation_ref = reservation_ref_of(job)
        verdict = await self._writer.write(job, "reserve_dispatch",
                                           lambda c: c.reserve_dispatch(job.fence, backend, reservation_ref))
        if verdict is Verdict.ABANDONED:
            raise PersistenceFailed()
        if verdict is Verdict.REFUSED:
            raise await self._refusal(job)
        job.reservation_ref = reservation_ref
        self._state.events.emit("dispatch_reserved", "dispatch reserved", **job.fields, backend=backend,
                                reservation_ref=reservation_ref)
        return reservation_ref

    async def finalize(self, job: InFlight, reservation_ref: str, execution_ref: str) -> None:
        """Record the execution ref. Anything but a yes (a refusal, no
        answer, an execution ref that cannot be stored) raises ``LeaseLost``
        and stops the renewals: the external work exists, so the job is left
        for a reconciler to adopt by its reservation ref."""
        try:
            verdict = await self._writer.write(
                job, "finalize_dispatch", lambda c: c.finalize_dispatch(job.fence, reservation_ref, execution_ref))
        except Exception as error:  # noqa: BLE001 - e.g. QF102: the ref the call returned is no name
            self._left_reserved(job, f"finalize_dispatch failed: {error}")
            raise LeaseLost() from error
        if not verdict.took_effect:
            self._left_reserved(job, f"finalize_dispatch {verdict.value}")
            raise LeaseLost()
        job.execution_ref = execution_ref
        self._state.events.emit("dispatch_finalized", "dispatch finalized", **job.fields,
                                reservation_ref=reservation_ref, execution_ref=execution_ref)

    async def release(self, job: InFlight, reservation_ref: str) -> None:
        """The call raised before starting the work: drop the reservation,
        so the claim goes on (its failure is written as usual). Whatever the
        answer, the handler's own error is what the handler sees."""
        verdict = await self._writer.write(job, "release_dispatch",
                                           lambda c: c.release_dispatch(job.fence, reservation_ref))
        if verdict.took_effect:
            job.reservation_ref = None
        self._state.events.emit("dispatch_released", f"dispatch released ({verdict.value}): the external call "
                                "raised before starting the work", **job.fields, reservation_ref=reservation_ref)

    def _left_reserved(self, job: InFlight, why: str) -> None:
        self._state.lose(job, f"{why}: the dispatch stays reserved for a reconciler to adopt")

    async def _refusal(self, job: InFlight) -> BaseException:
        """Why a reservation was refused: a cancel request, or a claim that is gone."""
        try:
            async with self._pool.client() as client:
                claim_state = await client.claim_state(job.fence)
        except PersistenceFailed:
            claim_state = None
        if claim_state is not None and claim_state.cancel_requested:
            job.cancelled.set()
            return JobCancelled()
        self._state.counts["refused"] += 1
        self._state.lose(job, "reserve_dispatch refused: the claim is no longer live")
        return LeaseLost()
