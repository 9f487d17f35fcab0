"""Install script and migrations on PostgreSQL (docs/guarantees.md §9)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ProcessPoolExecutor

import psycopg

import fenceq
import pytest
from yoyo import get_backend, read_migrations

from conftest import pg_url
from fenceq.backends.migrations import _yoyo_url_pg, install_script, migrate
from fenceq.backends.migrations import migrations_dir


@pytest.fixture
def empty_db(pg):
    name = "fenceq_empty_" + uuid.uuid4().hex[:12]
    pg.sql(f"CREATE DATABASE {name}")
    yield pg_url(name)
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _applied(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT migration_id FROM fenceq_migrations._yoyo_migration"
                                            " ORDER BY migration_id")]


def test_migrate_is_idempotent(empty_db):
    assert all(c.ok for c in migrate(empty_db))
    assert all(c.ok for c in migrate(empty_db))
    assert _applied(empty_db) == ["0001_fenceq_v1", "0002_fenceq_v2", "0003_fenceq_v3", "0004_fenceq_v4", "0005_fenceq_v5",
                                 "0006_fenceq_v6", "0007_fenceq_v7", "0008_fenceq_v8",
                                 "0009_fenceq_v9"]


def test_install_script_records_the_migrations(empty_db):
    script = install_script("postgres")
    for _ in range(2):  # idempotent
        subprocess.run(["psql", empty_db, "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"], input=script,
                       text=True, check=True, capture_output=True)
    backend = get_backend(_yoyo_url_pg(empty_db))
    try:
        assert list(backend.to_apply(read_migrations(str(migrations_dir("postgres"))))) == []
    finally:
        backend.connection.close()
    assert all(c.ok for c in migrate(empty_db))


def test_concurrent_migrations_all_succeed(empty_db):
    with ProcessPoolExecutor(4) as pool:
        results = list(pool.map(migrate, [empty_db] * 4))
    assert all(all(c.ok for c in checks) for checks in results)
    assert _applied(empty_db) == ["0001_fenceq_v1", "0002_fenceq_v2", "0003_fenceq_v3", "0004_fenceq_v4", "0005_fenceq_v5",
                                 "0006_fenceq_v6", "0007_fenceq_v7", "0008_fenceq_v8",
                                 "0009_fenceq_v9"]


def test_rollback_then_upgrade_again(empty_db):
    migrate(empty_db)
    backend = get_backend(_yoyo_url_pg(empty_db))
    try:
        migrations = read_migrations(str(migrations_dir("postgres")))
        with backend.lock():
            backend.rollback_migrations(backend.to_rollback(migrations))
    finally:
        backend.connection.close()
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("SELECT to_regnamespace('fenceq')").fetchone()[0] is None
    assert all(c.ok for c in migrate(empty_db))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fenceq.cli", *args], capture_output=True, text=True)


def test_cli_migrate_and_verify(empty_db):
    done = _cli("migrate", "--url", empty_db)
    assert done.returncode == 0 and "verified" in done.stdout
    assert _cli("verify", "--url", empty_db).returncode == 0
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION fenceq.version() TO PUBLIC")
    failed = _cli("verify", "--url", empty_db)
    assert failed.returncode == 1 and "no_public_execute" in failed.stdout
    refused = _cli("migrate", "--url", empty_db)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "no_public_execute" in refused.stderr


def test_cli_reports_unreachable_database_without_a_traceback():
    done = _cli("verify", "--url", "postgresql://nobody:secret-pw@127.0.0.1:1/none")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "secret-pw" not in done.stderr


def test_downgrade_refuses_to_lose_identities_unless_allowed(empty_db):
    from fenceq.errors import FenceqError
    from fenceq.migrate import rollback

    migrate(empty_db)
    with fenceq.connect(empty_db) as client:
        client.create_queue("q")
        client.submit("q", "t", submission_id="keep-me")
    with pytest.raises(FenceqError) as info:
        rollback(empty_db)
    assert info.value.sqlstate == "QF901"
    with fenceq.connect(empty_db) as client:
        assert client.submit("q", "t", submission_id="keep-me")  # nothing was dropped
    assert _applied(empty_db) == ["0001_fenceq_v1"]  # v2 -> v1 lost nothing and went through
    assert rollback(empty_db, allow_data_loss=True) == ["0001_fenceq_v1"]
    assert _applied(empty_db) == []
    assert all(c.ok for c in migrate(empty_db))  # up again
