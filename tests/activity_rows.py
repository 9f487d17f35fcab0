"""Rows of version 7's sampled series (``_activity``) written straight into
the table, as ``sample_activity`` writes them, so that a test or the docs'
screenshots get a week of history without waiting a week: the dashboard's
tests and scripts/dashboard-screenshots use it. The layout is the
migration's (docs/design-v7.md §1); both engines."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from datetime import datetime, timedelta, timezone

import psycopg

from fenceq.backends.sqlite import database_path

COUNTS = ("submitted", "claimed", "retried", "completed", "failed", "cancelled", "expired")
COLUMNS = ("queue", "minute") + COUNTS + ("pending", "due", "running", "wait_hist", "run_hist")


def last_closed_minute() -> datetime:
    """The newest minute sample_activity may write: the one before the minute
    of now − 10 s (a minute closes 10 seconds after it ends)."""
    now = datetime.now(timezone.utc) - timedelta(seconds=10)
    return now.replace(second=0, microsecond=0) - timedelta(minutes=1)


def record_activity(url: str, queue: str, minutes: list[dict]) -> datetime:
    """Rows of the sampled series as sample_activity writes them, the last one
    on the last closed minute (so that a test need not wait for minutes to
    pass); each dict gives some of the counts and depths, and ``wait``/``run``
    histograms as {bucket: count}. The minute of the last row."""
    last = last_closed_minute()
    rows = []
    for age, figures in enumerate(reversed(minutes)):
        minute = last - timedelta(minutes=age)
        hists = [histogram(figures.get(name, {})) for name in ("wait", "run")]
        rows.append((queue, minute, *(figures.get(c, 0) for c in COUNTS),
                     *(figures.get(d) for d in ("pending", "due", "running")), *hists))
    names = ", ".join(COLUMNS)
    if url.startswith("postgresql"):
        # No prepared statements: the URL may go through PgBouncer in transaction mode.
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn, conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO fenceq._activity ({names}) VALUES ({', '.join(['%s'] * 14)})", rows)
    else:  # SQLite keeps a minute as microseconds since the epoch, a histogram as JSON
        with contextlib.closing(sqlite3.connect(database_path(url))) as conn, conn:
            conn.executemany(f"INSERT INTO fenceq__activity ({names}) VALUES ({', '.join(['?'] * 14)})",
                             [(q, int(m.timestamp()) * 1_000_000, *rest[:-2], json.dumps(rest[-2]),
                               json.dumps(rest[-1])) for q, m, *rest in rows])
    return last


def histogram(counts: dict[int, int]) -> list[int]:
    """A stored histogram: bucket k counts durations of 2^(k/4) to 2^((k+1)/4) ms, trimmed."""
    return [counts.get(k, 0) for k in range(max(counts, default=-1) + 1)]
