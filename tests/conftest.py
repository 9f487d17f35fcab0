"""Test fixtures: real databases only.

``db`` is parametrised over the backends, so each behaviour is written once
and runs on every engine (River's riverdrivertest style). PostgreSQL comes
from the server `make test` starts (scripts/pg-test-server); each test gets
a fresh database cloned from a template that `fenceq migrate` installed once
(pytest-postgresql's, made at the start of the run).

The PostgreSQL server is the one on $FENCEQ_TEST_PG_PORT (`make test-pg16`
points it at a PostgreSQL 16 server). With $FENCEQ_TEST_PGBOUNCER_PORT set
(`make test-pgbouncer`), the ``db`` fixture's PostgreSQL URL goes through the
PgBouncer listening there, in front of that server; the templates, the
cloning and the ``pg`` fixture stay direct. Tests that run on the
PostgreSQL half of ``db`` are marked ``pg_conformance`` (the conformance
suite); those and the ``pg``-fixture tests are marked ``pg_server``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql
from pytest_postgresql import factories

import fenceq
from fenceq.backends.sqlite import database_path
from fenceq.migrate import migrate

PG_PORT = int(os.environ.get("FENCEQ_TEST_PG_PORT", "54329"))
CLIENT_PG_PORT = int(os.environ.get("FENCEQ_TEST_PGBOUNCER_PORT") or PG_PORT)
BACKENDS = ["postgres", "sqlite"]


def pg_url(dbname: str, port: int = PG_PORT) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{dbname}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pg_conformance: runs on the PostgreSQL half of the db fixture")
    config.addinivalue_line("markers", "pg_server: uses the test PostgreSQL server (pg_conformance, or pg)")
    config.addinivalue_line("markers", "system: a whole-program run, in make test-system rather than make test")


# Conformance tests that migrate or roll back db.url: migrations need a
# direct connection (docs/dba.md, "PgBouncer"), so through PgBouncer they
# are skipped; tests/test_pgbouncer.py checks that migrate refuses clearly.
NEEDS_DIRECT_CONNECTION = frozenset({
    "test_up_down_up_round_trip", "test_downgrade_refuses_to_lose_data_unless_allowed",
    "test_rollback_to_a_version", "test_demo_tells_its_story",
    "test_rolling_back_to_version_2_refuses_while_a_lock_row_exists"})


# Whole-program runs (each starts the CLI, a demo, a page's commands or a
# bench in subprocesses) and the short profiles of fuzz and the model:
# `make test-system` runs them, `make test`
# leaves them out to stay under 15 minutes; CI runs both.
SYSTEM_RUNS = ("tests/worker/test_demo.py::", "tests/test_dashboard_cli.py::", "tests/test_quickstart.py::",
               "tests/test_bench_", "tests/test_backends.py::test_every_module_imports_on_its_own",
               "tests/fuzz/test_fuzz.py::test_every_postgres_function_answers_only_allowed_codes",
               "tests/fuzz/test_fuzz.py::test_every_sqlite_operation_answers_only_allowed_codes",
               "tests/model/test_model.py::test_model_and_engines_agree")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SYSTEM_RUNS):
            item.add_marker("system")
        callspec = getattr(item, "callspec", None)
        conformance = callspec is not None and callspec.params.get("db") == "postgres"
        if conformance:
            item.add_marker("pg_conformance")
            if CLIENT_PG_PORT != PG_PORT and getattr(item, "originalname", "") in NEEDS_DIRECT_CONNECTION:
                item.add_marker(pytest.mark.skip(reason="migrates: needs a direct connection, not PgBouncer"))
        if conformance or "pg" in getattr(item, "fixturenames", ()):
            item.add_marker("pg_server")


def install_fenceq(**kwargs: Any) -> None:
    migrate(pg_url(kwargs["dbname"]))


postgresql_noproc = factories.postgresql_noproc(
    host="127.0.0.1", port=PG_PORT, user="postgres",
    # Per test run, so that concurrent runs against one server never collide.
    dbname=f"fenceq_test_{os.getpid()}", load=[install_fenceq])


class Clones:
    """Each test's database, cloned from the template and dropped after it
    over one connection kept for the run (pytest-postgresql's own fixture
    opens four connections per test: more time than the clone itself when
    the server's files are in memory)."""

    def __init__(self, template: str):
        self.template, self.names, self.conn = template, itertools.count(1), None

    def execute(self, statement: sql.Composable) -> None:
        if self.conn is None or self.conn.broken:
            self.conn = psycopg.connect(pg_url("postgres"), autocommit=True)
        self.conn.execute(statement)

    @contextlib.contextmanager
    def clone(self) -> Iterator[str]:
        name = f"{self.template}_{next(self.names)}"
        self.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(self.template)))
        try:
            yield name
        finally:
            # FORCE: a worker process the test left connected is cut off.
            self.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_clones(postgresql_noproc) -> Iterator[Clones]:
    clones = Clones(postgresql_noproc.template_dbname)
    yield clones
    if clones.conn is not None:
        clones.conn.close()


