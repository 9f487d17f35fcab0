"""fenceq v1 for SQLite: the first schema.

Why: creates everything fenceq 1 needs in the database file: the private
STRICT tables and their indexes, the public views, and the schema version
(PRAGMA user_version = 1) that version.sql reports. It applies
sql/0001_fenceq_v1.sql: sql/sqlite/schema.sql as released in
version 1 (commit 8e56bfc), frozen. The operations themselves are the
statement files of sql/sqlite/, run by the client; they are not stored in
the database. Released migrations never change
(tests/test_migration_texts.py holds their digests).

Rollback drops the tables and views: every job, submission identity and
claim ledger row is lost. It first takes the write lock, then refuses
(QF901) while submission identities are retained or claims are live, unless
FENCEQ_ALLOW_DATA_LOSS=1 is set in its environment
(`fenceq.migrate.rollback(url, allow_data_loss=True)` sets it).
"""

import os
import sqlite3
from pathlib import Path

from yoyo import step

from fenceq.errors import config_error

SQL = Path(__file__).parent / "sql" / "0001_fenceq_v1.sql"

TABLES = ["fenceq__queues", "fenceq__jobs", "fenceq__submissions", "fenceq__claims",
          "fenceq__checkpoints", "fenceq__dead_letters"]
VIEWS = ["fenceq_jobs", "fenceq_attempts", "fenceq_queue_stats", "fenceq_dead_letters"]


def statements(text):
    """Split a script into complete statements (a trigger body stays whole)."""
    pending = ""
    for line in text.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                yield pending
            pending = ""


def apply(conn):
    cursor = conn.cursor()
    for statement in statements(SQL.read_text(encoding="utf-8")):
        cursor.execute(statement)


NOW_MICROS = "(unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000"


def rollback(conn):
    cursor = conn.cursor()
    # Take the write lock before deciding, so nothing commits in between.
    cursor.execute("UPDATE fenceq__queues SET paused = paused")
    at_risk = cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM fenceq__submissions)"
        " OR EXISTS (SELECT 1 FROM fenceq__jobs"
        f"            WHERE status = 'claimed' AND lease_expires_at > {NOW_MICROS})").fetchone()[0]
    if at_risk and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose retained submission identities or live"
                                    " claims; rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    for view in VIEWS:
        cursor.execute(f"DROP VIEW IF EXISTS {view}")
    for table in TABLES:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    cursor.execute("PRAGMA user_version = 0")


steps = [step(apply, rollback)]
