"""fenceq v2: the lean hot paths, upgraded in place from v1.

Why: version 1's claim, complete, heartbeat and submit spent most of their
time in nested helper calls and in statements a single one could do. Version
2 rewrites those functions; the tables, indexes, types and views stay as
version 1 made them, so every row a v1 database holds (claimed jobs and
their fences, submission identities, the claim ledger, dead letters) is
read by v2 as it is. The step applies sql/0002_fenceq_v2.sql: it drops the
private helpers v2 no longer has, then runs parts 2 to 9 of the v2 install
(functions, views, privileges, the admission check), not part 1 (tables
and indexes). No row is rewritten, and the tables take only ACCESS SHARE
locks, so claims, completions and submissions go on during the step; the
views are locked while it runs (docs/dba.md, section 7).

Rollback reinstalls version 1's functions from the frozen v1 text (itself
idempotent; being version 1's text, it does lock the tables while it runs)
and drops what only v2 has. Nothing is lost, so it is never refused.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
V2_ONLY = ("DROP FUNCTION IF EXISTS fenceq._is_plain_duration(interval), fenceq._is_plain_fence(text, text, bigint, text),"
           " fenceq._is_plain_json(jsonb), fenceq._is_plain_time(timestamptz), fenceq._new_job_id(),"
           " fenceq._is_plain_json_int(jsonb, integer),"
           " fenceq._fingerprint_of(text, text, text, text, text, integer, timestamptz, timestamptz, integer, text,"
           " boolean);")


def apply(conn):
    conn.cursor().execute((FOLDER / "0002_fenceq_v2.sql").read_text(encoding="utf-8"))


def rollback(conn):
    # v1's own admission check runs at the end of its text: drop first.
    conn.cursor().execute(V2_ONLY + "\n" + (FOLDER / "0001_fenceq_v1.sql").read_text(encoding="utf-8"))


__depends__ = {"0001_fenceq_v1"}

steps = [step(apply, rollback)]
