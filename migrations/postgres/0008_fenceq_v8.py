"""fenceq v8: one nonce per claim call, upgraded in place from v7 (issue 29,
items 2 and 6; docs/guarantees.md §1 and §3).

Why: a claim_batch of n jobs writes n ledger rows, each keyed on a random
token: a heap tuple and two index entries per job, about a quarter of a
batch claim's server time. claim_jobs takes one caller nonce for the whole
call: every job of the call carries it in its fence (job_id, owner_id,
generation, nonce), and the ledger records it once, in a row that names the
call's jobs (_claims.job_ids; job_id and generation NULL). The one key of
_claims holds tokens and nonces alike, so a token or nonce still claims at
most once whichever call spends it. recover_claim with a call's nonce
answers every job of the call still claimed under it. Each job row keeps
its claims by calls (_jobs.call_claims), which the attempts view, purge and
sample_activity read. claim_batch keeps its behaviour; its pick and its
claim statement move into _pick and _claim_picked, which claim_jobs shares.
complete_batch looks at its results once, set-wise, as complete does, and
checks each only when one needs a closer look (the same answers and
errors; a batch of plain results no longer calls _check_json per result).

The step applies sql/0008_fenceq_v8.sql, generated from the parts by
scripts/gen-pg-step: the type _call_claim, the two ALTER TABLEs, the new
and replaced functions, the attempts view, then part 9 again.

Lock impact: ALTER TABLE takes ACCESS EXCLUSIVE on _claims and _jobs, so
the step first waits for every transaction that touched them to end, and
every call waits for the step to commit. The changes are to the catalog
only (a nullable column without a default, NOT NULL dropped): no row is
read or rewritten, and the step commits in milliseconds once it has its
locks. Work in flight keeps its fences: claims by claim_next and
claim_batch are recorded, recovered and settled as in version 7.

Rollback restores version 7 from the frozen texts of 0001 to 0007 (each
changed function and the view as the latest of them defines it), drops
what only version 8 has, then runs version 7's part 9. A call's ledger row
has no version 7 form (its nonce names several jobs): rollback takes its
locks, then refuses (QF901) while one exists, unless fenceq.allow_data_loss
is on; then those rows go, recover_claim no longer finds those calls, and
their nonces could claim again. The jobs they claimed keep their fences.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("claim_batch", "recover_claim", "complete_batch", "purge", "sample_activity", "verify_schema", "version")
ADDED = ("claim_jobs(text[], text, text, integer, interval, interval)",
         "_claim_picked(text[], text, text[], text, interval, interval)",
         "_pick(text[], integer)")

REFUSE_LOSS = """
DO $$
BEGIN
    LOCK TABLE fenceq._claims, fenceq._jobs IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM fenceq._claims AS c WHERE c.job_ids IS NOT NULL)
       AND NOT coalesce(current_setting('fenceq.allow_data_loss', true), '') = 'on' THEN
        RAISE EXCEPTION USING ERRCODE = 'QF901',
            MESSAGE = 'fenceq: rolling back to version 7 would lose the ledger rows of claim_jobs calls; set fenceq.allow_data_loss to proceed';
    END IF;
END
$$;
"""


def _definition(text: str, create: str, comment: str) -> str | None:
    """An object's CREATE OR REPLACE statement and its COMMENT, as written."""
    if text.count(create) == 0:
        return None
    start = text.rindex(create)
    end = text.index(comment, start)
    return text[start:text.index("';\n", end) + len("';\n")]


def _latest(create: str, comment: str) -> str:
    """The definition the latest of the released steps 0001 to 0007 gives."""
    for path in sorted(FOLDER.glob("000[1-7]_*.sql"), reverse=True):
        found = _definition(path.read_text(encoding="utf-8"), create, comment)
        if found is not None:
            return found
    raise ValueError(f"no released step defines {create}")


def _text(version: str) -> str:
    return (FOLDER / f"{version}.sql").read_text(encoding="utf-8")


def apply(conn):
    conn.cursor().execute(_text("0008_fenceq_v8"))


def rollback_text() -> str:
    v7 = _text("0007_fenceq_v7")
    part9 = v7[v7.index("-- fenceq for PostgreSQL, part 9: ownership and privileges."):]
    return "\n".join([
        "SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),"
        " set_config('search_path', 'pg_catalog, pg_temp', true);",
        REFUSE_LOSS,
        "DELETE FROM fenceq._claims AS c WHERE c.job_ids IS NOT NULL;",
        *(_latest(f"CREATE OR REPLACE FUNCTION fenceq.{name}(", f"COMMENT ON FUNCTION fenceq.{name}(")
          for name in CHANGED),
        _latest("CREATE OR REPLACE VIEW fenceq.attempts AS", "COMMENT ON VIEW fenceq.attempts IS"),
        *(f"DROP FUNCTION fenceq.{signature};" for signature in ADDED),
        "ALTER TABLE fenceq._jobs DROP COLUMN call_claims;",
        "DROP TYPE fenceq._call_claim;",
        "ALTER TABLE fenceq._claims DROP COLUMN job_ids,"
        " ALTER COLUMN job_id SET NOT NULL, ALTER COLUMN generation SET NOT NULL;",
        part9,
    ])


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0007_fenceq_v7"}

steps = [step(apply, rollback)]
