"""fenceq v8 for SQLite: one nonce per claim call.

Why: issue 29 (items 2 and 6). claim_batch writes a ledger row per job
(one heap tuple and two index entries each); claim_jobs takes one caller
nonce for the whole call, spends it once in the ledger (a call row:
claim_token = the nonce, job_id and generation NULL, job_ids the call's jobs
in claim order) and records each job's claim in the job's new call_claims.
The statement files that use it (claim_jobs, recover_claim, purge,
sample_activity) are the client's, not stored in the database (sql/sqlite/).

It applies sql/0008_fenceq_v8.sql. SQLite cannot drop NOT NULL from a
column, so fenceq__claims is rebuilt the SQLite way: the old table renamed
aside, the new one (job_id and generation nullable, job_ids, the CHECK that
a row is either kind) created under the name, every row copied in its
rowid order, the old table dropped and fenceq__claims_job_idx built again;
the fenceq_attempts view is dropped before and created after (it now also
reads call_claims). fenceq__jobs gains call_claims with ALTER TABLE ADD
COLUMN (catalog only). Lock impact: the step holds the write lock for the
copy of the ledger and the build of its index, so it lasts as long as the
ledger is large (one row per claim kept until purge); writers (claims,
fenced writes) wait for it, up to their busy timeout, and readers in WAL
mode go on. Jobs, fences and live claims are untouched: a job claimed under
version 7 keeps its per-token row, so its fence and recover_claim work as
before.

Rollback puts version 7 back exactly (sql/0008_fenceq_v8_rollback.sql: the
same rebuild the other way, with version 7's texts). It takes the write
lock, then refuses (QF901) while the ledger holds a call row, unless
FENCEQ_ALLOW_DATA_LOSS=1: then the call rows go, and with them the nonces
they spend and what recover_claim finds of their calls (the jobs' fences
stay). Otherwise it is lossless: call_claims is only ever set by a call
that also wrote a call row, and purge deletes that row last.
"""

import os
from pathlib import Path

from yoyo import step

from fenceq.backends.sqlite import split_statements
from fenceq.errors import config_error

FOLDER = Path(__file__).parent / "sql"


def _run(conn, name):
    cursor = conn.cursor()
    for statement in split_statements((FOLDER / name).read_text(encoding="utf-8")):
        cursor.execute(statement.sql)


def apply(conn):
    _run(conn, "0008_fenceq_v8.sql")


def rollback(conn):
    cursor = conn.cursor()
    cursor.execute("UPDATE fenceq__queues SET paused = paused")  # the write lock, before deciding
    in_use = cursor.execute("SELECT EXISTS (SELECT 1 FROM fenceq__claims WHERE job_id IS NULL)").fetchone()[0]
    if in_use and os.environ.get("FENCEQ_ALLOW_DATA_LOSS") != "1":
        raise config_error("QF901", "this downgrade would lose the claim_jobs calls of version 8 (their nonces"
                                    " and recover_claim); rerun with --allow-data-loss (FENCEQ_ALLOW_DATA_LOSS=1)")
    cursor.execute("DELETE FROM fenceq__claims WHERE job_id IS NULL")
    _run(conn, "0008_fenceq_v8_rollback.sql")


__depends__ = {"0007_fenceq_v7"}

steps = [step(apply, rollback)]
