"""The short profile of the fuzzer (docs/fuzzing.md): every public function
on every engine, enumerated at run time, gets SHORT_CALLS generated calls;
each must succeed or be refused with an allowed code and change nothing.
``make fuzz`` runs the long profile (tests/fuzz/fuzz_run.py).

FENCEQ_FUZZ_SEED picks other calls than the default seed's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import fenceq
import fenceq.backends.sqlite
import fuzz_sqlite
from fuzz_outcomes import Tally
from fuzz_run import Fuzzers, functions, run_calls

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
