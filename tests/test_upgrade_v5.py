"""PostgreSQL's step 0005_fenceq_v5 (docs/dba.md §7): from a database that
migrations 0001 to 0004 made, with work in every pending state and a live
claim, an upgrade from 4 (through 5, to this tree's newest version) marks
the jobs due later (they wait apart, and are claimed once due), keeps the
live fence, and a rollback to 4 and upgrade again puts version 4 back
exactly (the schema dump equals the v4 database's) and loses nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from yoyo import read_migrations

import fenceq
from conftest import pg_url
from helpers import schema_version, steps_above
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.migrate import migrate, rollback, schema_dump_pg

STEPS = Path(__file__).resolve().parents[1] / "migrations" / "postgres"


@pytest.fixture
def v4_database(pg):
    """A database migrated by the released steps 0001 to 0004 only."""
    name = "fenceq_v4_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0004_fenceq_v4")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _scheduled(pg, url: str) -> dict[str, bool]:
    import psycopg
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT job_id, scheduled FROM fenceq._jobs WHERE status = 'pending'").fetchall())


def test_4_to_5_and_back_moves_waiting_jobs_apart_and_restores_v4_exactly(pg, v4_database):
    url = v4_database
    v4_dump = schema_dump_pg(url)
    later_at = datetime.now(timezone.utc) + timedelta(hours=1)
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        client.create_queue("q", backoff_base=timedelta(hours=1))
        parent = client.submit("q", "parent", priority=9)
        retried = client.submit("q", "retried", priority=8)
        running = client.submit("q", "running", priority=7)
        due = client.submit("q", "due")
        later = client.submit("q", "later", submission_id="s-later", run_at=later_at)
        child = client.submit("q", "child", depends_on=[parent])
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claim.job_id == parent
        backing_off = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.fail(backing_off.fence, "boom")  # an hour of back-off
        live = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert live.job_id == running

    assert all(check.ok for check in migrate(url))
    assert _scheduled(pg, url) == {due: False, later: True, child: True, retried: True}
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("postgres")
        assert client.heartbeat(live.fence), "a v4 claim stays live under v5"
        assert client.next_due(["q"]) == client.get_job(due).run_at
        assert client.complete(claim.fence)  # frees the child, due now: ready
        assert _scheduled(pg, url)[child] is False
        order = [client.claim_next(["q"], "w", fenceq.new_claim_token()) for _ in range(3)]
        assert [c and c.job_id for c in order] == [due, child, None], "the later and backing-off jobs wait"

    assert rollback(url, to_version=4) == steps_above("postgres", 4)
    assert schema_dump_pg(url) == v4_dump, "version 4's functions and indexes, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        assert client.heartbeat(live.fence)
        assert client.next_due(["q"]) == later_at
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None

    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("postgres")
        assert client.submit("q", "later", submission_id="s-later", run_at=later_at) == later, "its identity replays"
        assert client.get_job(later).status == "pending"
        assert client.complete(live.fence)
        assert all(client.complete(c.fence) for c in order if c)
    assert _scheduled(pg, url) == {later: True, retried: True}
    fresh = "fenceq_v5_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {fresh}")
    try:
        migrate(pg_url(fresh))
        assert schema_dump_pg(url) == schema_dump_pg(pg_url(fresh)), "upgraded equals a fresh install"
    finally:
        pg.sql(f"DROP DATABASE {fresh} WITH (FORCE)")


def test_the_rollback_text_is_the_released_v4_definitions():
    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0005_fenceq_v5"]
    step.load()
    module = step.module
    v4, v3 = ((STEPS / "sql" / f"{name}.sql").read_text(encoding="utf-8")
              for name in ("0004_fenceq_v4", "0003_fenceq_v3"))
    text = module.rollback_text()
    for name in module.CHANGED:
        released = v4 if f"FUNCTION fenceq.{name}(" in v4 else v3
        assert module._definition(text, name) == module._definition(released, name), name
    assert "RETURN '4';" in module._definition(text, "version")


def test_the_step_leaves_waiting_jobs_to_be_marked_after_it_and_they_still_wait(pg, v4_database):
    """The step alone (as yoyo applies it, or a DBA by hand) marks nothing,
    so that its table lock is short; the jobs version 4 left waiting are not
    claimed early meanwhile, and migrate's batches mark them afterwards."""
    import psycopg

    from fenceq.backends.migrations import mark_waiting_jobs

    url = v4_database
    later_at = datetime.now(timezone.utc) + timedelta(hours=1)
    with fenceq.connect(url) as client:
        client.create_queue("q")
        later = client.submit("q", "later", run_at=later_at)
        due = client.submit("q", "due")
    apply_through(url, "0005_fenceq_v5")
    assert _scheduled(pg, url) == {later: False, due: False}
    with fenceq.connect(url) as client:
        assert client.next_due(["q"]) == client.get_job(due).run_at
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()).job_id == due
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None, "not claimed before its run_at"
    lines: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        assert mark_waiting_jobs(conn, lines.append) == 1
        assert mark_waiting_jobs(conn) == 0
    assert lines == ["marked 1 jobs due later in 1 batches"]
    assert _scheduled(pg, url) == {later: True}
    with fenceq.connect(url) as client:
        assert client.next_due(["q"]) == later_at
