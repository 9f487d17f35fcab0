"""The thin client: sync ``Client`` and async ``AsyncClient`` (docs/guarantees.md §8).

Both inherit every method from ``_Operations``: a method validates its
inputs into an ``Op`` (``ops.py``) and hands it to ``_call``, which the sync
client runs at once and the async client returns as a coroutine. The
client retries nothing: after ``PersistenceFailed`` retry the same
submission, or ``recover_claim`` with the same token. The backend behind a
client is any ``backends.Backend`` / ``backends.AsyncBackend``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence

from . import ops
from .backends import AsyncBackend, Backend, backend_of, open_async_backend, open_backend
from .backends import protocol as reads
from .backends.migrations import migrate
from .errors import config_error
from .locks import AsyncHeldLock, HeldLock
from .types import (ActivityBucket, Claim, ClaimState, DeadLetter, Dispatch, DispatchCandidate, Fence, Job,
                    JobEvent, JobPage, Schedule)
from .waiting import Waiter

__all__ = ["AsyncClient", "AsyncTransaction", "Client", "Transaction", "backend_of", "connect", "connect_async", "resolve_url"]

DEFAULT_URL = "sqlite:///fenceq.db"


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else $FENCEQ_DATABASE_URL, else the
    embedded SQLite file ./fenceq.db."""
    return url or os.environ.get("FENCEQ_DATABASE_URL") or DEFAULT_URL


