"""fenceq v5 for SQLite: jobs due later wait apart from the jobs a claim reads.

Why: version 4 kept one claim index of every pending job, due now or
later, so a claim that found nothing due, and next_due, read past every job
due later. Version 5 brings PostgreSQL's design (its step 0005,
docs/design-v5.md §3) to SQLite: fenceq__jobs gains scheduled, set for a
pending job whose run_at was still ahead when it was written; the claim
index fenceq__jobs_pending_idx leads each queue with its ready jobs, and
fenceq__jobs_later_idx holds the jobs due later by due time, where every
claim first moves its queues' jobs that fell due and next_due reads its
head. The statement files that make a job pending say where it waits; they
are the client's, not stored in the database (sql/sqlite/).

It applies sql/0005_fenceq_v5.sql: the column appended (a constant
default: no row is rewritten), the pending jobs due later marked, the two
indexes built, the version 4 claim index dropped, the schema version set to
5. Differs from PostgreSQL in that the marking runs inside the step: SQLite
has one write lock for the whole file anyway, so batches after the step
would not let anything else write sooner. The step holds the write lock for
its whole length (readers in WAL mode go on).

Rollback rebuilds version 4's claim index exactly as the frozen step 0001
created it, drops the two indexes and the column, and sets the version back
to 4. No job changes state, so it loses nothing and is never refused.
"""

import sqlite3
from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
V5_INDEXES = ("fenceq__jobs_pending_idx", "fenceq__jobs_later_idx")


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
    for statement in _statements((FOLDER / "0005_fenceq_v5.sql").read_text(encoding="utf-8")):
        cursor.execute(statement)


def v4_claim_index():
    """Version 4's claim index, from the frozen text of step 0001 that made it."""
    text = (FOLDER / "0001_fenceq_v1.sql").read_text(encoding="utf-8")
    [statement] = [s for s in _statements(text) if "CREATE INDEX IF NOT EXISTS fenceq__jobs_claim_idx" in s]
    return statement


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute(v4_claim_index())
    for index in V5_INDEXES:
        cursor.execute(f"DROP INDEX {index}")
    cursor.execute("ALTER TABLE fenceq__jobs DROP COLUMN scheduled")
    cursor.execute("PRAGMA user_version = 4")


__depends__ = {"0004_fenceq_v4"}

steps = [step(apply, rollback)]
