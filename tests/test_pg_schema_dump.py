"""Migrations proven equal to a fresh install, and the committed schema dump
(procrastinate's and graphile-worker's practice)."""

from __future__ import annotations

import difflib
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import pg_url
from fenceq.migrate import install_script, migrate, schema_dump_pg

COMMITTED = Path(__file__).resolve().parents[1] / "sql" / "schema" / "postgres.sql"


@pytest.fixture
def two_empty_databases(pg):
    names = ["fenceq_cmp_" + uuid.uuid4().hex[:10] for _ in range(2)]
    for name in names:
        pg.sql(f"CREATE DATABASE {name}")
    yield [pg_url(name) for name in names]
    for name in names:
        pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _diff(a: str, b: str, names: tuple[str, str]) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), *names, n=2))[:4000]


def test_migration_chain_equals_the_install_script_and_the_committed_dump(two_empty_databases):
    by_migrations, by_script = two_empty_databases
    migrate(by_migrations)
    subprocess.run(["psql", by_script, "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"],
                   input=install_script("postgres"), text=True, check=True, capture_output=True)
    migrated, installed = schema_dump_pg(by_migrations), schema_dump_pg(by_script)
    assert migrated == installed, _diff(migrated, installed, ("migrations", "install script"))
    committed = COMMITTED.read_text(encoding="utf-8")
    assert migrated == committed, (
        "sql/schema/postgres.sql is out of date: run `make schema`\n"
        + _diff(committed, migrated, ("committed", "fresh")))