@pytest.fixture
def pg_database(pg_clones: Clones) -> Iterator[str]:
    """The name of a fresh PostgreSQL database for this test."""
    with pg_clones.clone() as name:
        yield name


@dataclass
class Database:
    """One freshly installed fenceq database on one backend."""

    backend: str
    url: str

    def connect(self) -> fenceq.Client:
        return fenceq.connect(self.url)

    def connect_direct(self) -> fenceq.Client:
        """A client that bypasses PgBouncer (``make test-pgbouncer``): for an
        observer that must not wait for one of the pool's server connections."""
        return fenceq.connect(self.url.replace(f":{CLIENT_PG_PORT}/", f":{PG_PORT}/", 1))

    async def connect_async(self) -> fenceq.AsyncClient:
        return await fenceq.connect_async(self.url)

    def sql(self, statement: str, params: Any = None) -> list[tuple]:
        """Run raw SQL bypassing the client (PostgreSQL: as the test
        superuser; SQLite: on the file, committed)."""
        if self.backend == "sqlite":
            with contextlib.closing(sqlite3.connect(database_path(self.url), isolation_level=None)) as conn:
                cursor = conn.execute(statement, params or ())
                return cursor.fetchall() if cursor.description else []
        with psycopg.connect(self.url, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "postgres":
        yield Database("postgres", pg_url(request.getfixturevalue("pg_database"), CLIENT_PG_PORT))
    elif request.param == "sqlite":
        yield sqlite_database(request.getfixturevalue("tmp_path"))
    else:  # pragma: no cover - other backends register here
        raise AssertionError(request.param)


def sqlite_database(folder: Path) -> Database:
    """A fresh migrated SQLite file: a copy of one migrated template (the
    migration and its verify_schema run once per session)."""
    global _sqlite_template
    if _sqlite_template is None:
        template = Path(tempfile.mkdtemp(prefix="fenceq-sqlite-template-")) / "template.db"
        migrate(f"sqlite:///{template}")
        _sqlite_template = template
    path = folder / "fenceq.db"
    with contextlib.closing(sqlite3.connect(_sqlite_template)) as source, \
            contextlib.closing(sqlite3.connect(path)) as target:
        source.backup(target)
    return Database("sqlite", f"sqlite:///{path}")


_sqlite_template: Path | None = None


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Database:
    """A SQLite-only database, for tests of SQLite-specific behaviour."""
    return sqlite_database(tmp_path)


@pytest.fixture
def pg(pg_database: str) -> Database:
    """A PostgreSQL-only database, for tests of PostgreSQL-specific behaviour."""
    return Database("postgres", pg_url(pg_database))


@pytest.fixture
def client(db: Database) -> Iterator[fenceq.Client]:
    with db.connect() as c:
        yield c


@pytest.fixture
def queue(client: fenceq.Client) -> str:
    client.create_queue("default", lease=timedelta(seconds=30))
    return "default"
