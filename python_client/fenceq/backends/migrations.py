"""Migrations (yoyo-migrations) and the install scripts, for both engines.

``migrations/<backend>/`` holds the yoyo chain. yoyo's bookkeeping tables
live apart from fenceq's (PostgreSQL: in the schema ``fenceq_migrations``)
so that rolling back the first migration, which drops fenceq's tables,
leaves them be. The install script printed by ``fenceq sql`` is the same SQL
plus the same bookkeeping rows, so ``fenceq migrate`` after it has nothing
to apply. ``fenceq.migrate`` is the public face of this module.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import ops
from .._resources import migrations_dir, sql_dir
from ..errors import FenceqError, PersistenceFailed, config_error
from ..types import SchemaCheck
from . import backend_of

PG_MIGRATION_SCHEMA = "fenceq_migrations"
# Serialises concurrent `fenceq migrate` runs against one PostgreSQL database.
PG_MIGRATE_LOCK = 4_711_000_001


def check(results: list[Any]) -> list[Any]:
    """The schema checks, or QF901 naming those that failed."""
    failed = [r.check_name for r in results if not r.ok]
    if failed:
        raise config_error("QF901", "the schema fails verify_schema checks: " + ", ".join(failed))
    return results


def migrate(url: str, progress: Callable[[str], None] | None = None) -> list[SchemaCheck]:
    """Apply pending migrations, then verify_schema. Idempotent; concurrent
    runs against one database are serialised. Returns the schema checks;
    raises QF901 when any fails. ``progress`` hears about long work that
    follows a step (PostgreSQL's 0005: the jobs it marks, batch by batch)."""
    return migrate_sqlite(url) if backend_of(url) == "sqlite" else migrate_postgres(url, progress)


def rollback(url: str, *, allow_data_loss: bool = False, to_version: int = 0) -> list[str]:
    """Roll back the applied migrations above ``to_version`` (by default
    every one), newest first, each in its own transaction. A step that would
    lose retained submission identities or live claims takes its locks, then
    refuses (QF901) unless ``allow_data_loss``. Returns the ids rolled back."""
    latest = max(_version_of(mid) for mid in migration_ids(backend_of(url)))
    if isinstance(to_version, bool) or not isinstance(to_version, int) or not 0 <= to_version <= latest:
        raise config_error("QF100", f"to_version must be a schema version from 0 to {latest}")
    if backend_of(url) == "sqlite":
        return rollback_sqlite(url, allow_data_loss, to_version)
    return rollback_postgres(url, allow_data_loss, to_version)


def _version_of(migration_id: str) -> int:
    """Migration NNNN_fenceq_vN is the step to schema version N."""
    return int(migration_id.split("_", 1)[0])


def install_script(backend: str) -> str:
    """The complete, idempotent install script a DBA reviews and applies."""
    if backend == "postgres":
        return install_script_postgres()
    if backend == "sqlite":
        return install_script_sqlite()
    raise config_error("QF100", "backend must be postgres or sqlite")


def migration_ids(backend: str) -> list[str]:
    return sorted(path.stem for path in migrations_dir(backend).glob("[0-9]*.py"))


# yoyo's bookkeeping -------------------------------------------------------------

@dataclass(frozen=True)
class _Bookkeeping:
    """How one engine spells yoyo's tables and rows."""
    backend: str
    prefix: str        # where the tables live
    preamble: str      # what must exist first
    now: str           # the current UTC time, as yoyo stores it
    insert: str        # an insert that skips existing rows ...
    on_conflict: str   # ... and how it ends


_POSTGRES = _Bookkeeping("postgres", f"{PG_MIGRATION_SCHEMA}.",
                         f"CREATE SCHEMA IF NOT EXISTS {PG_MIGRATION_SCHEMA};\n",
                         "timezone('UTC', clock_timestamp())", "INSERT INTO", " ON CONFLICT DO NOTHING")
_SQLITE = _Bookkeeping("sqlite", "", "", "strftime('%Y-%m-%dT%H:%M:%f', 'now')", "INSERT OR IGNORE INTO", "")


def _yoyo_bookkeeping(engine: _Bookkeeping) -> str:
    """yoyo's own tables (its internal schema version 2) and a row per
    migration, exactly as `yoyo apply` would leave them."""
    p, now = engine.prefix, engine.now
    rows = ",\n    ".join(f"('{hashlib.sha256(mid.encode()).hexdigest()}', '{mid}', {now})"
                          for mid in migration_ids(engine.backend))
    return f"""
-- Migration bookkeeping (yoyo-migrations), so that `fenceq migrate` after
-- this script has nothing to apply.
{engine.preamble}CREATE TABLE IF NOT EXISTS {p}"_yoyo_migration" (
    "migration_hash" VARCHAR(64), "migration_id" VARCHAR(255), "applied_at_utc" TIMESTAMP,
    PRIMARY KEY ("migration_hash"));
CREATE TABLE IF NOT EXISTS {p}"_yoyo_log" (
    "id" VARCHAR(36), "migration_hash" VARCHAR(64), "migration_id" VARCHAR(255),
    "operation" VARCHAR(10), "username" VARCHAR(255), "hostname" VARCHAR(255),
    "comment" VARCHAR(255), "created_at_utc" TIMESTAMP, PRIMARY KEY ("id"));
CREATE TABLE IF NOT EXISTS {p}"_yoyo_version" (
    "version" INT NOT NULL PRIMARY KEY, "installed_at_utc" TIMESTAMP);
CREATE TABLE IF NOT EXISTS {p}"yoyo_lock" (
    "locked" INT DEFAULT 1, "ctime" TIMESTAMP, "pid" INT NOT NULL, PRIMARY KEY ("locked"));
{engine.insert} {p}"_yoyo_version" VALUES (2, {now}){engine.on_conflict};
{engine.insert} {p}"_yoyo_migration" VALUES
    {rows}{engine.on_conflict};
"""


# PostgreSQL ---------------------------------------------------------------------

def sql_files(backend: str, names: list[str] | None = None) -> list[Path]:
    folder = sql_dir(backend)
    if names is None:
        return sorted(folder.glob("[0-9]*.sql"))
    return [folder / name for name in names]


def read_sql(backend: str, names: list[str] | None = None) -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in sql_files(backend, names))


