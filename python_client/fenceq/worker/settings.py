"""A worker's options, validated once; every unit reads them from here."""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import timedelta

from ..backends import Capabilities, backend_of
from ..errors import ConfigError

# The most jobs one claim_batch, complete_batch or reap round handles.
MAX_BATCH = 1000


def default_owner_id() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{secrets.token_hex(3)}"


def _invalid(message: str) -> ConfigError:
    return ConfigError(f"fenceq: {message}", reason="invalid_request", sqlstate="QF100")


def seconds(value: timedelta | float | int | None, what: str) -> float | None:
    """A positive duration (seconds or timedelta) as seconds; None stays None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise _invalid(f"{what} must be a positive duration")
    return float(value)


@dataclass(frozen=True)
class WorkerSettings:
    """Durations are seconds. ``poll_interval`` and ``control_poll`` are None
    until ``for_backend`` fills in the backend's defaults."""

    queues: tuple[str, ...]
    concurrency: int
    owner_id: str
    lease: float | None
    budget: float | None
    heartbeat_fraction: float
    drain_timeout: float
    poll_interval: float | None
    control_poll: float | None
    reap_interval: float | None
    purge_after: timedelta | None
    purge_submissions_after: timedelta | None
    purge_interval: float
    complete_window: float
    batch_completions: bool
    cancel_grace: float | None
    record_pid: bool
    connections: int
    listen_url: str | None = None
    read_url: str | None = None    # the metrics' queue_stats are read here (a standby) when given
    # The metrics and health endpoints (docs/observability.md); no port: none.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    health_window: float = 30.0    # /healthz fails once the database has not answered for this long
    stats_interval: float = 5.0    # queue_stats is read at most once per this, however many scrape

    @classmethod
    def from_options(cls, *, queues, concurrency, owner_id, lease, budget, heartbeat_fraction, drain_timeout,
                     poll_interval, control_poll, reap_interval, purge_after, purge_submissions_after,
                     purge_interval, complete_window, batch_completions, cancel_grace, record_pid,
                     connections, listen_url=None, metrics_port=None, metrics_host="127.0.0.1",
                     health_window=30.0, stats_interval=5.0, read_url=None) -> "WorkerSettings":
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 10_000:
            raise _invalid("concurrency must be an integer from 1 to 10000")
        if not 0 < heartbeat_fraction < 1:
            raise _invalid("heartbeat_fraction must be between 0 and 1")
        if not queues:
            raise _invalid("a worker needs at least one queue")
        if listen_url is not None and backend_of(listen_url) != "postgres":
            raise _invalid("listen_url must be a postgresql:// URL")
        if read_url is not None and backend_of(read_url) != "postgres":
            raise _invalid("read_url must be a postgresql:// URL")
        if metrics_port is not None and (isinstance(metrics_port, bool) or not isinstance(metrics_port, int)
                                         or not 0 <= metrics_port <= 65535):
            raise _invalid("metrics_port must be a port number from 0 to 65535")
        return cls(
            queues=tuple(queues), concurrency=concurrency, owner_id=owner_id or default_owner_id(),
            lease=seconds(lease, "lease"), budget=seconds(budget, "budget"),
            heartbeat_fraction=heartbeat_fraction,
            drain_timeout=seconds(drain_timeout or None, "drain_timeout") or 0.0,
            poll_interval=seconds(poll_interval, "poll_interval"),
            control_poll=seconds(control_poll, "control_poll"),
            reap_interval=seconds(reap_interval, "reap_interval"),
            purge_after=purge_after, purge_submissions_after=purge_submissions_after,
            purge_interval=seconds(purge_interval, "purge_interval") or 60.0,
            complete_window=max(0.0, float(complete_window)), batch_completions=batch_completions,
            cancel_grace=seconds(cancel_grace, "cancel_grace"), record_pid=record_pid,
            connections=connections or max(2, min(concurrency, 8)), listen_url=listen_url or None,
            read_url=read_url or None,
            metrics_port=metrics_port, metrics_host=metrics_host,
            health_window=seconds(health_window, "health_window") or 30.0,
            stats_interval=seconds(stats_interval, "stats_interval") or 5.0)

    def for_backend(self, capabilities: Capabilities) -> "WorkerSettings":
        """The intervals left unset take the backend's defaults (long where
        notifications wake the worker, short where it can only poll)."""
        return dataclasses.replace(self, poll_interval=self.poll_interval or capabilities.poll_interval,
                                   control_poll=self.control_poll or capabilities.control_poll)

    @property
    def lease_delta(self) -> timedelta | None:
        """The lease sent with claims and heartbeats (None: the queue's)."""
        return timedelta(seconds=self.lease) if self.lease else None

    @property
    def budget_delta(self) -> timedelta | None:
        return timedelta(seconds=self.budget) if self.budget else None
