"""PostgreSQL's step 0007_fenceq_v7 (docs/dba.md §7): from a database that
the released steps 0001 to 0006 made, with a live claim, work pending and a
dead letter, the upgrade keeps every fence and replaces no function of the
hot path (their definitions are byte for byte those of version 6); version
7's calls work on the old work; a rollback to 6 puts version 6 back exactly
(the schema dump equals the v6 database's) when it loses nothing, and
refuses (QF901) while the activity series holds a row, unless data loss is
allowed."""

from __future__ import annotations

import uuid

import pytest
from yoyo import read_migrations

import fenceq
from conftest import pg_url
from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback, schema_dump_pg
from helpers import claim, steps_above
from test_upgrade_v5 import STEPS
from test_upgrade_v6 import _sql

# Every function a submit, claim, heartbeat or settle runs (and what they
# call): version 7 must not replace any of them.
HOT_PATH = ("submit", "_submit", "submit_batch", "claim_next", "claim_batch", "_pick_limited", "_move_due",
            "heartbeat", "heartbeat_batch", "complete", "complete_batch", "fail", "_retry_or_fail",
            "_dead_letter", "release", "_lock_live", "_is_live", "_settle_dependents", "_record_event",
            "_record_events", "_notify_jobs", "_notify_done", "reap", "_requeue_at", "cancel", "_cancel_locked",
            "replay_dead_letter", "purge")


@pytest.fixture
def v6_database(pg):
    """A database migrated by the released steps 0001 to 0006 only."""
    name = "fenceq_v6_" + uuid.uuid4().hex[:10]
    pg.sql(f"CREATE DATABASE {name}")
    url = pg_url(name)
    apply_through(url, "0006_fenceq_v6")
    yield url
    pg.sql(f"DROP DATABASE {name} WITH (FORCE)")


def _definitions(url: str) -> dict[str, str]:
    return dict(_sql(url, "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc AS p"
                          " WHERE p.pronamespace = 'fenceq'::regnamespace AND p.proname = ANY (%s)",
                     (list(HOT_PATH),)))


def test_6_to_7_keeps_work_in_flight_and_rolls_back_exactly(v6_database):
    url = v6_database
    v6_dump = schema_dump_pg(url)
    v6_hot_path = _definitions(url)
    assert set(v6_hot_path) == set(HOT_PATH)
    with fenceq.connect(url) as client:
        assert client.version() == "6"
        client.create_queue("q", max_attempts=1)
        failed = client.submit("q", "failing", submission_id="order-1")
        assert client.fail(claim(client, "q").fence, "connection refused")
        pending = client.submit("q", "pending", {"customer": 7}, submission_id="order-2")
        live = claim(client, "q")
        waiting = client.submit("q", "waiting", {"customer": 7})

    apply_through(url, "0007_fenceq_v7")  # this step's test: the steps above it have their own
    assert _definitions(url) == v6_hot_path, "no function of the hot path was replaced"
    with fenceq.connect(url) as client:
        assert client.version() == "7"
        assert client.heartbeat(live.fence), "a v6 claim stays live under v7"
    found = _sql(url, "SELECT job_id FROM fenceq.search_jobs(submission_prefix => 'order-')")
    assert sorted(found) == sorted([(failed,), (pending,)])
    assert _sql(url, "SELECT job_id FROM fenceq.search_jobs(status => 'pending', payload_contains => "
                     "'{\"customer\": 7}')") == [(waiting,)]
    assert _sql(url, "SELECT fenceq.replay_dead_letters('q', error_contains => 'REFUSED')") == [(1,)]
    assert _sql(url, "SELECT fenceq.cancel_jobs('q', job_ids => %s)", ([waiting],)) == [(1,)]
    assert _sql(url, "SELECT count(*) FROM fenceq.activity('q')") == [(60,)]

    # The activity series would be lost: refused, nothing rolled back.
    assert _sql(url, "SELECT fenceq.sample_activity()") == [(1,)]
    with pytest.raises(FenceqError) as refused:
        rollback(url, to_version=6)
    assert refused.value.sqlstate == "QF901"
    with fenceq.connect(url) as client:
        assert client.version() == "7"
    assert rollback(url, to_version=6, allow_data_loss=True) == ["0007_fenceq_v7"]
    assert schema_dump_pg(url) == v6_dump, "version 6's functions, tables and grants, exactly as the released steps made them"
    with fenceq.connect(url) as client:
        assert client.version() == "6"
        assert client.complete(live.fence), "the claim lives on through the rollback"
        assert client.get_job(failed).status == "pending"
        assert client.get_job(waiting).status == "cancelled"
        assert [e.event for e in client.get_job_events(waiting)] == ["cancelled"], "bulk events stay"

    assert all(check.ok for check in migrate(url))
    assert rollback(url, to_version=6) == steps_above("postgres", 6), "no activity row: lossless"
    assert schema_dump_pg(url) == v6_dump


def test_the_rollback_text_is_the_released_v6_definitions():
    [step] = [m for m in read_migrations(str(STEPS)) if m.id == "0007_fenceq_v7"]
    step.load()
    text = step.module.rollback_text()
    for name in step.module.CHANGED:
        assert text.count(f"CREATE OR REPLACE FUNCTION fenceq.{name}(") == 1, name
    assert "RETURN '6';" in text


def test_the_step_replaces_only_verify_schema_and_version_of_version_6():
    """Every CREATE OR REPLACE in the step's text is of a function version 6
    did not have, or one of the two it changes."""
    import re

    text = (STEPS / "sql" / "0007_fenceq_v7.sql").read_text(encoding="utf-8")
    v6 = (STEPS / "sql" / "0006_fenceq_v6.sql").read_text(encoding="utf-8")
    created = set(re.findall(r"CREATE OR REPLACE FUNCTION fenceq\.(\w+)\(", text))
    earlier = set(re.findall(r"CREATE OR REPLACE FUNCTION fenceq\.(\w+)\(", v6))
    for frozen in ("0001_fenceq_v1", "0002_fenceq_v2", "0003_fenceq_v3", "0004_fenceq_v4", "0005_fenceq_v5"):
        earlier |= set(re.findall(r"CREATE OR REPLACE FUNCTION fenceq\.(\w+)\(",
                                  (STEPS / "sql" / f"{frozen}.sql").read_text(encoding="utf-8")))
    assert created & earlier == {"verify_schema", "version"}
    assert not created & set(HOT_PATH)
