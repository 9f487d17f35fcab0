"""The SQLite schema: install script, migrations, verify_schema, and the
statement-file conventions of sql/sqlite/README.md."""

from __future__ import annotations

import contextlib
import inspect
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import fenceq
from fenceq import ops
from fenceq.backends.migrations import install_script_sqlite as install_script, migrate_sqlite
from fenceq.backends.sqlite import load_script
from fenceq._resources import sql_dir

VIEW_OPERATIONS = {"stats", "attempts", "dead_letters", "schedules"}


def apply_script(path: Path, script: str) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executescript(script)


def checks(url: str) -> dict[str, bool]:
    with fenceq.connect(url) as client:
        return {c.check_name: c.ok for c in client.verify_schema()}


def test_install_script_is_idempotent_and_leaves_migrate_nothing_to_do(tmp_path):
    path = tmp_path / "installed.db"
    apply_script(path, install_script())
    apply_script(path, install_script())
    url = f"sqlite:///{path}"
    assert all(check.ok for check in migrate_sqlite(url))
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM _yoyo_log").fetchone() == (0,)  # nothing applied
        assert conn.execute("SELECT count(*) FROM _yoyo_migration").fetchone() == (8,)  # 0001 to 0008
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with fenceq.connect(url) as client:
        assert client.version() == "8"


def test_concurrent_migrations_from_several_processes(tmp_path):
    url = f"sqlite:///{tmp_path / 'raced.db'}"
    processes = [subprocess.Popen([sys.executable, "-m", "fenceq.cli", "migrate", "--url", url],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    assert all(checks(url).values())
    with contextlib.closing(sqlite3.connect(tmp_path / "raced.db")) as conn:
        assert conn.execute("SELECT count(*) FROM _yoyo_migration").fetchone() == (8,)  # 0001 to 0008


TAMPERED = {
    "nocase_column": (
        "    owner_id          TEXT,\n", "    owner_id          TEXT COLLATE NOCASE,\n", "", "binary_collations"),
    "nocase_identity": (
        "    claim_token TEXT NOT NULL PRIMARY KEY,", "    claim_token TEXT NOT NULL COLLATE NOCASE PRIMARY KEY,", "",
        "binary_collations claim_token_unique"),
    "partial_unique_index": (
        "    claim_token TEXT NOT NULL PRIMARY KEY,", "    claim_token TEXT NOT NULL,",
        "CREATE UNIQUE INDEX partial_token ON fenceq__claims (claim_token) WHERE claim_token <> '';",
        "claim_token_unique"),
    "multi_column_unique_index": (
        "    submission_id TEXT NOT NULL PRIMARY KEY,", "    submission_id TEXT NOT NULL,",
        "CREATE UNIQUE INDEX pair ON fenceq__submissions (submission_id, queue);", "submission_id_unique"),
    "identity_default": (
        "    job_id            TEXT NOT NULL UNIQUE,",
        "    job_id            TEXT NOT NULL UNIQUE DEFAULT (lower(hex(randomblob(16)))),", "", "defaults"),
    "trigger": (
        "", "", "CREATE TRIGGER fold AFTER INSERT ON fenceq__claims BEGIN SELECT 1; END;", "no_triggers"),
    "loose_table": (") STRICT, WITHOUT ROWID;", ") WITHOUT ROWID;", "", "strict_tables"),
    "no_claim_kinds": (
        ",\n    CHECK ((job_id IS NULL) = (job_ids IS NOT NULL) AND (job_id IS NULL) = (generation IS NULL))", "", "",
        "claim_kinds"),
    "half_claim_kinds": (
        "CHECK ((job_id IS NULL) = (job_ids IS NOT NULL) AND (job_id IS NULL) = (generation IS NULL))",
        "CHECK ((job_id IS NULL) = (generation IS NULL))", "", "claim_kinds"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_verify_schema_refuses_a_tampered_schema(tmp_path, case):
    old, new, extra, failing = TAMPERED[case]
    script = install_script()
    assert old in script
    script = script.replace(old, new).replace("COMMIT;\n", extra + "\nCOMMIT;\n")
    path = tmp_path / "tampered.db"
    apply_script(path, script)
    url = f"sqlite:///{path}"
    results = checks(url)
    assert [name for name, ok in results.items() if not ok] == failing.split()
    with pytest.raises(fenceq.ConfigError) as info:
        migrate_sqlite(url)
    assert info.value.sqlstate == "QF901"
    with contextlib.closing(sqlite3.connect(path)) as conn:  # the probe index was rolled back
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'fenceq_verify%'").fetchone() == (0,)


def test_every_operation_has_a_statement_file_that_follows_the_conventions():
    operations = {name for name, f in inspect.getmembers(ops, inspect.isfunction)
                  if f.__module__ == ops.__name__ and not name.startswith("_")
                  and name not in {"submit_request", "progress_text", "recover_claims"}}  # recover_claim's file
    files = {path.stem for path in sql_dir("sqlite").glob("*.sql")}
    assert operations - VIEW_OPERATIONS - {"verify_schema"} <= files
    for name in sorted(files - {"schema"}):
        text = (sql_dir("sqlite") / f"{name}.sql").read_text()
        assert text.startswith(f"-- fenceq for SQLite: {name} -- ")
        assert "-- How to run:" in text and "-- Parameters:" in text and "-- Result:" in text
        statements = load_script(name)
        assert all(sqlite3.complete_statement(s.sql) for s in statements), name
        final = statements[-1].sql
        assert "sqlstate" in final, name
