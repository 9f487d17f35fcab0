"""fenceq v9: the fence rule written once, upgraded in place from v8
(issue 29, item 6; docs/guarantees.md §1).

Why: up to version 8 the rule that says when a fence holds a job (claimed,
by exactly this owner, generation and token, with a lease that ends after
the clock reading taken under the row lock) was spelled out seven times:
in complete, complete_batch, heartbeat, heartbeat_batch, progress,
_lock_live and _is_live, each a place where one condition could drift from
the others. Version 9 writes it once, in _holds_fence, a plain SQL helper
that the planner inlines into each caller's statement (so the one-statement
fenced writes keep their single statement and their cost), and every
fenced write and every read that answers for a live claim (claim_state,
recover_claim) judges with it. _is_live goes. No answer, error, lock or
write changes: the functions behave exactly as in version 8.

The step applies sql/0009_fenceq_v9.sql, generated from the parts by
scripts/gen-pg-step: the drop of _is_live, the new and replaced functions,
then part 9 again.

Lock impact: CREATE OR REPLACE FUNCTION and DROP FUNCTION take locks on the
functions' catalog rows only; no table is locked beyond what part 9 takes
(it changes owners and grants only where they differ), no row is read or
written. A call running when the step commits finishes with the definition
it started with; the next call uses the new one. Work in flight keeps its
fences: the rule they are judged by is the same.

Rollback restores version 8 from the frozen texts of 0001 to 0008 (_is_live
and each changed function as the latest of them defines it), drops
_holds_fence, then runs version 8's part 9. Nothing is lost.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("_is_live", "_lock_live", "heartbeat", "heartbeat_batch", "claim_state", "complete",
           "complete_batch", "progress", "recover_claim", "verify_schema", "version")
ADDED = ("_holds_fence(text, text, bigint, text, timestamptz, text, bigint, text, timestamptz)",)


def _definition(text: str, create: str, comment: str) -> str | None:
    """An object's CREATE OR REPLACE statement and its COMMENT, as written."""
    if text.count(create) == 0:
        return None
    start = text.rindex(create)
    end = text.index(comment, start)
    return text[start:text.index("';\n", end) + len("';\n")]


def _latest(name: str) -> str:
    """The definition of fenceq.name the latest of the released steps 0001 to 0008 gives."""
    for path in sorted(FOLDER.glob("000[1-8]_*.sql"), reverse=True):
        found = _definition(path.read_text(encoding="utf-8"), f"CREATE OR REPLACE FUNCTION fenceq.{name}(",
                            f"COMMENT ON FUNCTION fenceq.{name}(")
        if found is not None:
            return found
    raise ValueError(f"no released step defines fenceq.{name}")


def _text(version: str) -> str:
    return (FOLDER / f"{version}.sql").read_text(encoding="utf-8")


def apply(conn):
    conn.cursor().execute(_text("0009_fenceq_v9"))


def rollback_text() -> str:
    v8 = _text("0008_fenceq_v8")
    part9 = v8[v8.index("-- fenceq for PostgreSQL, part 9: ownership and privileges."):]
    return "\n".join([
        "SELECT set_config('fenceq.installer_search_path', current_setting('search_path'), true),"
        " set_config('search_path', 'pg_catalog, pg_temp', true);",
        *(_latest(name) for name in CHANGED),
        *(f"DROP FUNCTION fenceq.{signature};" for signature in ADDED),
        part9,
    ])


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0008_fenceq_v8"}

steps = [step(apply, rollback)]
