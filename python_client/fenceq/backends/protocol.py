"""The interface the client and the worker depend on, and nothing more.

A backend runs an ``Op`` (``ops.py``) on one database engine and answers in
the op's declared result type. The async form adds what a long-running
worker needs beyond operations: notifications, an exclusive duty across the
fleet, and telling "fenceq is not installed" apart from other failures.
Every driver import and every engine-specific line lives in this package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncContextManager, AsyncIterator, ContextManager, Protocol, Sequence

from ..ops import Op

# The channels the SQL notifies on (PostgreSQL): a job of the named queue is
# due, and a claim's state changed (the payload is the job id).
JOBS_CHANNEL = "fenceq_jobs"
CONTROL_CHANNEL = "fenceq_control"
# A job reached a terminal state (the payload is its id), where its queue's
# notify_done switch is on.
DONE_CHANNEL = "fenceq_done"


@dataclass(frozen=True)
class Capabilities:
    notifications: bool    # listen() delivers JOBS_CHANNEL and CONTROL_CHANNEL messages
    poll_interval: float   # seconds: a worker's default longest idle wait between claims
    control_poll: float    # seconds: a worker's default interval between claim_state reads


@dataclass(frozen=True)
class Notification:
    channel: str
    payload: str


class Listener(Protocol):
    def notifications(self, timeout: float) -> list[Notification]:
        """Wait up to ``timeout`` seconds for notifications; those that
        arrived (none at the timeout). Raises ``PersistenceFailed`` once
        the connection is lost."""


class AsyncListener(Protocol):
    async def notifications(self, timeout: float) -> list[Notification]: ...


class Backend(Protocol):
    name: str                   # "postgres" or "sqlite"
    capabilities: Capabilities

    def run(self, op: Op) -> Any:
        """Run one operation; raise a ``FenceqError`` (``PersistenceFailed``
        when the outcome is unknown)."""

    def close(self) -> None: ...

    def listener(self, channels: Sequence[str]) -> ContextManager[Listener | None]:
        """For the block, a connection of its own (never the one calls run
        on) subscribed to ``channels``; None when the backend has none to
        offer (no notifications, or the caller's own connection)."""


class AsyncBackend(Protocol):
    name: str
    capabilities: Capabilities

    async def run(self, op: Op) -> Any: ...

    async def close(self) -> None: ...

    def listen(self, channels: Sequence[str]) -> AsyncContextManager[AsyncIterator[Notification]]:
        """Subscribe this backend's connection to ``channels`` for the block;
        the iterator raises ``PersistenceFailed`` once the connection is lost.
        Only when ``capabilities.notifications``."""

    def exclusive(self, duty: str) -> AsyncContextManager[AsyncBackend | None]:
        """For the block, a backend whose calls run as the fleet's only
        holder of ``duty``, or None when another process holds it now."""

    def schema_missing(self, error: BaseException) -> bool:
        """Whether a failed call says fenceq is not installed in the database."""

    def listener(self, channels: Sequence[str]) -> AsyncContextManager[AsyncListener | None]:
        """As ``Backend.listener``."""
