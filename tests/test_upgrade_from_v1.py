"""Upgrade in place from version 1, as it was released (commit 8e56bfc,
built from git history), with live work in the database: the v1 -> v2 step
loses nothing, on both engines. Then v2 -> v1 rolls back without loss."""

from __future__ import annotations

import contextlib

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import fenceq
from conftest import pg_url
from fenceq.backends import backend_of
from fenceq.migrate import migrate, rollback
from helpers import released_package, schema_version, steps_above

ROOT = Path(__file__).resolve().parents[1]
V1_COMMIT = "8e56bfc"


@pytest.fixture(scope="session")
def v1_package(tmp_path_factory) -> Path:
    """Version 1's package, SQL and migrations, extracted from git history."""
    package = released_package(tmp_path_factory.mktemp("fenceq-v1"), V1_COMMIT)
    if package is None:
        pytest.skip(f"this clone lacks commit {V1_COMMIT}")
    return package


@pytest.fixture(params=["postgres", "sqlite"])
def v1_database(request, tmp_path, v1_package):
    """A database installed by fenceq 1, holding live work; yields (url, what v1 made)."""
    if request.param == "postgres":
        admin = request.getfixturevalue("pg")
        name = "fenceq_v1_" + uuid.uuid4().hex[:10]
        admin.sql(f"CREATE DATABASE {name}")
        url = pg_url(name)
    else:
        url = f"sqlite:///{tmp_path / 'v1.db'}"
    env = dict(os.environ, PYTHONPATH=str(v1_package))
    made = subprocess.run([sys.executable, str(ROOT / "tests" / "upgrade" / "v1_work.py"), url],
                          env=env, capture_output=True, text=True, check=True)
    yield url, json.loads(made.stdout)
    if request.param == "postgres":
        admin.sql(f"DROP DATABASE {name} WITH (FORCE)")


def test_v1_database_with_live_work_upgrades_in_place(v1_database):
    url, v1 = v1_database
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == schema_version(backend_of(url))
        old = fenceq.Fence(**v1["live"])
        # The fence v1 granted is still the live claim: it renews, reads its
        # checkpoint back, and completes once.
        assert client.heartbeat(old)
        assert client.recover_claim(old.owner_id, old.claim_token).checkpoints == {"step": {"done": 1}}
        assert client.complete(old, {"finished_by": "v2"})
        assert not client.complete(old)
        assert client.get_job(old.job_id).status == "completed"
        # Retained submission identities replay to their job ids; a changed
        # request under one still conflicts.
        assert client.submit("work", "owned", {"n": 1}, submission_id="sub-owned") == old.job_id
        assert client.submit("work", "finished", submission_id="sub-finished") == v1["finished"]
        with pytest.raises(fenceq.SubmissionConflict) as conflict:
            client.submit("work", "owned", {"n": 2}, submission_id="sub-owned")
        assert conflict.value.sqlstate == "QF201"
        # Tokens v1 spent stay used.
        for token in (old.claim_token, v1["done_token"], v1["dead_token"]):
            with pytest.raises(fenceq.ClaimConflict) as reused:
                client.claim_next(["work"], "v2-worker", token)
            assert reused.value.sqlstate == "QF301"
        # Pending v1 jobs are claimed, in their order.
        claims = client.claim_batch(["work"], "v2-worker", [fenceq.new_claim_token() for _ in range(4)])
        assert [c.job_id for c in claims] == v1["pending"]
        assert all(c.generation == 1 and client.complete(c.fence) for c in claims)
        # The dead letter replays, and its job runs again under a new generation.
        assert client.replay_dead_letter(v1["dlq_id"]) == v1["dead"]
        again = client.claim_next(["doomed"], "v2-worker", fenceq.new_claim_token())
        assert (again.job_id, again.generation) == (v1["dead"], 2)
        assert [(a.generation, a.owner_id) for a in client.attempts(v1["dead"])] == \
            [(1, "v1-worker"), (2, "v2-worker")]


def test_v2_rolls_back_to_v1_without_loss(v1_database):
    url, v1 = v1_database
    migrate(url)
    # The whole chain refuses at its first step (identities are retained),
    # but v2 -> v1 loses nothing and goes through on its own.
    with pytest.raises(fenceq.FenceqError) as refused:
        rollback(url)
    assert refused.value.sqlstate == "QF901"
    with fenceq.connect(url) as client:
        assert client.version() == "1"
    if url.startswith("postgresql"):  # the database's own v1 functions
        with fenceq.connect(url) as client:
            assert client.complete(fenceq.Fence(**v1["live"]))
    assert all(check.ok for check in migrate(url))
    # On SQLite the operations are the client's statement files, written
    # for the newest schema: the live fence and the identity are checked
    # once the file is upgraded again (nothing was lost on the way down).
    with fenceq.connect(url) as client:
        assert client.version() == schema_version(backend_of(url))
        if not url.startswith("postgresql"):
            assert client.complete(fenceq.Fence(**v1["live"]))
        assert client.submit("work", "owned", {"n": 1}, submission_id="sub-owned") == v1["live"]["job_id"]


def test_rollback_to_version_1_stops_there(v1_database):
    url, v1 = v1_database
    migrate(url)
    assert rollback(url, to_version=1) == steps_above(backend_of(url), 1)
    assert rollback(url, to_version=1) == []  # already there
    with fenceq.connect(url) as client:
        assert client.version() == "1"
        if url.startswith("postgresql"):  # v1's own admission check, back in the database
            assert all(check.ok for check in client.verify_schema())
            assert client.get_job(v1["pending"][0]).status == "pending"
    if not url.startswith("postgresql"):  # the newest client's statement files need the newest file
        import sqlite3

        from fenceq.backends.sqlite import database_path
        with contextlib.closing(sqlite3.connect(database_path(url))) as conn:
            assert conn.execute("SELECT status FROM fenceq__jobs WHERE job_id = ?",
                                (v1["pending"][0],)).fetchone() == ("pending",)
    with pytest.raises(fenceq.ConfigError):
        rollback(url, to_version=int(schema_version(backend_of(url))) + 1)
    assert all(check.ok for check in migrate(url))


def test_the_upgrade_step_does_not_stop_queue_traffic(v1_database):
    """While the v1 -> v2 step's transaction is open, claims, completions and
    submissions still run (with a lock timeout, a wait would raise 55P03):
    the step takes no lock on a table that blocks them."""
    import psycopg

    url, v1 = v1_database
    if not url.startswith("postgresql"):
        pytest.skip("SQLite serialises every write on the file")
    step = (ROOT / "migrations" / "postgres" / "sql" / "0002_fenceq_v2.sql").read_text(encoding="utf-8")
    with psycopg.connect(url) as upgrading, psycopg.connect(url, autocommit=True) as traffic:
        upgrading.execute(step)  # open, not committed
        traffic.execute("SET lock_timeout = '2s'")
        claim = traffic.execute("SELECT job_id, generation, claim_token FROM fenceq.claim_next('{work}', 'w', 'tok-up')"
                                ).fetchone()
        assert claim[0] == v1["pending"][0]
        assert traffic.execute("SELECT fenceq.complete(%s, 'w', %s, %s)", claim).fetchone() == (True,)
        assert traffic.execute("SELECT fenceq.submit('work', 'during')").fetchone()[0]
        upgrading.commit()
    assert all(check.ok for check in migrate(url))  # records the step; the text ran already
    with fenceq.connect(url) as client:
        assert client.version() == schema_version(backend_of(url))
