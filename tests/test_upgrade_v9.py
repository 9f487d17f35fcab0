"""PostgreSQL's step 0009_fenceq_v9 (docs/dba.md, "From version 8 to
version 9"): from a database that the released steps 0001 to 0008 made,
with claims by claim_next and by a claim_jobs call in flight, the upgrade
keeps every fence as it was (the same rule, now written once), and a
rollback to 8 puts version 8 back exactly and loses nothing."""

from __future__ import annotations

import uuid

import pytest

import fenceq
from conftest import pg_url
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.migrate import migrate, rollback, schema_dump_pg
from helpers import claim


@pytest.fixture
def v8_database(pg):
    """A database migrated by the released steps 0001 to 0008 only."""
    name = "fenceq_v8_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0008_fenceq_v8")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def test_8_to_9_keeps_every_fence_and_rolls_back_exactly(v8_database):
    url = v8_database
    v8_dump = schema_dump_pg(url)
    with fenceq.connect(url) as client:
        assert client.version() == "8"
        client.create_queue("q")
        for _ in range(5):
            client.submit("q", "t")
        single = claim(client, "q", owner="w-single")
        nonce = fenceq.new_claim_token()
        call = client.claim_jobs(["q"], "w-call", nonce, 3)
        assert client.release(call[2].fence)
        stale = call[2].fence  # released: its fence holds nothing

    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == "9"
        assert client.heartbeat(single.fence) and client.progress(single.fence, {"half": True})
        assert client.claim_state(single.fence) == fenceq.ClaimState(cancel_requested=False, pid=None)
        assert [c.job_id for c in client.recover_claims("w-call", nonce)] == [c.job_id for c in call[:2]]
        assert client.heartbeat_batch([c.fence for c in call]) == [True, True, False]
        assert not client.complete(stale) and client.claim_state(stale) is None
        assert client.complete(call[0].fence)
        assert [c.job_id for c in client.recover_claims("w-call", nonce)] == [call[1].job_id]

    assert rollback(url, to_version=8) == ["0009_fenceq_v9"], "no data to lose"
    assert schema_dump_pg(url) == v8_dump, "version 8's functions and grants, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "8"
        assert client.complete_batch([call[1].fence, stale]) == [True, False]
        assert client.complete(single.fence), "a fence lives on through the rollback"

    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == "9"


def test_the_rollback_text_is_the_released_v8_definitions():
    from yoyo import read_migrations

    from test_upgrade_v5 import STEPS

    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0009_fenceq_v9"]
    step.load()
    text = step.module.rollback_text()
    for name in step.module.CHANGED:
        assert text.count(f"CREATE OR REPLACE FUNCTION fenceq.{name}(") == 1, name
    assert "RETURN '8';" in text and "RETURN '9';" not in text
    assert "_holds_fence(" not in text.replace("DROP FUNCTION fenceq._holds_fence(", "")
