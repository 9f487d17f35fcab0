"""The worker's Prometheus metrics (prometheus-client).

Counters follow the worker's structured events (``worker/events.py``): one
listener maps each event to its counter, so no unit of the worker knows
about metrics. Gauges are read when scraped: jobs in flight from the
worker's state, the per-queue figures from ``queue_stats``, cached for
``stats_interval`` so that however many scrapers come the database is asked
at most once per interval. Labels are queue, task, a kind of write or an
outcome: never a job id, a claim token or a payload.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily, Metric

from ..backends.protocol import QueueOverview

log = logging.getLogger("fenceq.observability")

# Events counted per (queue, task): event name -> counter attribute.
JOB_EVENTS = {"claimed": "claimed", "completed": "completed", "failed": "failed", "retry_scheduled": "retried",
              "released": "released", "cancelled": "cancelled", "claim_recovered": "recovered"}
# The fenced writes whose refusal (a stale fence) has an event "<write>_refused".
FENCED_WRITES = ("checkpoint", "complete", "fail", "cancel", "acknowledge", "release")
REAP_OUTCOMES = ("requeued", "failed", "cancelled", "expired")
# How many claims the lost-lease counter remembers, to count each claim once
# (several paths may notice the same loss).
LOST_MEMORY = 4096
HANDLER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)

# queue_stats columns this package names itself: column -> (metric, help).
QUEUE_GAUGES = {
    "pending": ("fenceq_queue_pending_jobs", "Pending jobs (due now or later)."),
    "due": ("fenceq_queue_due_jobs", "Pending jobs whose run_at has come."),
    "claimed": ("fenceq_queue_claimed_jobs", "Jobs claimed and running."),
    "cancel_requested": ("fenceq_queue_cancel_requested_jobs", "Claimed jobs asked to cancel."),
    "oldest_due_age": ("fenceq_queue_oldest_due_age_seconds", "Age of the oldest due job (0 when none is due)."),
    "paused": ("fenceq_queue_paused", "1 while the queue is paused."),
    "max_claimed": ("fenceq_queue_max_claimed", "The queue's limit on claimed jobs (absent: none)."),
    "max_claimed_per_key": ("fenceq_queue_max_claimed_per_key",
                            "The queue's limit on claimed jobs per concurrency key (absent: none)."),
    "busiest_key_claimed": ("fenceq_queue_busiest_key_claimed_jobs",
                            "Claimed jobs of the busiest concurrency key (with a per-key limit)."),
    "rate_limit": ("fenceq_queue_rate_limit", "Claims allowed per rate period (absent: no rate limit)."),
    "rate_period": ("fenceq_queue_rate_period_seconds", "The rate limit's sliding window."),
    "rate_used": ("fenceq_queue_rate_used", "Claims in the current rate window."),
    "blocked": ("fenceq_queue_blocked_jobs", "Pending jobs waiting on dependencies."),
}
QUEUE_COLUMNS_LEFT_OUT = frozenset({"queue", "notify"})


class WorkerMetrics:
    """The worker's counters and histogram, fed by ``on_event``."""

    def __init__(self, registry: CollectorRegistry):
        def jobs(name: str, text: str) -> Counter:
            return Counter(f"fenceq_worker_{name}", text, ("queue", "task"), registry=registry)

        self.claimed = jobs("jobs_claimed", "Jobs this worker claimed.")
        self.completed = jobs("jobs_completed", "Jobs this worker completed.")
        self.failed = jobs("jobs_failed", "Jobs that failed for good (dead-lettered where the queue keeps them).")
        self.retried = jobs("jobs_retried", "Failed runs sent back to pending for a retry.")
        self.released = jobs("jobs_released", "Unfinished jobs released on shutdown (no attempt spent).")
        self.cancelled = jobs("jobs_cancelled", "Jobs cancelled while this worker held them.")
        self.recovered = jobs("claims_recovered", "Claims of uncertain outcome recovered with their nonce.")
        self.lost = jobs("leases_lost", "Claims this worker found no longer live (each claim counted once).")
        self.refused = Counter("fenceq_worker_stale_writes_refused", "Fenced writes the database refused: "
                               "this worker's fence was stale.", ("queue", "task", "write"), registry=registry)
        self.reaped = Counter("fenceq_worker_reaped", "Expired claims and overdue jobs this worker's reap settled.",
                              ("outcome",), registry=registry)
        self.server_switches = Counter("fenceq_worker_server_switches", "Times this worker's connections "
                                       "moved to another database server (a failover).", registry=registry)
        self.handler_seconds = Histogram("fenceq_worker_handler_duration_seconds", "Handler run time.",
                                         ("queue", "task", "outcome"), buckets=HANDLER_BUCKETS, registry=registry)
        self._lost_claims: collections.OrderedDict[tuple, None] = collections.OrderedDict()

    def on_event(self, event: str, fields: dict[str, Any]) -> None:
        """An ``Events`` listener (on the worker's loop)."""
        labels = (str(fields.get("queue", "")), str(fields.get("task", "")))
        counter = JOB_EVENTS.get(event)
        if counter is not None:
            if fields.get("written") is not False:  # a "failed" whose write did not happen is no failure
                getattr(self, counter).labels(*labels).inc()
        elif event.endswith("_refused") and event[: -len("_refused")] in FENCED_WRITES:
            self.refused.labels(*labels, event[: -len("_refused")]).inc()
            self._count_lost(fields, labels)  # a stale fence: this claim is gone
        elif event == "lease_lost":
            self._count_lost(fields, labels)
        elif event == "reaped":
            for outcome in REAP_OUTCOMES:
                if fields.get(outcome):
                    self.reaped.labels(outcome).inc(fields[outcome])
        elif event == "server_switched":
            self.server_switches.inc()
        elif event == "handler_finished":
            self.handler_seconds.labels(*labels, str(fields.get("outcome", ""))).observe(fields["seconds"])

    def _count_lost(self, fields: dict[str, Any], labels: tuple[str, str]) -> None:
        claim = (fields.get("job_id"), fields.get("generation"))
        if claim in self._lost_claims:
            return
        self._lost_claims[claim] = None
        if len(self._lost_claims) > LOST_MEMORY:
            self._lost_claims.popitem(last=False)
        self.lost.labels(*labels).inc()