def install_script_postgres() -> str:
    return (
        "-- fenceq install script for PostgreSQL (generated by `fenceq sql`).\n"
        "-- Apply with: psql -v ON_ERROR_STOP=1 -f fenceq.sql\n"
        "BEGIN;\n"
        f"SELECT pg_advisory_xact_lock({PG_MIGRATE_LOCK});\n\n"
        + read_sql("postgres") + _yoyo_bookkeeping(_POSTGRES) + "COMMIT;\n"
    )


def _yoyo_url_pg(url: str, *, allow_data_loss: bool = False) -> str:
    """yoyo's URL for a database: its tables in their own schema; the data
    loss flag travels as a connection option because yoyo runs each
    migration on a fresh copy of its connection."""
    from .postgres import connection_url

    rest = connection_url(url).split("://", 1)[1]
    separator = "&" if "?" in rest else "?"
    options = "&options=-c%20fenceq.allow_data_loss%3Don" if allow_data_loss else ""
    return f"postgresql+psycopg://{rest}{separator}schema={PG_MIGRATION_SCHEMA}{options}"


def _lock_migrations(lock_conn: Any) -> None:
    """The session advisory lock that serialises migrate runs. It, and yoyo's
    session search_path, need a session of their own: through a connection
    pooler the lock would stay behind on a pooled server connection."""
    from .postgres import pooled

    if pooled(lock_conn):
        raise config_error("QF100", "migrations need a direct connection to PostgreSQL, not one through "
                                    "a connection pooler such as PgBouncer: pass the server's own URL")
    lock_conn.execute(f"SELECT pg_advisory_lock({PG_MIGRATE_LOCK})")


