"""fenceq v4: a job submitted for later wakes idle workers on time, upgraded
in place from v3.

Why: version 3 sent the ``fenceq_jobs`` hint only for a job due now, so an
idle worker asleep until its next poll (5 s by default) never heard of a job
due before then and started it late (docs/guarantees.md §13 has the
figures). Version 4 sends it for every job that becomes pending and free to
run, due now or later: ``submit`` and ``_submit`` (so ``submit_batch`` and
``tick``), a retry (``_retry_or_fail``: ``fail`` and ``reap``), ``release``
with a later ``run_at``, and a dependent freed by its last dependency
(``_settle_dependents``); the worker then re-reads ``next_due``. Two
fixes to dependencies come with it: a ``submit_batch`` element stored
cancelled because its own dependency already failed now cancels the
earlier elements that wait on it (``_submit``; they waited forever), and
``purge`` deletes the dependency edges of the jobs it deletes (they were
kept forever). ``heartbeat_batch`` and ``complete_batch`` answer each fence
by grouping instead of probing their CTE once per fence, and
``complete_batch`` unnests its results beside the fences instead of
subscripting the jsonb array per fence: both were quadratic in the batch
(8,000 fences: 1.5 s and 2.0 s, now 0.16 s and 0.31 s). ``version()``
answers '4'. The step applies sql/0004_fenceq_v4.sql: CREATE
OR REPLACE of exactly those functions (no signature changes, so nothing is
dropped and nothing is overloaded; owners and grants stay), then the
admission check (verify_schema).

Lock impact: none on any table, index or view. Read from ``pg_locks``
inside the step's open transaction, it holds no lock on a fenceq relation,
only SHARE UPDATE EXCLUSIVE on the nine replaced functions' own objects,
which calling a function never takes: claims, completions and submissions
run meanwhile (tests/test_upgrade_v4.py), each session on the old bodies
until the step commits.

Rollback reinstalls version 3's bodies of those functions, byte for byte
as the frozen v3 text has them (``version()`` answers '3' again): the
step's own text with each function swapped for its v3 definition. No data
changes shape, so it loses nothing and is never refused.
"""

from pathlib import Path

from yoyo import step

FOLDER = Path(__file__).parent / "sql"
CHANGED = ("_settle_dependents", "_submit", "submit", "_retry_or_fail", "release", "purge",
           "heartbeat_batch", "complete_batch", "version")


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
    conn.cursor().execute(_text("0004_fenceq_v4"))


def rollback_text() -> str:
    text, v3 = _text("0004_fenceq_v4"), _text("0003_fenceq_v3")
    for name in CHANGED:
        text = text.replace(_definition(text, name), _definition(v3, name))
    return text


def rollback(conn):
    conn.cursor().execute(rollback_text())


__depends__ = {"0003_fenceq_v3"}

steps = [step(apply, rollback)]
