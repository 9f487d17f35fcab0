"""fenceq v7 for SQLite: the operator's view over time.

Why: issue 27 (docs/design-v7.md). An operator must see whether a queue
keeps up, since when it falls behind, and how long jobs wait and run, for
the last hour, day and week, without anything new on the hot path: a
sampler (sample_activity, run by the worker's maintenance) writes one row
per queue and closed minute into fenceq__activity, which activity() reads.
The statement files that use it, and those of search_jobs and the bulk
actions (retry_jobs, cancel_jobs, replay_dead_letters), are the client's,
not stored in the database (sql/sqlite/).

It applies sql/0007_fenceq_v7.sql: the table created empty, a partial
index of the open dead letters (replay_dead_letters reads a queue's, oldest
first; building it reads the letters once), the schema version set to 7.
The step holds the write lock for that only (readers in WAL mode go on);
jobs, claims and fences are untouched.

Rollback drops the table and the index and sets the version back to 6. It takes the
write lock, then refuses (QF901) while the table has a row, unless
FENCEQ_ALLOW_DATA_LOSS=1: the series cannot be rebuilt from the jobs (purge
removes them). Otherwise it is lossless.
"""

import os
from pathlib import Path

from yoyo import step

from fenceq.backends.sqlite import split_statements
from fenceq.errors import config_error

FOLDER = Path(__file__).parent / "sql"


def apply(conn):
    cursor = conn.cursor()
    for statement in split_statements((FOLDER / "0007_fenceq_v7.sql").read_text(encoding="utf-8")):
        cursor.execute(statement.sql)


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute("UPDATE fenceq__queues SET paused = paused")  # the write lock, before deciding
    in_use = cursor.execute("SELECT EXISTS (SELECT 1 FROM fenceq__activity)").fetchone()[0]
    if in_use and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose the activity series of version 7;"
                                    " rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    cursor.execute("DROP INDEX fenceq__dead_letters_unhandled_idx")
    cursor.execute("DROP TABLE fenceq__activity")
    cursor.execute("PRAGMA user_version = 6")


__depends__ = {"0006_fenceq_v6"}

steps = [step(apply, rollback)]
