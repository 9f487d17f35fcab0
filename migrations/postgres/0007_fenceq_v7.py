"""fenceq v7: the operator's view over time, upgraded in place from v6
(issue 27; docs/design-v7.md).

Why: an operator on call could see what one job did and which fence wrote
it, but not whether a queue keeps up, since when it falls behind, how long
jobs wait and run, which jobs of one customer failed, or how to retry two
hundred of them at once. Version 7 keeps a per-queue minute series
(_activity) that sample_activity fills from the jobs and the claim ledger,
off the hot path (the worker's maintenance calls it beside reap), and that
activity() reads for every caller alike; search_jobs finds jobs through one
bounded index range (a submission prefix, the live jobs, or the jobs
finished in a window); retry_jobs, cancel_jobs and replay_dead_letters act on
a selection in one call each and record who made each change, with which
filter, as a job event.

The step applies sql/0007_fenceq_v7.sql, generated from the parts by
scripts/gen-pg-step: part 1e (the table _activity, the type job_search_row,
a partial index of the unhandled dead letters), parts 8c to 8e whole,
verify_schema and version ('7') replaced, then part 9 again (owners, grants,
the admission check). No function of the hot path is replaced.

Lock impact: the index on _dead_letters is built under a SHARE lock on that
table, which a final failure (the insert of its dead letter) waits for
until the step commits; submits, claims, completions and retries do not
wait. _jobs is not altered and no job row changes: work in flight keeps its
fences.

Rollback drops what only version 7 has and reinstalls version 6's
verify_schema and version from the frozen text of 0006, then runs version
6's part 9. It would lose the activity series: it takes its lock, then
refuses (QF901) while _activity holds a row, unless fenceq.allow_data_loss
is on. The events the bulk actions wrote stay (version 6 reads them as any
event).
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("verify_schema", "version")
ADDED = ("sample_activity(integer, interval)", "activity(text, interval, interval)",
         "_activity_end(timestamp with time zone)", "_histogram_bounds()", "_histogram(integer[])",
         "_histogram_percentile(integer[], bigint[], double precision)",
         "search_jobs(text, text, text, jsonb, text, text, timestamp with time zone, timestamp with time zone,"
         " bigint, integer, integer)",
         "retry_jobs(text, text[], text, jsonb, text, integer)",
         "cancel_jobs(text, text[], text, jsonb, boolean, boolean, integer)",
         "replay_dead_letters(text, text[], text, jsonb, text, integer)",
         "_action_detail(text, jsonb)", "_record_action(text, bigint, text, jsonb)",
         "_check_bulk(text, text[], text, jsonb, text, integer)")

REFUSE_LOSS = """
DO $$
BEGIN
    LOCK TABLE fenceq._activity IN SHARE ROW EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM fenceq._activity)
       AND NOT coalesce(current_setting('fenceq.allow_data_loss', true), '') = 'on' THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: rolling back to version 6 would lose the activity series; set fenceq.allow_data_loss to proceed';
    END IF;
END
$$;
"""


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
    conn.cursor().execute(_text("0007_fenceq_v7"))


def rollback_text() -> str:
    v6 = _text("0006_fenceq_v6")
    part9 = v6[v6.index("-- fenceq for PostgreSQL, part 9: ownership and privileges."):]
    return "\n".join([
        "SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),"
        " set_config('search_path', 'pg_catalog, pg_temp', true);",
        REFUSE_LOSS,
        *(f"DROP FUNCTION fenceq.{signature};" for signature in ADDED),
        "DROP TYPE fenceq.job_search_row;",
        "DROP TABLE fenceq._activity;",
        "DROP INDEX fenceq._dead_letters_unhandled_idx;",
        *(_definition(v6, name) for name in CHANGED),
        part9,
    ])


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0006_fenceq_v6"}

steps = [step(apply, rollback)]
