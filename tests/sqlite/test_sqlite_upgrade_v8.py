"""SQLite's step 0008_fenceq_v8 (one nonce per claim call): a file that
version 7 made (its package, SQL and migrations from git history), with
jobs claimed by claim_batch and claim_next in flight, upgrades in place:
the claims keep their fences, recover_claim still finds them, their tokens
stay spent for claim_jobs too; the upgraded schema is a fresh version 8's
and the install script's. 8 -> 7 puts version 7 back exactly (every
sqlite_master row as the released steps made it) while no claim_jobs call
is in the ledger, and refuses (QF901) while one is, unless allowed."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta

import pytest

import fenceq
from fenceq.backends.migrations import install_script_sqlite
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback
from helpers import raises_code, released_package, schema_version, steps_above
from test_sqlite_schema import apply_script
from test_sqlite_upgrade_v5 import _normalized, master_rows, structure

# The last commit whose SQLite schema was version 7's.
V7_COMMIT = "2591f76"

MADE_BY_V7 = """
import datetime, json, fenceq
from fenceq.migrate import migrate
migrate({url!r})
with fenceq.connect({url!r}) as c:
    c.create_queue('q', lease=datetime.timedelta(hours=1)); c.set_queue_history('q', True)
    for _ in range(4):
        c.submit('q', 't')
    batch = c.claim_batch(['q'], 'w', ['batch-1', 'batch-2'])
    single = c.claim_next(['q'], 'w', 'next-1')
    print(json.dumps([[x.job_id, x.owner_id, x.generation, x.claim_token] for x in batch + [single]]))
"""


@pytest.fixture(scope="session")
def v7_package(tmp_path_factory):
    package = released_package(tmp_path_factory.mktemp("fenceq-v7"), V7_COMMIT)
    if package is None:
        pytest.skip(f"this clone lacks commit {V7_COMMIT}")
    return package


def made_by_v7(package, path) -> list[fenceq.Fence]:
    """A version 7 file with three live claims (two by claim_batch, one by claim_next): their fences."""
    url = f"sqlite:///{path}"
    done = subprocess.run([sys.executable, "-c", MADE_BY_V7.format(url=url)],
                          env=dict(os.environ, PYTHONPATH=str(package)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [fenceq.Fence(*parts, "q") for parts in json.loads(done.stdout)]


def upgraded_from_v7(package, folder):
    """A version 7 file with claims in flight, migrated to version 8: its
    path, the claims' fences and its sqlite_master rows as version 7 had them."""
    path = folder / "v7.db"
    fences = made_by_v7(package, path)
    v7_rows = master_rows(path)
    assert all(check.ok for check in migrate(f"sqlite:///{path}"))
    return path, fences, v7_rows


def claims_table_sql(path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        [(sql,)] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'fenceq__claims'").fetchall()
    return _normalized(sql).replace("IF NOT EXISTS ", "").replace('"', "")


def test_7_to_8_keeps_claims_in_flight_and_equals_a_fresh_8(tmp_path, v7_package):
    path, fences, v7_rows = upgraded_from_v7(v7_package, tmp_path)
    url = f"sqlite:///{path}"
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("sqlite") == "8"
        for fence in fences:
            recovered = client.recover_claim("w", fence.claim_token)
            assert recovered is not None and recovered.fence == fence
            assert client.recover_claims("w", fence.claim_token) == [recovered]
        for token in ("batch-1", "next-1"):
            with raises_code("QF301"):
                client.claim_jobs(["q"], "w", token, 1)
        assert [(a.generation, a.owner_id) for a in client.attempts(fences[0].job_id)] == [(1, "w")]
        assert client.heartbeat(fences[0])
        assert client.complete(fences[1])
        assert len(client.claim_jobs(["q"], "w", "call-1", 5)) == 1
        assert client.sample_activity() == 1

    fresh = tmp_path / "fresh.db"
    assert all(check.ok for check in migrate(f"sqlite:///{fresh}"))
    installed = tmp_path / "installed.db"
    apply_script(installed, install_script_sqlite())
    assert structure(path) == structure(fresh) == structure(installed), "upgraded equals a fresh version 8"
    assert claims_table_sql(path) == claims_table_sql(installed), "the same CHECK"
    assert master_rows(path) != v7_rows


def test_8_to_7_restores_v7_exactly_and_keeps_the_claims(tmp_path, v7_package):
    path, fences, v7_rows = upgraded_from_v7(v7_package, tmp_path)
    url = f"sqlite:///{path}"
    assert rollback(url, to_version=7) == steps_above("sqlite", 7) == ["0008_fenceq_v8"], "no call row: lossless"
    assert master_rows(path) == v7_rows
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT claim_token FROM fenceq__claims ORDER BY rowid").fetchall() == [
            ("batch-1",), ("batch-2",), ("next-1",)], "every ledger row, in its order"
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert all(client.heartbeat(fence) for fence in fences), "the claims stay live across 7 -> 8 -> 7 -> 8"


def test_rollback_to_7_refuses_to_lose_a_call_unless_allowed(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("q", lease=timedelta(hours=1))
        client.submit("q", "t")
        client.submit("q", "t")
        claims = client.claim_jobs(["q"], "w", "call", 2)
    with pytest.raises(FenceqError) as info:
        rollback(sqlite_db.url, to_version=7)
    assert info.value.sqlstate == "QF901"
    with sqlite_db.connect() as client:
        assert client.version() == "8", "nothing changed"
        assert client.recover_claims("w", "call") == claims
    assert rollback(sqlite_db.url, to_version=7, allow_data_loss=True) == ["0008_fenceq_v8"]
    with sqlite_db.connect() as client:
        assert client.version() == "7"
        assert all(client.heartbeat(c.fence) for c in claims), "the jobs keep their fences"
    assert all(check.ok for check in migrate(sqlite_db.url))
    with sqlite_db.connect() as client:
        assert all(client.complete(c.fence) for c in claims)
