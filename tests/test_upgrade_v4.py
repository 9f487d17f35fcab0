"""PostgreSQL's step 0004_fenceq_v4 (docs/dba.md §7): from a database that
migrations 0001 to 0003 made, 3 -> 4 -> 3 -> 4 keeps pending work (a job due
later, a live claim), the rollback puts version 3's functions back exactly
(the schema dump equals the v3 database's), and the step's open transaction
blocks no queue traffic."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from yoyo import read_migrations

import fenceq
from conftest import pg_url
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.migrate import rollback, schema_dump_pg

STEPS = Path(__file__).resolve().parents[1] / "migrations" / "postgres"


def _step_module():
    """The step's module, loaded as yoyo loads it."""
    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0004_fenceq_v4"]
    step.load()
    return step.module


@pytest.fixture
def v3_database(pg):
    """A database migrated by the released steps 0001 to 0003 only."""
    name = "fenceq_v3_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0003_fenceq_v3")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def test_3_to_4_to_3_to_4_keeps_pending_work_and_restores_v3_exactly(v3_database):
    url = v3_database
    v3_dump = schema_dump_pg(url)
    with fenceq.connect(url) as client:
        assert client.version() == "3"
        client.create_queue("q")
        later = client.submit("q", "later", {"n": 1}, submission_id="s-later",
                              run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        due = client.get_job(later).run_at
        client.submit("q", "now")
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())

    apply_through(url, "0004_fenceq_v4")
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        assert client.heartbeat(claim.fence), "a v3 claim stays live under v4"
    assert rollback(url, to_version=3) == ["0004_fenceq_v4"]
    assert schema_dump_pg(url) == v3_dump, "version 3's functions, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "3"
        assert client.heartbeat(claim.fence)
    apply_through(url, "0004_fenceq_v4")
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        job = client.get_job(later)
        assert (job.status, job.run_at) == ("pending", due), "the job due later is still waiting, unchanged"
        assert client.submit("q", "later", {"n": 1}, submission_id="s-later",
                             run_at=due) == later, "its identity replays"
        assert client.complete(claim.fence)
    with psycopg.connect(pg_url("postgres")) as admin:
        fresh = "fenceq_v4_" + uuid.uuid4().hex[:10]
        admin.autocommit = True
        admin.execute(f"CREATE DATABASE {fresh}")
        try:
            apply_through(pg_url(fresh), "0004_fenceq_v4")
            assert schema_dump_pg(url) == schema_dump_pg(pg_url(fresh)), "upgraded equals a fresh v4"
        finally:
            admin.execute(f"DROP DATABASE {fresh} WITH (FORCE)")


def test_the_rollback_text_is_the_released_v3_definitions():
    step = _step_module()
    v3 = (STEPS / "sql" / "0003_fenceq_v3.sql").read_text(encoding="utf-8")
    text = step.rollback_text()
    for name in step.CHANGED:
        assert step._definition(text, name) == step._definition(v3, name), name
    assert "RETURN '3';" in step._definition(text, "version")


@pytest.mark.parametrize("direction", ["upgrade", "rollback"])
def test_the_step_locks_no_table_and_stops_no_traffic(v3_database, direction):
    """Inside the step's open transaction: no lock on any fenceq relation
    (CREATE OR REPLACE FUNCTION locks only the function), and claims,
    completions and submissions run under a lock timeout (a wait would
    raise 55P03)."""
    url = v3_database
    step = _step_module()
    if direction == "rollback":
        apply_through(url, "0004_fenceq_v4")
    text = step.rollback_text() if direction == "rollback" else (STEPS / "sql" / "0004_fenceq_v4.sql").read_text(
        encoding="utf-8")
    with fenceq.connect(url) as client:
        client.create_queue("q")
        client.submit("q", "t")
    with psycopg.connect(url) as stepping, psycopg.connect(url, autocommit=True) as traffic:
        stepping.execute(text)  # open, not committed
        held = stepping.execute(
            "SELECT l.relation::regclass::text, l.mode FROM pg_locks AS l"
            " JOIN pg_class AS c ON c.oid = l.relation"
            " WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'fenceq'::regnamespace").fetchall()
        assert held == []
        traffic.execute("SET lock_timeout = '2s'")
        claim = traffic.execute(
            "SELECT job_id, generation, claim_token FROM fenceq.claim_next('{q}', 'w', 'tok-v4')").fetchone()
        assert claim[0] is not None
        assert traffic.execute("SELECT fenceq.complete(%s, 'w', %s, %s)", claim).fetchone() == (True,)
        assert traffic.execute("SELECT fenceq.submit('q', 'during', run_at => now() + interval '1 hour')"
                               ).fetchone()[0]
        stepping.commit()
    with fenceq.connect(url) as client:
        assert client.version() == ("3" if direction == "rollback" else "4")
        assert all(check.ok for check in client.verify_schema())
