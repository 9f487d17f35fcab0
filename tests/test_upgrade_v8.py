"""PostgreSQL's step 0008_fenceq_v8 (docs/dba.md §7): from a database that
the released steps 0001 to 0007 made, with a claim by claim_batch, pending
jobs and a dead letter, the upgrade keeps the old fence (recover_claim
answers the old token, complete settles it), claim_jobs claims the old
pending work under one ledger row; a rollback to 7 refuses (QF901) while a
claim_jobs call's ledger row exists unless data loss is allowed, and puts
version 7 back exactly (the schema dump equals the v7 database's)."""

from __future__ import annotations

import uuid

import pytest

import fenceq
from conftest import pg_url
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback, schema_dump_pg
from helpers import claim, steps_above
from test_upgrade_v6 import _sql


@pytest.fixture
def v7_database(pg):
    """A database migrated by the released steps 0001 to 0007 only."""
    name = "fenceq_v7_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0007_fenceq_v7")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _call_rows(url: str) -> int:
    [(count,)] = _sql(url, "SELECT count(*) FROM fenceq._claims WHERE job_ids IS NOT NULL")
    return count


def test_7_to_8_keeps_work_in_flight_and_rolls_back_exactly(v7_database):
    url = v7_database
    v7_dump = schema_dump_pg(url)
    with fenceq.connect(url) as client:
        assert client.version() == "7"
        client.create_queue("q", max_attempts=1)
        dead = client.submit("q", "failing")
        assert client.fail(claim(client, "q").fence, "connection refused")
        client.submit("q", "running")
        old_token = fenceq.new_claim_token()
        [old] = client.claim_batch(["q"], "w-old", [old_token])
        pending = [client.submit("q", "pending", priority=p) for p in (1, 3, 2)]

    apply_through(url, "0008_fenceq_v8")  # this step alone; later ones have their own tests
    with fenceq.connect(url) as client:
        assert client.version() == "8"
        assert client.recover_claim("w-old", old_token) == old, "the old token answers its claim"
        assert client.recover_claims("w-old", old_token) == [old]
        assert client.heartbeat(old.fence), "a v7 claim stays live under v8"

        nonce = fenceq.new_claim_token()
        claimed = client.claim_jobs(["q"], "w-new", nonce, 10)
        assert [c.job_id for c in claimed] == [pending[1], pending[2], pending[0]], "claim order"
        assert {(c.owner_id, c.generation, c.claim_token) for c in claimed} == {("w-new", 1, nonce)}
        assert client.recover_claims("w-new", nonce) == claimed
        assert _call_rows(url) == 1, "one ledger row for the call"
        # The dead letter, replayed, is claimed again at generation 2.
        assert _sql(url, "SELECT fenceq.replay_dead_letters('q', job_ids => %s)", ([dead],)) == [(1,)]
        [again] = client.claim_jobs(["q"], "w-new", fenceq.new_claim_token(), 10)
        assert (again.job_id, again.generation) == (dead, 2)
        assert sorted(_sql(url, "SELECT job_id, generation, owner_id FROM fenceq.attempts WHERE job_id = %s",
                           (dead,))) == [(dead, 1, "worker-1"), (dead, 2, "w-new")]
        assert client.complete(old.fence), "the old fence settles under v8"
        assert client.complete(claimed[0].fence)

    # The calls' ledger rows have no version 7 form: refused, nothing rolled back.
    with pytest.raises(FenceqError) as refused:
        rollback(url, to_version=7)
    assert refused.value.sqlstate == "QF901"
    with fenceq.connect(url) as client:
        assert client.version() == "8"
    assert _call_rows(url) == 2

    assert rollback(url, to_version=7, allow_data_loss=True) == ["0008_fenceq_v8"]
    assert schema_dump_pg(url) == v7_dump, "version 7's functions, tables and grants, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "7"
        assert client.complete(claimed[1].fence), "a claim_jobs fence lives on through the rollback"
        assert client.get_job(old.job_id).status == "completed"
        assert client.get_job(pending[1]).status == "completed"
        assert client.get_job(claimed[2].job_id).status == "claimed"

    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.complete(claimed[2].fence)
        assert client.complete(again.fence)
    assert rollback(url, to_version=7) == steps_above("postgres", 7), "no call row: lossless"
    assert schema_dump_pg(url) == v7_dump


def test_the_rollback_text_is_the_released_v7_definitions():
    from yoyo import read_migrations

    from test_upgrade_v5 import STEPS

    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0008_fenceq_v8"]
    step.load()
    text = step.module.rollback_text()
    for name in step.module.CHANGED:
        assert text.count(f"CREATE OR REPLACE FUNCTION fenceq.{name}(") == 1, name
    assert "RETURN '7';" in text and "RETURN '8';" not in text
    assert text.index("QF901") < text.index("DELETE FROM fenceq._claims"), "refused before anything is lost"
