"""fenceq v4 for SQLite: dependencies between jobs.

Why: version 4 brings dependencies (docs/guarantees.md §16) to SQLite,
which PostgreSQL has had since version 3: two columns appended to the job
table (blocked_by, blocked_run_at), the table of dependency edges with its
index and view, and the jobs and queue_stats views with real blocked_by and
blocked counts. It applies sql/0004_fenceq_v4.sql: the two views are
dropped, the columns appended (ALTER TABLE ... ADD COLUMN rewrites no row),
the table, index and views created, the schema version set to 4. It takes
the write lock for that only.

Rollback drops what only version 4 has and sets the version back to 3. It
takes the write lock, then refuses (QF901) while a job still waits on a
dependency, unless FENCEQ_ALLOW_DATA_LOSS=1: then each waiting job becomes
due at the run_at it asked for, as version 3 cannot hold it back.
"""

import os
import sqlite3
from pathlib import Path

from yoyo import step

from fenceq.errors import config_error

FOLDER = Path(__file__).parent / "sql"
V4_JOB_COLUMNS = ("blocked_by", "blocked_run_at")
V4_VIEWS = ("fenceq_jobs", "fenceq_queue_stats", "fenceq_dependencies")


def _statements(text):
    """Complete statements of a script, comments kept with the statement after them."""
    pending = ""
    for line in text.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                yield pending
            pending = ""


def apply(conn):
    cursor = conn.cursor()
    for statement in _statements((FOLDER / "0004_fenceq_v4.sql").read_text(encoding="utf-8")):
        cursor.execute(statement)


def _v3_views():
    """Version 3's jobs and queue_stats views, from its frozen text."""
    text = (FOLDER / "0003_fenceq_v3.sql").read_text(encoding="utf-8")
    return [s for s in _statements(text)
            if any(f"CREATE VIEW {name} AS" in s for name in ("fenceq_jobs", "fenceq_queue_stats"))]


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute("UPDATE fenceq__queues SET paused = paused")  # the write lock, before deciding
    waiting = cursor.execute("SELECT EXISTS (SELECT 1 FROM fenceq__jobs WHERE blocked_by IS NOT NULL"
                             " AND status = 'pending')").fetchone()[0]
    if waiting and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose the dependencies of waiting jobs;"
                                    " rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    cursor.execute("UPDATE fenceq__jobs SET run_at = blocked_run_at WHERE blocked_run_at IS NOT NULL")
    for view in V4_VIEWS:
        cursor.execute(f"DROP VIEW {view}")
    cursor.execute("DROP TABLE fenceq__dependencies")
    for column in V4_JOB_COLUMNS:
        cursor.execute(f"ALTER TABLE fenceq__jobs DROP COLUMN {column}")
    for statement in _v3_views():
        cursor.execute(statement)
    cursor.execute("PRAGMA user_version = 3")


__depends__ = {"0003_fenceq_v3"}

steps = [step(apply, rollback)]
