"""Every read the dashboard makes is driven by an index, on both engines:
nothing walks the terminal history without one. PostgreSQL's plans are
taken with sequential scans disabled, so a query no index can serve still
shows its Seq Scan whatever the table sizes; SQLite's are EXPLAIN QUERY
PLAN, where a table read without an index is a bare ``SCAN``. Version 7's
calls (activity, search_jobs, the bulk actions) are functions: on
PostgreSQL their table statistics are checked instead, below."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import datetime, timedelta, timezone

import psycopg

import fenceq
from fenceq import ops
from fenceq.backends import postgres, protocol as reads, sqlite as sqlite_backend
from fenceq.backends.sqlite import database_path
from fenceq.dashboard import app

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
READS = {
    "jobs_by_submission": lambda: reads.jobs_by_submission("s-1"),
    "pending_jobs": lambda: reads.pending_jobs("work", limit=51),
    "pending_jobs, next page": lambda: reads.pending_jobs("work", task="t", after=(1, NOW, "x"), limit=51),
    "claimed_jobs": lambda: reads.claimed_jobs(queue="work", limit=51),
    "finished_jobs": lambda: reads.finished_jobs(NOW - timedelta(days=1), status="failed", limit=51),
    "finished_jobs, next page": lambda: reads.finished_jobs(NOW - timedelta(days=7), queue="work",
                                                            after=(NOW, "x"), limit=51),
    "dead_letter_page": lambda: reads.dead_letter_page(limit=51),
    "dead_letter_page, next page": lambda: reads.dead_letter_page(queue="work", include_handled=True,
                                                                  after=("x", "0" * 32), limit=51),
    "dead_letters_of": lambda: reads.dead_letters_of("x"),
    "attempts": lambda: ops.attempts("x"),
}
# The reads no index can serve yet: docs/observability.md names the index they need.
NEEDS_AN_INDEX: set[tuple[str, str]] = set()


def load_history(client: fenceq.Client) -> None:
    """Pending, claimed, completed and dead-lettered jobs, with submission ids."""
    client.create_queue("work", max_attempts=1)
    client.submit_batch("work", [{"task": "t", "priority": n % 3, "submission_id": f"s-{n}"} for n in range(1200)])
    claims = client.claim_batch(["work"], "w", [fenceq.new_claim_token() for _ in range(1000)])
    client.complete_batch([c.fence for c in claims[:800]])
    for claim in claims[800:900]:
        client.fail(claim.fence, "boom", retry=False)


def test_each_dashboard_read_is_driven_by_an_index(db):
    with db.connect() as client:
        load_history(client)
    db.sql("ANALYZE")
    plans = {name: plan_of(db, READS[name]()) for name in sorted(READS)}
    unserved = {name: plan for name, plan in plans.items()
                if (db.backend, name) not in NEEDS_AN_INDEX and not driven_by_an_index(db.backend, plan)}
    assert not unserved, "\n\n".join(f"{name}:\n{plan}" for name, plan in unserved.items())
    still_scanning = [name for name in plans if (db.backend, name) in NEEDS_AN_INDEX]
    assert all(not driven_by_an_index(db.backend, plans[name]) for name in still_scanning), \
        "an index arrived: drop the read from NEEDS_AN_INDEX"


def plan_of(db, op: ops.Op) -> str:
    if db.backend == "postgres":
        sql, params = postgres.statement(op)
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute("SET enable_seqscan = off")
            rows = psycopg.ClientCursor(conn).execute("EXPLAIN (COSTS OFF) " + sql, params).fetchall()
        return "\n".join(row[0] for row in rows)
    with contextlib.closing(sqlite3.connect(database_path(db.url))) as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sqlite_backend._VIEWS[op.name],
                            sqlite_backend.parameters(op)).fetchall()
    return "\n".join(row[3] for row in rows)


def driven_by_an_index(backend: str, plan: str) -> bool:
    if backend == "postgres":
        return "Index" in plan and "Seq Scan" not in plan
    # Not a table read: the rows of a co-routine the plan builds itself (a
    # view's UNION ALL), or a JSON array of the row at hand (json_each).
    built = {line.split()[1] for line in plan.splitlines() if line.startswith("CO-ROUTINE ")}
    bare_scans = [line for line in plan.splitlines() if line.startswith("SCAN ") and "INDEX" not in line
                  and "subquery" not in line and "VIRTUAL TABLE" not in line and line.split()[1] not in built]
    return "USING INDEX" in plan and not bare_scans


# Version 7 (PostgreSQL): the calls the activity page, the search form and the
# bulk actions make are SQL functions, whose inner plans EXPLAIN does not
# show. Each is run in a transaction with sequential scans disabled, and the
# transaction's own table statistics must show no sequential scan of the
# tables it may read (a read no index serves still scans them then).
HISTORY_TABLES = ("_jobs", "_claims", "_submissions", "_dead_letters", "_activity", "_events")
SEARCHES = {  # the search form's fields (app.SEARCH_FIELDS), as an operator fills them
    "by submission prefix": dict(prefix="s-1"),
    "pending of a queue, by payload": dict(queue="work", status="pending", payload='{"customer": 1}'),
    "claimed": dict(status="claimed", task="t"),
    "failed in the last day, by error": dict(status="failed", window="24h", error="boom"),
    "finished in the last week of a queue": dict(queue="work", window="7d", error="boom"),
}


def test_each_v7_call_of_the_dashboard_reads_through_an_index(pg):
    with pg.connect() as client:
        load_history(client)
    pg.sql("ANALYZE")
    fields = dict.fromkeys(app.SEARCH_FIELDS, "")
    calls = {f"search: {name}": ops.search_jobs(**app.search_arguments({**fields, **form}))
             for name, form in SEARCHES.items()}
    calls["search: next page"] = ops.search_jobs(**app.search_arguments({**fields, "status": "pending"}, 10))
    for span, (_, since) in app.RANGES.items():
        calls[f"activity {span}"] = ops.activity(None, since)
        calls[f"activity {span}, one queue"] = ops.activity("work", since)
    calls["retry_jobs by error"] = ops.retry_jobs("work", None, None, None, "boom", 1000)
    calls["cancel_jobs by payload"] = ops.cancel_jobs("work", None, "t", {"customer": 1}, True, False, 1000)
    calls["replay_dead_letters by task"] = ops.replay_dead_letters("work", None, "t", None, None, 1000)
    calls["retry_jobs of a selection"] = ops.retry_jobs("work", ["a", "b"], None, None, None, 1000)
    scanned = {name: sequential_scans(pg.url, op) for name, op in calls.items()}
    assert not any(scanned.values()), {name: tables for name, tables in scanned.items() if tables}


def sequential_scans(url: str, op: ops.Op) -> list[str]:
    """The history tables a call read by a sequential scan (rolled back: an action changes nothing)."""
    sql, params = postgres.statement(op)
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")
        conn.execute(sql, params).fetchall()
        rows = conn.execute("SELECT relname FROM pg_stat_xact_user_tables WHERE schemaname = 'fenceq'"
                            " AND relname = ANY(%s) AND seq_scan > 0", (list(HISTORY_TABLES),)).fetchall()
        conn.rollback()
    return [row[0] for row in rows]