class _Operations:
    """Every operation of docs/guarantees.md §3, once for both clients."""

    def __init__(self, backend: Backend | AsyncBackend, url: str | None = None):
        self._backend = backend
        self.url = url

    @property
    def backend(self) -> str:
        return self._backend.name

    def _call(self, op: ops.Op) -> Any:
        raise NotImplementedError

    def _call_then(self, op: ops.Op, finish: Callable[[Any], Any]) -> Any:
        """``_call``, then ``finish`` on its answer (awaited first by the async clients)."""
        raise NotImplementedError

    # Queues
    def create_queue(self, queue: str, *, lease: timedelta | None = None, max_attempts: int | None = None,
                     backoff_base: timedelta | None = None, backoff_factor: float | None = None,
                     backoff_max: timedelta | None = None, dead_letter: bool | None = None,
                     requeue_priority: str | None = None) -> bool:
        """``requeue_priority``: where a job requeued by ``reap`` re-enters
        (``keep``, the default, ``first`` or ``last``)."""
        return self._call(ops.create_queue(queue, lease, max_attempts, backoff_base, backoff_factor,
                                           backoff_max, dead_letter, requeue_priority))

    def alter_queue(self, queue: str, *, lease: timedelta | None = None, max_attempts: int | None = None,
                    backoff_base: timedelta | None = None, backoff_factor: float | None = None,
                    backoff_max: timedelta | None = None, dead_letter: bool | None = None,
                    requeue_priority: str | None = None) -> None:
        return self._call(ops.alter_queue(queue, lease, max_attempts, backoff_base, backoff_factor,
                                          backoff_max, dead_letter, requeue_priority))

    def pause_queue(self, queue: str) -> bool:
        return self._call(ops.pause_queue(queue))

    def resume_queue(self, queue: str) -> bool:
        return self._call(ops.resume_queue(queue))

    def set_queue_notify(self, queue: str, notify: bool) -> bool:
        return self._call(ops.set_queue_notify(queue, notify))

    def set_queue_notify_done(self, queue: str, notify: bool) -> bool:
        return self._call(ops.set_queue_notify_done(queue, notify))

    def set_queue_history(self, queue: str, enabled: bool, *, retention: timedelta | None = None) -> bool:
        """Whether the queue's jobs write events (``get_job_events``);
        ``retention``: ``purge`` removes events older than this."""
        return self._call(ops.set_queue_history(queue, enabled, retention))

    def set_queue_limits(self, queue: str, *, max_claimed: int | None = None,
                         max_claimed_per_key: int | None = None, rate_limit: int | None = None,
                         rate_period: timedelta | None = None) -> None:
        """Set all four limits at once (None = no such limit; all None removes them)."""
        return self._call(ops.set_queue_limits(queue, max_claimed, max_claimed_per_key, rate_limit, rate_period))

    # Producers
    def submit(self, queue: str, task: str, payload: Any = None, *, submission_id: str | None = None,
               job_id: str | None = None, priority: int | None = None, run_at: datetime | None = None,
               expires_at: datetime | None = None, max_attempts: int | None = None,
               active_key: str | None = None, force: bool = False,
               concurrency_key: str | None = None, depends_on: Sequence[str] | None = None) -> str:
        return self._call(ops.submit(queue, task, payload, submission_id, job_id, priority, run_at,
                                     expires_at, max_attempts, active_key, force, concurrency_key,
                                     depends_on))

    def submit_batch(self, queue: str, requests: Iterable[Mapping[str, Any]]) -> list[str]:
        return self._call(ops.submit_batch(queue, requests))

    # Workers
    def claim_next(self, queues: Sequence[str], owner_id: str, claim_token: str, *,
                   lease: timedelta | None = None, budget: timedelta | None = None) -> Claim | None:
        return self._call(ops.claim_next(queues, owner_id, claim_token, lease, budget))

    def claim_batch(self, queues: Sequence[str], owner_id: str, claim_tokens: Sequence[str], *,
                    lease: timedelta | None = None, budget: timedelta | None = None) -> list[Claim]:
        return self._call(ops.claim_batch(queues, owner_id, claim_tokens, lease, budget))

    def claim_jobs(self, queues: Sequence[str], owner_id: str, claim_nonce: str, max_jobs: int, *,
                   lease: timedelta | None = None, budget: timedelta | None = None) -> list[Claim]:
        return self._call(ops.claim_jobs(queues, owner_id, claim_nonce, max_jobs, lease, budget))

    def recover_claim(self, owner_id: str, claim_token: str) -> Claim | None:
        return self._call(ops.recover_claim(owner_id, claim_token))

    def recover_claims(self, owner_id: str, claim_nonce: str) -> list[Claim]:
        return self._call(ops.recover_claims(owner_id, claim_nonce))

    def heartbeat(self, fence: Fence, *, lease: timedelta | None = None) -> bool:
        return self._call(ops.heartbeat(fence, lease))

    def heartbeat_batch(self, fences: Sequence[Fence], *, lease: timedelta | None = None) -> list[bool]:
        return self._call(ops.heartbeat_batch(fences, lease))

    def complete(self, fence: Fence, result: Any = None) -> bool:
        return self._call(ops.complete(fence, result))

    def complete_batch(self, fences: Sequence[Fence], results: Sequence[Any] | None = None) -> list[bool]:
        return self._call(ops.complete_batch(fences, results))

    def fail(self, fence: Fence, error: str, *, retry: bool = True, retry_at: datetime | None = None) -> bool:
        return self._call(ops.fail(fence, error, retry, retry_at))

    def release(self, fence: Fence, *, run_at: datetime | None = None) -> bool:
        return self._call(ops.release(fence, run_at))

    def checkpoint(self, fence: Fence, step: str, value: Any) -> Any:
        return self._call(ops.checkpoint(fence, step, value))

    def set_pid(self, fence: Fence, pid: int) -> bool:
        return self._call(ops.set_pid(fence, pid))

    def progress(self, fence: Fence, progress: Any) -> bool:
        return self._call(ops.progress(fence, progress))

    def claim_state(self, fence: Fence) -> ClaimState | None:
        return self._call(ops.claim_state(fence))

    def acknowledge_cancel(self, fence: Fence) -> bool:
        return self._call(ops.acknowledge_cancel(fence))

    # External execution (docs/external-execution.md)
    def reserve_dispatch(self, fence: Fence, backend: str, reservation_ref: str) -> bool:
        return self._call(ops.reserve_dispatch(fence, backend, reservation_ref))

    def finalize_dispatch(self, fence: Fence, reservation_ref: str, execution_ref: str) -> bool:
        return self._call(ops.finalize_dispatch(fence, reservation_ref, execution_ref))

    def release_dispatch(self, fence: Fence, reservation_ref: str) -> bool:
        return self._call(ops.release_dispatch(fence, reservation_ref))

    def replace_dispatch_ref(self, fence: Fence, expected_ref: str, execution_ref: str) -> bool:
        return self._call(ops.replace_dispatch_ref(fence, expected_ref, execution_ref))

    def adopt_dispatch(self, job_id: str, backend: str, expected_ref: str, owner_id: str, claim_token: str, *,
                       lease: timedelta | None = None) -> Claim | None:
        return self._call(ops.adopt_dispatch(job_id, backend, expected_ref, owner_id, claim_token, lease))

    def dispatch_repair_candidates(self, backend: str, *, max_rows: int | None = None) -> list[DispatchCandidate]:
        return self._call(ops.dispatch_repair_candidates(backend, max_rows))

    def reap(self, *, max_rows: int | None = None):
        return self._call(ops.reap(max_rows))

    # Named locks (docs/guarantees.md §15)
    def acquire_lock(self, lock: str, owner_id: str, ttl: timedelta) -> int | None:
        return self._call(ops.acquire_lock(lock, owner_id, ttl))

    def renew_lock(self, lock: str, owner_id: str, token: int, ttl: timedelta) -> bool:
        return self._call(ops.renew_lock(lock, owner_id, token, ttl))

    def release_lock(self, lock: str, owner_id: str, token: int) -> bool:
        return self._call(ops.release_lock(lock, owner_id, token))

    def check_lock(self, lock: str, token: int) -> bool:
        return self._call(ops.check_lock(lock, token))

    # Time (docs/guarantees.md §13)
    def next_due(self, queues: Sequence[str]) -> datetime | None:
        return self._call(ops.next_due(queues))

    def extend(self, fence: Fence, budget: timedelta) -> bool:
        return self._call(ops.extend(fence, budget))

    def cancel_matching(self, queue: str, *, task: str | None = None, payload_contains: Any = None,
                        include_claimed: bool = False, force: bool = False, max_rows: int = 10_000) -> int:
        return self._call(ops.cancel_matching(queue, task, payload_contains, include_claimed, force, max_rows))

    # Operators
    def cancel(self, job_id: str, *, force: bool = False) -> str | None:
        return self._call(ops.cancel(job_id, force))

    def get_job(self, job_id: str) -> Job | None:
        return self._call(ops.get_job(job_id))

    def attempts(self, job_id: str):
        return self._call(ops.attempts(job_id))

    def get_job_events(self, job_id: str) -> list[JobEvent]:
        return self._call(ops.get_job_events(job_id))

    def stats(self):
        return self._call(ops.stats())

    def dead_letters(self, *, queue: str | None = None, include_handled: bool = False,
                     limit: int = 100) -> list[DeadLetter]:
        return self._call(ops.dead_letters(queue, include_handled, limit))

    def purge(self, older_than: timedelta, *, max_rows: int | None = None,
              submissions_older_than: timedelta | None = None) -> int:
        return self._call(ops.purge(older_than, max_rows, submissions_older_than))

    def replay_dead_letter(self, dlq_id: str) -> str | None:
        return self._call(ops.replay_dead_letter(dlq_id))

    def discard_dead_letter(self, dlq_id: str) -> bool:
        return self._call(ops.discard_dead_letter(dlq_id))

    def verify_schema(self):
        return self._call(ops.verify_schema())

    # The operator's view over time (docs/design-v7.md)
    def sample_activity(self, *, max_minutes: int | None = None, keep: timedelta | None = None) -> int:
        """Write each queue's closed minutes since its last sample (at most
        ``max_minutes``, default 60; a minute closes 10 seconds after it
        ends) and delete samples older than ``keep`` (default 192 hours);
        how many rows were written. The worker's maintenance calls it."""
        return self._call(ops.sample_activity(max_minutes, keep))

    def activity(self, *, queue: str | None = None, since: timedelta = timedelta(hours=1),
                 bucket: timedelta | None = None) -> list[ActivityBucket]:
        """One queue's (or, without ``queue``, all queues') activity over
        the last ``since`` (at most 192 hours), oldest bucket first: every
        one of the ceil(since / bucket) buckets, the last ending where the
        closed minutes end."""
        return self._call(ops.activity(queue, since, bucket))

    def search_jobs(self, *, queue: str | None = None, status: str | None = None, task: str | None = None,
                    payload_contains: Any = None, error_contains: str | None = None,
                    submission_prefix: str | None = None, since: datetime | None = None,
                    until: datetime | None = None, before_seq: int | None = None, max_rows: int = 50,
                    max_scan: int = 10_000) -> JobPage:
        """Jobs newest first, from one index range: a submission prefix,
        else a live status, else the jobs finished in [since, until) (a
        terminal status, ``since``, ``until`` or ``error_contains``), at most
        ``max_scan`` rows of it; the next page with
        ``before_seq=page.next_before_seq``."""
        return self._call_then(ops.search_jobs(queue, status, task, payload_contains, error_contains,
                                               submission_prefix, since, until, before_seq, max_rows, max_scan),
                               JobPage.of)

    def retry_jobs(self, queue: str, *, job_ids: Sequence[str] | None = None, task: str | None = None,
                   payload_contains: Any = None, error_contains: str | None = None, max_rows: int = 1_000) -> int:
        """Make the queue's jobs waiting for a retry due now: those of
        ``job_ids`` and/or matching the filter; how many changed."""
        return self._call(ops.retry_jobs(queue, job_ids, task, payload_contains, error_contains, max_rows))

    def cancel_jobs(self, queue: str, *, job_ids: Sequence[str] | None = None, task: str | None = None,
                    payload_contains: Any = None, include_claimed: bool = False, force: bool = False,
                    max_rows: int = 1_000) -> int:
        """``cancel_matching``'s rule on ``job_ids`` and/or a filter, each
        change recorded as an event; how many changed."""
        return self._call(ops.cancel_jobs(queue, job_ids, task, payload_contains, include_claimed, force,
                                          max_rows))

    def replay_dead_letters(self, queue: str, *, job_ids: Sequence[str] | None = None, task: str | None = None,
                            payload_contains: Any = None, error_contains: str | None = None,
                            max_rows: int = 1_000) -> int:
        """Replay the unhandled dead letters of the queue's failed jobs of
        ``job_ids`` and/or matching the filter; how many jobs changed."""
        return self._call(ops.replay_dead_letters(queue, job_ids, task, payload_contains, error_contains,
                                                  max_rows))

    # Schedules
    def set_schedule(self, schedule: str, queue: str, task: str, cron: str, payload: Any = None, *,
                     time_zone: str = "UTC", priority: int | None = None, max_attempts: int | None = None,
                     active_key: str | None = None, paused: bool = False) -> bool:
        return self._call(ops.set_schedule(schedule, queue, task, cron, payload, time_zone, priority,
                                           max_attempts, active_key, paused))

    def drop_schedule(self, schedule: str) -> bool:
        return self._call(ops.drop_schedule(schedule))

    def tick(self, *, max_rows: int | None = None) -> int:
        return self._call(ops.tick(max_rows))

    def version(self) -> str:
        return self._call(ops.version())

    # Reads for operators' tools (backends/protocol.py: keyset pages of the views)
    def present_views(self) -> list[str]:
        return self._call(reads.present_views())

    def replica_lag(self) -> float | None:
        return self._call(reads.replica_lag())

    def queue_overview(self) -> list[reads.QueueOverview]:
        return self._call(reads.queue_overview())

    def jobs_by_submission(self, submission_id: str) -> list[Job]:
        return self._call(reads.jobs_by_submission(submission_id))

    def pending_jobs(self, queue: str, *, task: str | None = None, after: tuple | None = None,
                     limit: int = 50) -> list[Job]:
        return self._call(reads.pending_jobs(queue, task, after, limit))

    def claimed_jobs(self, *, queue: str | None = None, task: str | None = None, after: str | None = None,
                     limit: int = 50) -> list[Job]:
        return self._call(reads.claimed_jobs(queue, task, after, limit))

    def finished_jobs(self, since: datetime, *, status: str | None = None, queue: str | None = None,
                      task: str | None = None, after: tuple | None = None, limit: int = 50) -> list[Job]:
        return self._call(reads.finished_jobs(since, status, queue, task, after, limit))

    def dead_letter_page(self, *, queue: str | None = None, include_handled: bool = False,
                         after: tuple | None = None, limit: int = 50) -> list[DeadLetter]:
        return self._call(reads.dead_letter_page(queue, include_handled, after, limit))

    def dead_letters_of(self, job_id: str) -> list[DeadLetter]:
        return self._call(reads.dead_letters_of(job_id))

    def checkpoints(self, job_id: str) -> list[reads.Checkpoint]:
        return self._call(reads.checkpoints(job_id))

    def schedules(self, *, after: str | None = None, limit: int = 50) -> list[Schedule]:
        return self._call(reads.schedules(after, limit))

    def locks(self, *, after: str | None = None, limit: int = 50) -> list[reads.Lock]:
        return self._call(reads.locks(after, limit))

    def dispatches(self, *, backend: str | None = None, after: str | None = None,
                   limit: int = 50) -> list[Dispatch]:
        return self._call(reads.dispatches(backend, after, limit))


