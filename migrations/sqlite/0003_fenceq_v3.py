"""fenceq v3 for SQLite: time and flow control, named locks, progress.

Why: version 3 adds per-queue limits, the notify_done switch, concurrency
keys and fenced progress (columns appended to the queue and job tables),
tables for the rate window, named locks and schedules, and views with
appended columns. It applies sql/0003_fenceq_v3.sql: the views are dropped,
the columns appended (ALTER TABLE ... ADD COLUMN rewrites no row), the new
tables and indexes created, the views created again, and the schema version
set to 3. It takes the write lock for that only.

Rollback drops what only version 3 has and sets the version back to 2. It
takes the write lock, then refuses (QF901) while schedules, locks, limits or
concurrency keys would be lost, unless FENCEQ_ALLOW_DATA_LOSS=1.
"""

import os
import sqlite3
from pathlib import Path

from yoyo import step

from fenceq.errors import config_error

SQL = Path(__file__).parent / "sql" / "0003_fenceq_v3.sql"
V2_TABLES = ("fenceq__queues", "fenceq__jobs", "fenceq__submissions", "fenceq__claims",
             "fenceq__checkpoints", "fenceq__dead_letters")
V3_COLUMNS = {"fenceq__queues": ("max_claimed", "max_claimed_per_key", "rate_limit", "rate_period",
                                 "notify_done"),
              "fenceq__jobs": ("concurrency_key", "progress", "progress_at")}


def _objects(cursor, kind):
    return {name: sql for name, sql in cursor.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = ? AND name LIKE 'fenceq%'", (kind,))}


def apply(conn):
    cursor = conn.cursor()
    for statement in _statements(SQL.read_text(encoding="utf-8")):
        cursor.execute(statement)


def _statements(text):
    """Complete statements of a script, comments kept with the statement after them."""
    pending = ""
    for line in text.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                yield pending
            pending = ""


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute("UPDATE fenceq__queues SET paused = paused")  # the write lock, before deciding
    extra = [t for t in _objects(cursor, "table") if t not in V2_TABLES]
    at_risk = any(cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0] for t in extra)
    at_risk = at_risk or cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM fenceq__jobs WHERE concurrency_key IS NOT NULL"
        "               AND status IN ('pending', 'claimed'))"
        " OR EXISTS (SELECT 1 FROM fenceq__queues"
        "            WHERE coalesce(max_claimed, max_claimed_per_key, rate_limit) IS NOT NULL)").fetchone()[0]
    if at_risk and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose schedules, locks, limits or concurrency"
                                    " keys; rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    v2 = sqlite3.connect(":memory:")
    for statement in _v2_statements():
        v2.execute(statement)
    for view in _objects(cursor, "view"):
        cursor.execute(f"DROP VIEW {view}")
    v2_indexes = _objects(v2, "index")
    for index in _objects(cursor, "index"):
        if index not in v2_indexes:
            cursor.execute(f"DROP INDEX {index}")
    for table in extra:
        cursor.execute(f"DROP TABLE {table}")
    for table, columns in V3_COLUMNS.items():
        for column in columns:
            cursor.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    for _, sql in _objects(v2, "view").items():
        cursor.execute(sql)
    v2.close()
    cursor.execute("PRAGMA user_version = 2")


def _v2_statements():
    """Version 2's schema is version 1's frozen text."""
    text = (Path(__file__).parent / "sql" / "0001_fenceq_v1.sql").read_text(encoding="utf-8")
    return (s for s in _statements(text) if not s.rstrip().endswith("user_version = 1;"))


__depends__ = {"0002_fenceq_v2"}

steps = [step(apply, rollback)]