class QueueFigures:
    """queue_stats rows, read at most once per ``interval`` seconds: a
    scrape within the interval gets the figures of the last read, and
    scrapes that come together wait for one read."""

    def __init__(self, read: Callable[[], Sequence[QueueOverview]], interval: float, reads: Counter,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read
        self._interval = interval
        self._reads = reads
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._rows: Sequence[QueueOverview] = ()
        self.ok = False

    def rows(self) -> Sequence[QueueOverview]:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._interval:
                self._read_at = now  # a failed read is not retried before the interval either
                self._reads.inc()
                try:
                    self._rows, self.ok = self._read(), True
                except Exception as error:  # noqa: BLE001 - a scrape reports it, the worker goes on
                    log.warning("queue_stats could not be read for the metrics: %s", type(error).__name__)
                    self._rows, self.ok = (), False
            return self._rows


class QueueCollector:
    """The per-queue gauges of the queues a worker serves, from ``QueueFigures``.
    Columns a newer schema adds to queue_stats (limits and their usage)
    become ``fenceq_queue_<column>`` (``_seconds`` for intervals)."""

    def __init__(self, figures: QueueFigures, queues: Iterable[str]):
        self._figures = figures
        self._queues = frozenset(queues)

    def describe(self) -> list[Metric]:
        return []  # the column set is known only once read

    def collect(self) -> Iterable[Metric]:
        rows = [row for row in self._figures.rows() if row.queue in self._queues]
        ok = GaugeMetricFamily("fenceq_queue_stats_up", "1 when the last read of queue_stats succeeded.")
        ok.add_metric([], 1.0 if self._figures.ok else 0.0)
        yield ok
        families: dict[str, GaugeMetricFamily] = {}
        for row in rows:
            values = {name: getattr(row, name) for name in QUEUE_GAUGES if hasattr(row, name)} | row.extra
            for column, value in values.items():
                metric = _queue_metric(column, value)
                if metric is None:
                    continue
                name, text, number = metric
                family = families.get(name) or families.setdefault(
                    name, GaugeMetricFamily(name, text, labels=["queue"]))
                family.add_metric([row.queue], number)
        yield from families.values()


def _queue_metric(column: str, value: Any) -> tuple[str, str, float] | None:
    """A queue_stats column as (metric name, help, value); None for columns
    that are no figure (text, times)."""
    if column in QUEUE_COLUMNS_LEFT_OUT:
        return None
    name, text = QUEUE_GAUGES.get(column, (f"fenceq_queue_{column}", f"queue_stats column {column}."))
    if value is None:
        value = timedelta(0) if column == "oldest_due_age" else None
    if isinstance(value, timedelta):
        return (name if name.endswith("_seconds") else name + "_seconds"), text, value.total_seconds()
    if isinstance(value, (bool, int, float)):
        return name, text, float(value)
    return None


def worker_gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge, Info]:
    """In flight, concurrency, seconds since the database last answered, and the worker's info."""
    return (Gauge("fenceq_worker_jobs_in_flight", "Jobs this worker holds now.", registry=registry),
            Gauge("fenceq_worker_concurrency", "Jobs this worker may hold at once.", registry=registry),
            Gauge("fenceq_worker_database_answer_age_seconds",
                  "Seconds since the database last answered one of this worker's calls.", registry=registry),
            Info("fenceq_worker", "This worker: its owner id and backend.", registry=registry))
