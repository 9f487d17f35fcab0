"""The short profile of the fuzzer (docs/fuzzing.md): every public function
on every engine, enumerated at run time, gets SHORT_CALLS generated calls;
each must succeed or be refused with an allowed code and change nothing.
``make fuzz`` runs the long profile (tests/fuzz/fuzz_run.py).

FENCEQ_FUZZ_SEED picks other calls than the default seed's.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

import fenceq
import fenceq.backends.sqlite
import fuzz_sqlite
from fuzz_outcomes import Tally
from fuzz_run import ENGINES, Fuzzers, functions, merged_report, run_calls, section

SHORT_CALLS = 50
SEED = int(os.environ.get("FENCEQ_FUZZ_SEED", "0"))
ROOT = Path(__file__).resolve().parents[2]


def _report(tallies: list[Tally]) -> str:
    return "\n".join(f"{t.engine} {t.function} {kind} ({found.count}x): {found.message}\n    {found.example}"
                     for t in tallies for kind, found in t.unexpected().items())


def _fuzz_all(fuzzers: Fuzzers, engine: str) -> list[Tally]:
    names = functions(engine, fuzzers)
    assert names, f"{engine}: nothing to fuzz"
    tallies = [run_calls(fuzzers, engine, name, SHORT_CALLS, SEED) for name in names]
    unfuzzed = [t.function for t in tallies if t.calls < SHORT_CALLS]
    assert not unfuzzed, f"{engine}: not fuzzed: {unfuzzed}"
    return tallies


def test_every_postgres_function_answers_only_allowed_codes(pg):
    fuzzers = Fuzzers(pg.url, "")
    try:
        tallies = _fuzz_all(fuzzers, "postgres")
    finally:
        fuzzers.close()
    assert not _report(tallies), "findings:\n" + _report(tallies)
    # The calls reach past validation: most functions succeed sometimes.
    assert sum(t.ok > 0 for t in tallies) >= len(tallies) * 0.9, [t.function for t in tallies if not t.ok]


def test_every_sqlite_operation_answers_only_allowed_codes(sqlite_db):
    fuzzers = Fuzzers("", sqlite_db.url)
    try:
        tallies = _fuzz_all(fuzzers, "sqlite") + _fuzz_all(fuzzers, "sqlite-file")
    finally:
        fuzzers.close()
    assert not _report(tallies), "findings:\n" + _report(tallies)


def test_the_catalog_enumeration_sees_every_public_function(pg):
    """The fuzzer enumerates from pg_proc; this checks that enumeration
    against the install scripts, so that a function it missed cannot go
    unfuzzed silently."""
    declared = set()
    for path in sorted((ROOT / "sql" / "postgres").glob("*.sql")):
        declared |= set(re.findall(r"CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE) fenceq\.([a-z][a-z0-9_]*)\(",
                                   path.read_text(encoding="utf-8")))
    fuzzers = Fuzzers(pg.url, "")
    try:
        enumerated = set(functions("postgres", fuzzers))
    finally:
        fuzzers.close()
    assert declared <= enumerated, declared - enumerated


def test_every_sqlite_operation_has_a_client_method_to_fuzz():
    operations = fuzz_sqlite.operations()
    assert set(fuzz_sqlite.statement_files()) - fenceq.backends.sqlite.STATEMENT_PARTS <= set(operations)
    missing = [name for name in operations if not callable(getattr(fenceq.Client, name, None))]
    assert not missing, missing


def _write(connect, statement: str, commit: bool) -> None:
    with contextlib.closing(connect()) as conn:
        conn.execute(statement)
        conn.commit() if commit else conn.rollback()


@pytest.mark.parametrize("engine", ["postgres", "sqlite"])
def test_the_change_check_sees_every_committed_change_and_nothing_else(request, engine):
    """A refused call changed nothing when State.changed() says so: its
    cheap first look (row versions; SQLite's commit counter) must never
    hide a committed change, and a write that was rolled back, or that
    left the content as it was, is no change."""
    if engine == "postgres":
        url = request.getfixturevalue("pg").url
        fuzzers, tables = Fuzzers(url, ""), "fenceq._jobs"
        state = fuzzers.postgres().state
        connect = lambda: psycopg.connect(url)  # noqa: E731
    else:
        url = request.getfixturevalue("sqlite_db").url
        fuzzers, tables = Fuzzers("", url), "fenceq__jobs"
        state = fuzzers.sqlite().state
        connect = lambda: sqlite3.connect(fenceq.backends.sqlite.database_path(url))  # noqa: E731
    try:
        assert not state.changed()
        _write(connect, f"UPDATE {tables} SET priority = priority + 1", commit=False)
        assert not state.changed()
        _write(connect, f"UPDATE {tables} SET priority = priority + 1 - 1", commit=True)
        assert not state.changed()
        _write(connect, f"UPDATE {tables} SET priority = priority + 1", commit=True)
        assert state.changed()
        assert not state.changed()  # it now holds the new content
        _write(connect, f"DELETE FROM {tables} WHERE seq = (SELECT max(seq) FROM {tables})", commit=True)
        assert state.changed()
    finally:
        fuzzers.close()


def _tally(engine: str, function: str, calls: int) -> Tally:
    return Tally(engine, function, calls=calls, ok=calls)


def test_a_partial_run_replaces_its_rows_and_keeps_the_others():
    earlier = {"calls_per_function": 600, "seconds": 1608,
               "tallies": [_tally(e, f, 600).as_json() for e in ENGINES for f in ("reap", "submit", "gone")]}
    run = {"command": "make fuzz FUZZ_ENGINES=sqlite FUZZ_FUNCTIONS=submit", "calls_per_function": 1000,
           "seconds": 60, "calls": 1000}
    report = merged_report(earlier, run, [_tally("sqlite", "submit", 1000)], set())
    rows = {(t["engine"], t["function"]): (t["calls"], t["run"]) for t in report["tallies"]}
    assert len(rows) == 9 and rows[("sqlite", "submit")] == (1000, 1) and rows[("sqlite", "reap")] == (600, 0)
    assert [r["command"] for r in report["runs"]] == ["make fuzz FUZZ_CALLS=600", run["command"]]
    text = section(report)
    assert "Gathered by 2 runs, 27.8 minutes in all" in text and "(600, 1000 calls per function)" in text
    assert "| 2 | sqlite | submit | 1000 |" in text and "| 1 | sqlite | reap | 600 |" in text
    assert "1. `make fuzz FUZZ_CALLS=600`: 4800 of its 5400 calls (the others ran again later) in 26.8 minutes" in text

    # An engine that runs whole replaces all its rows; a run no row comes from is dropped.
    whole = merged_report(report, {**run, "command": "make fuzz FUZZ_ENGINES=sqlite"},
                          [_tally("sqlite", f, 1000) for f in ("reap", "submit")], {"sqlite"})
    assert sorted(t["function"] for t in whole["tallies"] if t["engine"] == "sqlite") == ["reap", "submit"]
    assert [r["command"] for r in whole["runs"]] == ["make fuzz FUZZ_CALLS=600", "make fuzz FUZZ_ENGINES=sqlite"]
    alone = merged_report(None, {**run, "calls": 3000}, [_tally(e, "submit", 1000) for e in ENGINES], set(ENGINES))
    assert section(alone).splitlines()[1].startswith(f"`{run['command']}`: 3000 calls in 1.0 minutes")
