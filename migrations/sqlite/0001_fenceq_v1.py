"""fenceq v1 for SQLite: the first schema.

Why: creates everything fenceq 1 needs in the database file: the private
STRICT tables and their indexes, the public views, and the schema version
(PRAGMA user_version = 1) that version.sql reports. It applies the reviewed
sql/sqlite/schema.sql, the same text `fenceq sql --backend sqlite` prints.
The operations themselves are the statement files of sql/sqlite/, run by
the client; they are not stored in the database. A later change to the
schema adds a new migration and a new file; it never edits this one.

Rollback drops the tables and views: every job, submission identity and
claim ledger row is lost. It first takes the write lock, then refuses
(QF901) while submission identities are retained or claims are live, unless
FENCEQ_ALLOW_DATA_LOSS=1 is set in its environment
(`fenceq.migrate.rollback(url, allow_data_loss=True)` sets it).
"""

import os

from yoyo import step

from fenceq._sqlite import schema_statements
from fenceq.errors import config_error

TABLES = ["fenceq__queues", "fenceq__jobs", "fenceq__submissions", "fenceq__claims",
          "fenceq__checkpoints", "fenceq__dead_letters"]
VIEWS = ["fenceq_jobs", "fenceq_attempts", "fenceq_queue_stats", "fenceq_dead_letters"]


def apply(conn):
    cursor = conn.cursor()
    for statement in schema_statements():
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
