"""fenceq v6: external execution under a fence, a history of every job's
transitions, and the priority a reaped job re-enters with, upgraded in place
from v5 (issue 26; docs/design-v6.md).

Why: a worker that hands a job to another system (a batch cluster, a
provider's asynchronous API) could lose its lease while the work ran there,
and reap then offered the job to another worker, which started it a second
time, where no rollback exists. Version 6 records a dispatch per claim
(_dispatches): reserved before the external call, finalized with the
external system's id after it; reap and release never requeue a claim whose
dispatch is live, and only adopt_dispatch, naming the recorded ref, takes
it over. Operators also could not prove what happened to a job: a queue may
now keep an event per transition (_events), written by the functions
themselves in the transition's transaction. And reap's requeue of a lapsed
lease follows the queue's requeue_priority (keep, first, last).

The step applies sql/0006_fenceq_v6.sql: part 1d (three _queues columns
with constant defaults, so no row is rewritten; two new tables), the new
functions and views (parts 8a, 8b, _requeue_at, _check_requeue_priority),
CREATE OR REPLACE of the functions that make transitions (no signature
changes), create_queue and alter_queue dropped and created again with a
new last parameter (requeue_priority, DEFAULT NULL: every call written for
version 5 still works), then part 9 again (owners, grants, the admission
check). ``version()`` answers '6'.

Lock impact: the ALTER of _queues takes ACCESS EXCLUSIVE on _queues to the
commit (every claim and submit reads it: they wait for the step, none
fails); _jobs is not altered. Work in flight keeps its fences: no job row
changes.

Rollback reinstalls version 5's bodies of those functions as the frozen
texts have them (0005's where it changed them, else 0004's, else 0003's),
drops what only version 6 has and runs version 5's part 9. It would lose
the recorded events, the dispatch records (and with them the protection of
any live dispatch: reap would requeue such a job) and the queues' history
and requeue_priority settings: it takes its locks, then refuses (QF901)
while any event or dispatch record exists or any queue has history on or a
requeue_priority other than keep, unless fenceq.allow_data_loss is on.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("_submit", "submit", "submit_batch", "_settle_dependents", "claim_next", "claim_batch",
           "complete", "complete_batch", "_retry_or_fail", "release", "acknowledge_cancel", "reap",
           "_cancel_locked", "purge", "replay_dead_letter", "verify_schema", "version",
           "create_queue", "alter_queue")
ADDED = ("_requeue_at(fenceq._jobs, timestamptz)", "_check_requeue_priority(text)",
         "create_queue(text, interval, integer, interval, double precision, interval, boolean, text)",
         "alter_queue(text, interval, integer, interval, double precision, interval, boolean, text)",
         "_live_dispatch(fenceq._jobs)", "_check_ref(text, text)",
         "reserve_dispatch(text, text, bigint, text, text, text)",
         "finalize_dispatch(text, text, bigint, text, text, text)",
         "release_dispatch(text, text, bigint, text, text)",
         "replace_dispatch_ref(text, text, bigint, text, text, text)",
         "adopt_dispatch(text, text, text, text, text, interval)",
         "dispatch_repair_candidates(text, integer)",
         "_record_event(text, text, text, bigint, text, jsonb)", "_record_events(text[], text, jsonb)",
         "set_queue_history(text, boolean, interval)", "get_job_events(text)")

REFUSE_LOSS = """
DO $$
BEGIN
    LOCK TABLE fenceq._queues, fenceq._jobs, fenceq._dispatches, fenceq._events IN SHARE ROW EXCLUSIVE MODE;
    IF (EXISTS (SELECT 1 FROM fenceq._events) OR EXISTS (SELECT 1 FROM fenceq._dispatches)
        OR EXISTS (SELECT 1 FROM fenceq._queues AS q WHERE q.history OR q.requeue_priority <> 'keep'))
       AND NOT coalesce(current_setting('fenceq.allow_data_loss', true), '') = 'on' THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: rolling back to version 5 would lose job events, dispatch records or queue settings; set fenceq.allow_data_loss to proceed';
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
    conn.cursor().execute(_text("0006_fenceq_v6"))


def rollback_text() -> str:
    texts = [_text("0005_fenceq_v5"), _text("0004_fenceq_v4"), _text("0003_fenceq_v3")]
    bodies = [_definition(next(t for t in texts if f"FUNCTION fenceq.{name}(" in t), name) for name in CHANGED]
    v5 = texts[0]
    part9 = v5[v5.index("-- fenceq for PostgreSQL, part 9: ownership and privileges."):]
    return "\n".join([
        "SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),"
        " set_config('search_path', 'pg_catalog, pg_temp', true);",
        REFUSE_LOSS,
        "DROP VIEW fenceq.dispatches;",
        "DROP FUNCTION fenceq.get_job_events(text);",
        "DROP VIEW fenceq.job_events;",
        *(f"DROP FUNCTION fenceq.{signature};" for signature in ADDED if not signature.startswith("get_job_events")),
        *bodies,
        "DROP TABLE fenceq._events;",
        "DROP TABLE fenceq._dispatches;",
        "ALTER TABLE fenceq._queues DROP COLUMN requeue_priority, DROP COLUMN history,"
        " DROP COLUMN history_retention;",
        part9,
    ])


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0005_fenceq_v5"}

steps = [step(apply, rollback)]
