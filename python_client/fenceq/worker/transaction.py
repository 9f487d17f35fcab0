"""A handler's transaction (``ctx.transaction()``, docs/transactions.md):
the handler's own statements, the follow-up jobs it submits and the job's
completion under its fence commit together, or none of them do.

The block runs on a client of its own (kept for the next block after a clean
commit, never one the other calls take turns on, so heartbeats go on
meanwhile). On leaving it, ``complete`` runs inside the
transaction, after locking the job's row: COMMIT follows only when it
answered true. When it answered false the transaction rolls back and the
handler meets ``LeaseLost`` (a stale or expired fence) or ``JobCancelled``
(a cancel request). A COMMIT whose answer was lost is settled as every
uncertain write is: the job row tells whether this claim's completion, and
with it the handler's writes, landed.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator

from ..errors import ConfigError, PersistenceFailed, config_error
from ..types import ClaimState
from .context import AsyncJobTransaction, JobCancelled, LeaseLost, NonRetryable
from .fenced_writer import FencedWriter, completed_by
from .pool import Pool
from .state import InFlight, WorkerState


class Transactions:
    def __init__(self, state: WorkerState, pool: Pool, writer: FencedWriter):
        self._state = state
        self._pool = pool
        self._writer = writer
        self._idle: list[Any] = []  # transaction clients between blocks (one per slot at most)

    @contextlib.asynccontextmanager
    async def open(self, job: InFlight) -> AsyncIterator[AsyncJobTransaction]:
        if job.committed:
            raise config_error("QF100", "this job's transaction committed already: the job is completed")
        if job.lost.is_set() or job.abandoned:
            raise LeaseLost()
        # A client of the block's own: heartbeats and the other calls never wait for it.
        client = self._idle.pop() if self._idle else await self._pool.spare()
        committing = committed = clean = False
        try:
            async with client.transaction(own_connection=True) as tx:
                block = AsyncJobTransaction(tx)
                yield block
                # From here a refused heartbeat may mean this completion took effect.
                job.completing = True
                if not await self._complete(tx, job, block.result):
                    self._refused(job, await tx.claim_state(job.fence))
                committing = True
            committed = clean = True
        except PersistenceFailed:
            # Only COMMIT's answer can be lost once committing: ask the job row.
            if not committing or not await self._writer.landed(job, "transaction", completed_by(job)):
                raise
            committed = True
        finally:
            job.completing = committed
            await self._put_back(client, clean)
        job.committed = True

    async def _put_back(self, client: Any, clean: bool) -> None:
        """Keep a client whose block committed cleanly for the next block; any
        other may have left its connection in doubt: close it."""
        if clean:
            self._idle.append(client)
        else:
            await self._pool.discard(client)

    @staticmethod
    async def _complete(tx: Any, job: InFlight, result: Any) -> bool:
        try:
            return await tx.complete(job.fence, result)
        except ConfigError as error:
            # The result is not storable JSON: no retry would fix it.
            raise NonRetryable(f"the transaction's result could not be stored: {error}") from error

    def _refused(self, job: InFlight, standing: ClaimState | None) -> None:
        """The completion in the transaction answered false: say why (it rolls back)."""
        state = self._state
        if standing is not None and standing.cancel_requested:
            job.cancelled.set()
            state.events.emit("transaction_rolled_back", "transaction rolled back: a cancel was requested",
                              level=logging.WARNING, **job.fields)
            raise JobCancelled()
        state.counts["refused"] += 1
        state.lose(job, "transaction rolled back: its completion was refused (the fence is stale or expired)")
        raise LeaseLost()
