"""Test fixtures: real databases only.

``db`` is parametrised over the backends, so each behaviour is written once
and runs on every engine (River's riverdrivertest style). PostgreSQL comes
from the server `make test` starts (scripts/pg-test-server); each test gets
a fresh database cloned by pytest-postgresql from a template that
`fenceq migrate` installed once.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from pytest_postgresql import factories

import fenceq
from fenceq.backends.sqlite import database_path
from fenceq.migrate import migrate

PG_PORT = int(os.environ.get("FENCEQ_TEST_PG_PORT", "54329"))
BACKENDS = ["postgres", "sqlite"]


def pg_url(dbname: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{PG_PORT}/{dbname}"


def install_fenceq(**kwargs: Any) -> None:
    migrate(pg_url(kwargs["dbname"]))


postgresql_noproc = factories.postgresql_noproc(
    host="127.0.0.1", port=PG_PORT, user="postgres",
    # Per test run, so that concurrent runs against one server never collide.
    dbname=f"fenceq_test_{os.getpid()}", load=[install_fenceq])
postgresql = factories.postgresql("postgresql_noproc")


@dataclass
class Database:
    """One freshly installed fenceq database on one backend."""

    backend: str
    url: str

    def connect(self) -> fenceq.Client:
        return fenceq.connect(self.url)

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
        conn = request.getfixturevalue("postgresql")
        yield Database("postgres", pg_url(conn.info.dbname))
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
def pg(postgresql: psycopg.Connection) -> Database:
    """A PostgreSQL-only database, for tests of PostgreSQL-specific behaviour."""
    return Database("postgres", pg_url(postgresql.info.dbname))


@pytest.fixture
def client(db: Database) -> Iterator[fenceq.Client]:
    with db.connect() as c:
        yield c


@pytest.fixture
def queue(client: fenceq.Client) -> str:
    client.create_queue("default", lease=timedelta(seconds=30))
    return "default"
