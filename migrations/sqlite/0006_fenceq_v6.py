"""fenceq v6 for SQLite: external execution under a fence, and job history.

Why: issue 26 (docs/design-v6.md). A worker that hands a job to another
system must be able to record the dispatch under its fence, so that no
lapsed lease lets the work start twice there; and an operator must be able
to read what happened to a job. fenceq__queues gains requeue_priority,
history and history_retention; the tables fenceq__dispatches and
fenceq__events are created with their indexes and the views
fenceq_dispatches and fenceq_job_events. The statement files that use them
are the client's, not stored in the database (sql/sqlite/).

It applies sql/0006_fenceq_v6.sql: the three columns appended (constant
defaults: ALTER TABLE ... ADD COLUMN rewrites no row; the CHECK on
requeue_priority reads every queue row once), the new tables, indexes and
views created empty, the schema version set to 6. The step holds the write
lock for that only (readers in WAL mode go on); jobs in flight, claims and
fences are untouched.

Rollback drops what only version 6 has and sets the version back to 5. It
takes the write lock, then refuses (QF901) when that would lose anything,
unless FENCEQ_ALLOW_DATA_LOSS=1: an event, a dispatch record (a live one
would let version 5's reap requeue a job whose work runs elsewhere), or a
queue setting other than the defaults (requeue_priority 'keep', history
off, no retention). Otherwise it is lossless.
"""

import os
from pathlib import Path

from yoyo import step

from fenceq.backends.sqlite import split_statements
from fenceq.errors import config_error

FOLDER = Path(__file__).parent / "sql"
V6_VIEWS = ("fenceq_job_events", "fenceq_dispatches")
V6_TABLES = ("fenceq__events", "fenceq__dispatches")
V6_QUEUE_COLUMNS = ("history_retention", "history", "requeue_priority")


def apply(conn):
    cursor = conn.cursor()
    for statement in split_statements((FOLDER / "0006_fenceq_v6.sql").read_text(encoding="utf-8")):
        cursor.execute(statement.sql)


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute("UPDATE fenceq__queues SET paused = paused")  # the write lock, before deciding
    in_use = cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM fenceq__events) OR EXISTS (SELECT 1 FROM fenceq__dispatches)"
        " OR EXISTS (SELECT 1 FROM fenceq__queues"
        "             WHERE requeue_priority <> 'keep' OR history OR history_retention IS NOT NULL)").fetchone()[0]
    if in_use and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose job events, dispatch records or queue settings"
                                    " of version 6; rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    for view in V6_VIEWS:
        cursor.execute(f"DROP VIEW {view}")
    for table in V6_TABLES:
        cursor.execute(f"DROP TABLE {table}")
    for column in V6_QUEUE_COLUMNS:
        cursor.execute(f"ALTER TABLE fenceq__queues DROP COLUMN {column}")
    cursor.execute("PRAGMA user_version = 5")


__depends__ = {"0005_fenceq_v5"}

steps = [step(apply, rollback)]