# Step 0005 (jobs due later wait apart) leaves the pending jobs that version
# 4 had waiting for a later run_at unmarked, so that its ACCESS EXCLUSIVE
# lock lasts only for the column and the index builds; migrate marks them
# once the step has committed, a batch of row locks at a time, walking the
# primary key once (docs/dba.md §7). SKIP LOCKED: a row someone holds is a
# job being claimed (due, so not one to mark) or cancelled.
MARK_WAITING_BATCH = 10_000
MARK_WAITING = """
WITH batch AS MATERIALIZED (
    SELECT j.job_id FROM fenceq._jobs AS j
     WHERE j.job_id > %(after)s::text COLLATE "C" ORDER BY j.job_id LIMIT %(size)s::integer),
marked AS (
    UPDATE fenceq._jobs AS j
       SET scheduled = true
      FROM (SELECT w.job_id FROM fenceq._jobs AS w
             WHERE w.job_id IN (SELECT b.job_id FROM batch AS b)
               AND w.status = 'pending' AND NOT w.scheduled AND w.run_at > clock_timestamp()
               FOR UPDATE SKIP LOCKED) AS w
     WHERE j.job_id = w.job_id
    RETURNING 1)
SELECT (SELECT max(b.job_id) FROM batch AS b), (SELECT count(*) FROM marked)
"""


def mark_waiting_jobs(conn: Any, progress: Callable[[str], None] | None = None) -> int:
    """Mark the pending jobs due later that step 0005 left unmarked; each
    batch commits on its own (``conn`` in autocommit). Returns how many."""
    after, marked, batches = "", 0, 0
    while True:
        last, count = conn.execute(MARK_WAITING, {"after": after, "size": MARK_WAITING_BATCH}).fetchone()
        if last is None:
            break
        after, marked, batches = last, marked + count, batches + 1
        if progress is not None and batches % 10 == 0:
            progress(f"marked {marked} jobs due later ({batches * MARK_WAITING_BATCH} jobs read)")
    if progress is not None:
        progress(f"marked {marked} jobs due later in {batches} batches")
    return marked


def apply_postgres_steps_through(url: str, last: str) -> None:
    """Apply the PostgreSQL steps up to and including ``last`` (a migration
    id) and nothing after, without the admission check or the marking: a
    database of an earlier version, for upgrade tests and benchmarks."""
    import psycopg
    from yoyo import get_backend, read_migrations

    from .postgres import connection_url

    with psycopg.connect(connection_url(url), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_MIGRATION_SCHEMA}")
    backend = get_backend(_yoyo_url_pg(url))
    try:
        with backend.lock():
            steps = read_migrations(str(migrations_dir("postgres"))).filter(lambda m: m.id <= last)
            backend.apply_migrations(backend.to_apply(steps))
    finally:
        backend.connection.close()


def migrate_postgres(url: str, progress: Callable[[str], None] | None = None) -> list[SchemaCheck]:
    import psycopg
    from yoyo import get_backend, read_migrations

    from .postgres import PostgresBackend, connection_url, driver_error

    try:
        with psycopg.connect(connection_url(url), autocommit=True) as lock_conn:
            _lock_migrations(lock_conn)
            lock_conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_MIGRATION_SCHEMA}")
            backend = get_backend(_yoyo_url_pg(url))
            try:
                with backend.lock():
                    steps = backend.to_apply(read_migrations(str(migrations_dir("postgres"))))
                    backend.apply_migrations(steps)
            finally:
                backend.connection.close()
            if any(step.id == "0005_fenceq_v5" for step in steps):
                mark_waiting_jobs(lock_conn, progress)
    except psycopg.Error as exc:
        raise driver_error(exc) from exc
    verifier = PostgresBackend(url=url)
    try:
        return check(verifier.run(ops.verify_schema()))
    finally:
        verifier.close()


def rollback_postgres(url: str, allow_data_loss: bool, to_version: int) -> list[str]:
    import psycopg
    from yoyo import get_backend, read_migrations

    from .postgres import connection_url, driver_error

    try:
        with psycopg.connect(connection_url(url), autocommit=True) as lock_conn:
            _lock_migrations(lock_conn)
            backend = get_backend(_yoyo_url_pg(url, allow_data_loss=allow_data_loss))
            try:
                migrations = read_migrations(str(migrations_dir("postgres")))
                chosen = [m for m in backend.to_rollback(migrations) if _version_of(m.id) > to_version]
                with backend.lock():
                    backend.rollback_migrations(chosen)
                return [m.id for m in chosen]
            finally:
                backend.connection.close()
    except psycopg.Error as exc:
        raise driver_error(exc) from exc


