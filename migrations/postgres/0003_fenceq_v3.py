"""fenceq v3: time and flow control, dependencies, named locks, upgraded in
place from v2.

Why: version 3 adds what users say about time, load and order: next-due
wake-ups, budget extension, bulk cancel, periodic schedules, concurrency and
rate limits with concurrency keys, fenced named locks, and dependencies
between jobs. The step applies sql/0003_fenceq_v3.sql: part 1b of the install
appends columns to the queue and job tables (nullable or with constant
defaults: no row is rewritten, but _queues and _jobs stay ACCESS EXCLUSIVE
locked until the step commits, about 0.1 s: docs/dba.md section 7) and
creates the new tables; the functions
whose parameters changed are dropped (a function is never overloaded); then
parts 2 to 9 of the v3 install run (functions, views, privileges, the
admission check).

Rollback drops what only version 3 has (every function, the views, the
tables and columns v2 lacks), then reinstalls version 2 from the frozen v2
text. Schedules, locks, limits, concurrency keys and dependencies are then
lost: it takes its locks, then refuses (QF901) while any such data exists,
unless fenceq.allow_data_loss is on.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"


def apply(conn):
    conn.cursor().execute((FOLDER / "0003_fenceq_v3.sql").read_text(encoding="utf-8"))


V2_TABLES = ("_queues", "_jobs", "_submissions", "_claims", "_checkpoints", "_dead_letters")
V2_COLUMNS = {
    "_queues": ("queue", "lease", "max_attempts", "backoff_base", "backoff_factor", "backoff_max",
                "dead_letter", "paused", "notify", "created_at"),
}
V3_JOB_COLUMNS = ("concurrency_key", "blocked_by", "blocked_run_at", "progress", "progress_at")

ROLLBACK = """
DO $$
DECLARE
    v_stmt text;
    v_at_risk boolean := false;
    v_table text;
BEGIN
    LOCK TABLE fenceq._queues, fenceq._jobs IN SHARE ROW EXCLUSIVE MODE;
    FOR v_table IN
        SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind = 'r' AND c.relname <> ALL (%(v2_tables)s)
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM fenceq.%%I)', v_table) INTO v_at_risk;
        EXIT WHEN v_at_risk;
    END LOOP;
    v_at_risk := v_at_risk
        OR EXISTS (SELECT 1 FROM fenceq._jobs AS j WHERE j.concurrency_key IS NOT NULL
                      AND j.status IN ('pending', 'claimed'))
        OR EXISTS (SELECT 1 FROM fenceq._queues AS q
                    WHERE num_nonnulls(q.max_claimed, q.max_claimed_per_key, q.rate_limit) > 0);
    IF v_at_risk AND NOT coalesce(current_setting('fenceq.allow_data_loss', true), '') = 'on' THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: rolling back to version 2 would lose schedules, locks, limits or concurrency keys; set fenceq.allow_data_loss to proceed';
    END IF;
    -- Functions first: get_job returns the jobs view's row type.
    FOR v_stmt IN
        SELECT format('DROP FUNCTION %%s', p.oid::regprocedure) FROM pg_proc AS p
          JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = 'fenceq'
    LOOP
        EXECUTE v_stmt;
    END LOOP;
    FOR v_stmt IN
        SELECT format('DROP VIEW %%s', c.oid::regclass) FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = 'fenceq' AND c.relkind = 'v'
        UNION ALL
        SELECT format('DROP TABLE %%s', c.oid::regclass) FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
         WHERE n.nspname = 'fenceq' AND c.relkind = 'r' AND c.relname <> ALL (%(v2_tables)s)
        UNION ALL
        SELECT format('ALTER TABLE fenceq._queues DROP COLUMN %%I', a.attname) FROM pg_attribute AS a
         WHERE a.attrelid = 'fenceq._queues'::regclass AND a.attnum > 0 AND NOT a.attisdropped
           AND a.attname <> ALL (%(v2_queue_columns)s)
        UNION ALL
        SELECT format('ALTER TABLE fenceq._jobs DROP COLUMN %%I', a.attname) FROM pg_attribute AS a
         WHERE a.attrelid = 'fenceq._jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
           AND a.attname = ANY (%(v3_job_columns)s)
    LOOP
        EXECUTE v_stmt;
    END LOOP;
END
$$;
"""


def _array(names):
    return "ARRAY[" + ", ".join(f"'{n}'" for n in names) + "]::name[]"


def rollback(conn):
    drop = ROLLBACK % {"v2_tables": _array(V2_TABLES), "v2_queue_columns": _array(V2_COLUMNS["_queues"]),
                       "v3_job_columns": _array(V3_JOB_COLUMNS)}
    conn.cursor().execute(drop + "\n" + (FOLDER / "0002_fenceq_v2.sql").read_text(encoding="utf-8"))


__depends__ = {"0002_fenceq_v2"}

steps = [step(apply, rollback)]
