"""PostgreSQL's step 0006_fenceq_v6 (docs/dba.md §7): from a database that
the released steps 0001 to 0005 made, with a live claim and work pending,
the upgrade keeps every fence; version 6's calls work on the old work; a
rollback to 5 puts version 5 back exactly (the schema dump equals the v5
database's) when it loses nothing, and refuses (QF901) while an event, a
dispatch record or a version 6 queue setting would be lost, unless data
loss is allowed."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from yoyo import read_migrations

import fenceq
from conftest import pg_url
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.errors import FenceqError
from fenceq.migrate import rollback, schema_dump_pg
from test_upgrade_v5 import STEPS


@pytest.fixture
def v5_database(pg):
    """A database migrated by the released steps 0001 to 0005 only."""
    name = "fenceq_v5_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0005_fenceq_v5")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _sql(url: str, statement: str, params=None):
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def test_5_to_6_keeps_work_in_flight_and_rolls_back_exactly(v5_database):
    url = v5_database
    v5_dump = schema_dump_pg(url)
    with fenceq.connect(url) as client:
        assert client.version() == "5"
        client.create_queue("q")
        waiting = client.submit("q", "waiting", priority=1)
        live = client.claim_next(["q"], "w", fenceq.new_claim_token())
        pending = client.submit("q", "pending")

    apply_through(url, "0006_fenceq_v6")  # this step's test: the steps above it have their own
    with fenceq.connect(url) as client:
        assert client.version() == "6"
        assert client.heartbeat(live.fence), "a v5 claim stays live under v6"
    f = live.fence
    assert _sql(url, "SELECT fenceq.reserve_dispatch(%s, %s, %s, %s, 'batch', 'r-1')",
                (f.job_id, f.owner_id, f.generation, f.claim_token)) == [(True,)]
    assert _sql(url, "SELECT fenceq.release(%s, %s, %s, %s)",
                (f.job_id, f.owner_id, f.generation, f.claim_token)) == [(False,)], "a live dispatch is never released"

    # The dispatch record would be lost, and with it the job's protection
    # from reap: refused, nothing rolled back.
    with pytest.raises(FenceqError) as refused:
        rollback(url, to_version=5)
    assert refused.value.sqlstate == "QF901"
    assert _sql(url, "SELECT fenceq.release_dispatch(%s, %s, %s, %s, 'r-1')",
                (f.job_id, f.owner_id, f.generation, f.claim_token)) == [(True,)]
    with fenceq.connect(url) as client:
        assert client.version() == "6"
        assert client.complete(live.fence)
    assert rollback(url, to_version=5) == ["0006_fenceq_v6"]
    assert schema_dump_pg(url) == v5_dump, "version 5's functions, tables and grants, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "5"
        assert client.get_job(pending).status == "pending"
        assert client.get_job(waiting).status == "completed"

    apply_through(url, "0006_fenceq_v6")
    _sql(url, "SELECT fenceq.set_queue_history('q', true)")
    with pytest.raises(FenceqError):
        rollback(url, to_version=5)
    assert rollback(url, to_version=5, allow_data_loss=True) == ["0006_fenceq_v6"]
    assert schema_dump_pg(url) == v5_dump


def test_the_rollback_text_is_the_released_v5_definitions():
    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0006_fenceq_v6"]
    step.load()
    module = step.module
    text = module.rollback_text()
    for name in module.CHANGED:
        assert text.count(f"CREATE OR REPLACE FUNCTION fenceq.{name}(") == 1, name
    assert "RETURN '5';" in text