def schema_dump_pg(url: str) -> str:
    """A normalised schema-only dump of fenceq's schemas: what the install
    created, with pg_dump's volatile lines (version banners, the per-run
    \\restrict key, blank runs) removed, so two installs can be diffed and
    the result kept under version control."""
    import subprocess

    from .postgres import connection_url

    dump = subprocess.run(
        ["pg_dump", "--schema-only", "--no-tablespaces", "--schema=fenceq",
         "--schema=" + PG_MIGRATION_SCHEMA, "--dbname", connection_url(url)],
        check=True, capture_output=True, text=True).stdout
    lines: list[str] = []
    for line in dump.splitlines():
        if line.startswith("--") or line.startswith("\\restrict") or line.startswith("\\unrestrict"):
            continue
        if not line.strip() and (not lines or not lines[-1].strip()):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


# SQLite -------------------------------------------------------------------------

def install_script_sqlite() -> str:
    """The install script `fenceq sql --backend sqlite` prints."""
    schema = (sql_dir("sqlite") / "schema.sql").read_text(encoding="utf-8")
    return (
        "-- fenceq install script for SQLite (generated by `fenceq sql --backend sqlite`).\n"
        "-- Apply with: sqlite3 fenceq.db < fenceq.sql\n"
        "-- then check it with: fenceq verify --url sqlite:///fenceq.db\n"
        "-- WAL lets readers and one writer work at once; the mode is kept in the\n"
        "-- file, and can only be set outside a transaction.\n"
        "PRAGMA journal_mode = WAL;\n"
        "BEGIN IMMEDIATE;\n\n"
        + schema + _yoyo_bookkeeping(_SQLITE) + "COMMIT;\n"
    )


def migrate_sqlite(url: str) -> list[SchemaCheck]:
    """yoyo's lock row serialises concurrent runs."""
    import sqlite3

    from yoyo import get_backend, read_migrations
    from yoyo.exceptions import LockTimeout

    from . import sqlite

    path = sqlite.database_path(url)
    try:
        connection = sqlite.open_connection(path)
        try:
            connection.execute("PRAGMA journal_mode = WAL").fetchall()
        finally:
            connection.close()
        backend = get_backend(f"sqlite:///{path}")
        try:
            with backend.lock(timeout=sqlite.BUSY_TIMEOUT_SECONDS * 6):
                backend.apply_migrations(backend.to_apply(read_migrations(str(migrations_dir("sqlite")))))
        finally:
            backend.connection.close()
    except (sqlite3.Error, LockTimeout) as exc:
        raise PersistenceFailed() from exc
    verifier = sqlite.SqliteBackend(url)
    try:
        return check(verifier.run(ops.verify_schema()))
    finally:
        verifier.close()


def rollback_sqlite(url: str, allow_data_loss: bool, to_version: int) -> list[str]:
    """SQLite has no session settings a migration's fresh connection would
    see, so the data-loss flag travels in the environment of this process."""
    import sqlite3

    from yoyo import get_backend, read_migrations

    from .sqlite import database_path

    saved = os.environ.get("FENCEQ_ALLOW_DATA_LOSS")
    os.environ["FENCEQ_ALLOW_DATA_LOSS"] = "1" if allow_data_loss else "0"
    backend = get_backend(f"sqlite:///{database_path(url)}")
    try:
        chosen = [m for m in backend.to_rollback(read_migrations(str(migrations_dir("sqlite"))))
                  if _version_of(m.id) > to_version]
        with backend.lock():
            backend.rollback_migrations(chosen)
        return [m.id for m in chosen]
    except FenceqError:
        raise
    except sqlite3.Error as exc:
        raise PersistenceFailed() from exc
    finally:
        backend.connection.close()
        if saved is None:
            os.environ.pop("FENCEQ_ALLOW_DATA_LOSS", None)
        else:
            os.environ["FENCEQ_ALLOW_DATA_LOSS"] = saved
