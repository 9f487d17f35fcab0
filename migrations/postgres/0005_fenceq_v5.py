"""fenceq v5: jobs due later wait apart from the jobs a claim reads, and
submit_batch makes its ids set-wise, upgraded in place from v4.

Why: in version 4 one claim index held every pending job, due now or
later, so a claim that found nothing due, and next_due, read past every
job due later (with 100,000 of them: an empty claim 7.5 ms, next_due
31.5 ms; docs/design-v5.md §8). Version 5 marks a pending job due later
(_jobs.scheduled): the claim index leads each queue with its ready jobs,
and the jobs due later are also indexed by due time, where the claims move
them in as they fall due (_move_due) and next_due reads their head. Every
function that makes a job pending says where it waits: _submit, submit
(and so submit_batch and tick), _settle_dependents (a freed dependent),
_retry_or_fail (fail and reap), release and replay_dead_letter; the claims
(claim_next, claim_batch, _pick_limited) move due jobs in first and read
only the ready ones; next_due reads both heads. submit_batch's plain and
owned paths take their ids from _new_job_ids, one clock reading and one
random UUID per batch. ``version()`` answers '5'.

The step applies sql/0005_fenceq_v5.sql: part 1c of the install (the
column with a constant default, so no row is rewritten; the two indexes;
the version 4 claim index dropped), CREATE OR REPLACE of those functions
(no signature changes), then part 9 again (the new helpers' owner and
PUBLIC's rights) and the admission check. The pending jobs version 4 left
waiting for a later run_at are marked after the step commits, by `fenceq
migrate` (fenceq.backends.migrations.mark_waiting_jobs), in batches of
10,000 jobs read, each its own transaction; until then they wait among the
due jobs, correctly (claims compare run_at) but at version 4's cost.

Lock impact: the ALTER takes ACCESS EXCLUSIVE on _jobs and holds it to the
commit, through the two index builds: every call that touches _jobs, reads
included, waits for the step (none fails). The marking afterwards takes
row locks only. Measured (docs/dba.md §7, bench/upgrade_v5.py): the step
0.5 s at 100,000 jobs and 3.2 s at 1,000,000; the marking 2.5 s and 26 s.

Rollback reinstalls version 4's bodies of those functions as the frozen
texts have them (0004's where it changed them, else 0003's), drops the
two helpers, rebuilds the version 4 claim index and drops the column. No
job changes state, so it loses nothing and is never refused.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("_submit", "submit", "submit_batch", "_settle_dependents", "claim_next", "_pick_limited",
           "claim_batch", "_retry_or_fail", "release", "next_due", "replay_dead_letter", "version")
ADDED = ("_new_job_ids(integer)", "_move_due(text, timestamptz)")


def _definition(text: str, name: str) -> str:
    """A function's CREATE OR REPLACE statement and its COMMENT, as written."""
    create = f"CREATE OR REPLACE FUNCTION fenceq.{name}("
    if text.count(create) != 1:
        raise ValueError(f"expected exactly one definition of fenceq.{name}")
    start = text.index(create)
    comment = text.index(f"COMMENT ON FUNCTION fenceq.{name}(", start)
    return text[start:text.index("';\n", comment) + len("';\n")]


def _text(version: str) -> str:
    return (FOLDER / f"{version}.sql").read_text(encoding="utf-8")


def apply(conn):
    conn.cursor().execute(_text("0005_fenceq_v5"))


def rollback_text() -> str:
    v4, v3 = _text("0004_fenceq_v4"), _text("0003_fenceq_v3")
    bodies = [_definition(v4 if f"FUNCTION fenceq.{name}(" in v4 else v3, name) for name in CHANGED]
    return "\n".join([
        "SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),"
        " set_config('search_path', 'pg_catalog, pg_temp', true);",
        *bodies,
        *(f"DROP FUNCTION fenceq.{signature};" for signature in ADDED),
        "CREATE INDEX IF NOT EXISTS _jobs_claim_idx ON fenceq._jobs (queue, priority DESC, run_at, seq)"
        " WHERE status = 'pending';",
        "DROP INDEX fenceq._jobs_pending_idx;",
        "DROP INDEX fenceq._jobs_later_idx;",
        "ALTER TABLE fenceq._jobs DROP COLUMN scheduled;",
        "SELECT set_config('search_path', current_setting('fenceq.installer_search_path'), true);",
    ])


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0004_fenceq_v4"}

steps = [step(apply, rollback)]