class Client(_Operations):
    """Synchronous client. Use ``fenceq.connect``."""

    _backend: Backend

    def _call(self, op: ops.Op) -> Any:
        return self._backend.run(op)

    def _call_then(self, op: ops.Op, finish: Callable[[Any], Any]) -> Any:
        return finish(self._backend.run(op))

    def wait(self, job_id: str, *, timeout: float | timedelta | None = None) -> Job | None:
        """The job once it is terminal (None when there is no such job),
        ``TimeoutError`` (``waiting.WaitTimeout``) after ``timeout``
        seconds: docs/guarantees.md §17."""
        return Waiter().wait(self._backend, job_id, timeout)

    def submit_and_wait(self, queue: str, task: str, payload: Any = None, *,
                        timeout: float | timedelta | None = None, **options: Any) -> Job | None:
        """``submit`` (``options`` are its keywords), then ``wait``; the
        timeout's ``job_id`` names the job."""
        return self.wait(self.submit(queue, task, payload, **options), timeout=timeout)

    def migrate(self) -> list:
        """Apply the migrations for this client's URL, then verify_schema."""
        if self.url is None:
            raise config_error("QF100", "migrate needs a client opened from a URL")
        return migrate(self.url)

    def lock(self, lock: str, owner_id: str, *, ttl: timedelta,
             on_lost: Callable[[], Any] | None = None) -> HeldLock:
        """``with client.lock(...) as held``: hold a named lock for a block,
        renewed in a background thread (fenceq/locks.py)."""
        return HeldLock(self, lock, owner_id, ttl, on_lost)

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Transaction"]:
        """``with client.transaction() as tx``: a transaction on a
        connection of its own (docs/transactions.md), in which ``tx``'s
        operations and ``tx.execute`` statements commit together when the
        block ends, or roll back when it raises."""
        with self._backend.transaction() as tx:
            yield Transaction(tx)

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Operations):
    """Asynchronous client: every method returns an awaitable. Use
    ``await fenceq.connect_async``."""

    _backend: AsyncBackend

    async def _call(self, op: ops.Op) -> Any:
        return await self._backend.run(op)

    async def _call_then(self, op: ops.Op, finish: Callable[[Any], Any]) -> Any:
        return finish(await self._backend.run(op))

    async def wait(self, job_id: str, *, timeout: float | timedelta | None = None) -> Job | None:
        return await Waiter().wait_async(self._backend, job_id, timeout)

    async def submit_and_wait(self, queue: str, task: str, payload: Any = None, *,
                              timeout: float | timedelta | None = None, **options: Any) -> Job | None:
        return await self.wait(await self.submit(queue, task, payload, **options), timeout=timeout)

    async def migrate(self) -> list:
        if self.url is None:
            raise config_error("QF100", "migrate needs a client opened from a URL")
        return await asyncio.to_thread(migrate, self.url)

    def lock(self, lock: str, owner_id: str, *, ttl: timedelta,
             on_lost: Callable[[], Any] | None = None) -> AsyncHeldLock:
        """``async with client.lock(...) as held``: hold a named lock for a
        block, renewed by a background task (fenceq/locks.py)."""
        return AsyncHeldLock(self, lock, owner_id, ttl, on_lost)

    @contextlib.asynccontextmanager
    async def transaction(self, own_connection: bool = False) -> AsyncIterator["AsyncTransaction"]:
        """``async with client.transaction() as tx``: as ``Client.transaction``.
        ``own_connection``: on this client's own connection instead of a
        new one, for a client that nothing else uses meanwhile."""
        async with self._backend.transaction(own_connection) as tx:
            yield AsyncTransaction(tx)

    async def close(self) -> None:
        await self._backend.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Transaction(_Operations):
    """An open transaction of ``Client.transaction``: every operation runs
    inside it, and ``execute`` runs your own statements there (psycopg's or
    sqlite3's placeholders and errors)."""

    def _call(self, op: ops.Op) -> Any:
        return self._backend.run(op)

    def _call_then(self, op: ops.Op, finish: Callable[[Any], Any]) -> Any:
        return finish(self._backend.run(op))

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run one statement; its rows (none for a statement without)."""
        return self._backend.execute(sql, params)


class AsyncTransaction(_Operations):
    """An open transaction of ``AsyncClient.transaction``."""

    async def _call(self, op: ops.Op) -> Any:
        return await self._backend.run(op)

    async def _call_then(self, op: ops.Op, finish: Callable[[Any], Any]) -> Any:
        return finish(await self._backend.run(op))

    async def execute(self, sql: str, params: Any = None) -> list[tuple]:
        return await self._backend.execute(sql, params)


def connect(url: str | None = None, *, connection: Any = None, pool: Any = None,
            listen_url: str | None = None) -> Client:
    """Open a client. Pass a URL (postgresql://… or sqlite:///…; default
    $FENCEQ_DATABASE_URL, else the embedded ./fenceq.db), or a psycopg
    ``Connection`` / ``ConnectionPool`` you own: calls then run inside your
    connection's current transaction, or on a pooled connection. Connecting
    does not migrate. ``listen_url`` (PostgreSQL) is a direct URL of the same
    database where ``wait`` listens, when the calls go through PgBouncer
    (or run on your own connection); without it such a wait only polls."""
    if connection is not None or pool is not None:
        return Client(open_backend(connection=connection, pool=pool, listen_url=listen_url))
    resolved = resolve_url(url)
    return Client(open_backend(resolved, listen_url=listen_url), resolved)


async def connect_async(url: str | None = None, *, connection: Any = None, pool: Any = None,
                        listen_url: str | None = None) -> AsyncClient:
    """Async twin of ``connect``: accepts an ``AsyncConnection`` or
    ``AsyncConnectionPool`` you own."""
    if connection is not None or pool is not None:
        return AsyncClient(await open_async_backend(connection=connection, pool=pool, listen_url=listen_url))
    resolved = resolve_url(url)
    return AsyncClient(await open_async_backend(resolved, listen_url=listen_url), resolved)
