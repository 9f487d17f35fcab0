"""SQLite's step 0007_fenceq_v7 (docs/design-v7.md §5): a file that version 6
made (its package, SQL and migrations from git history), with a live claim
and job history, upgrades in place and keeps both; 7 -> 6 puts version 6
back exactly (every sqlite_master row as the released steps made it) while
the activity series is empty, and refuses (QF901) while it holds a row,
unless allowed."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta

import pytest

import fenceq
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback
from helpers import released_package, schema_version, steps_above
from test_sqlite_upgrade_v5 import master_rows, structure

# The last commit whose SQLite schema was version 6's.
V6_COMMIT = "7e1ad53"


@pytest.fixture(scope="session")
def v6_package(tmp_path_factory):
    package = released_package(tmp_path_factory.mktemp("fenceq-v6"), V6_COMMIT)
    if package is None:
        pytest.skip(f"this clone lacks commit {V6_COMMIT}")
    return package


def events(path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT count(*) FROM fenceq__events").fetchone()[0]


def test_6_to_7_to_6_keeps_claims_and_history_and_restores_v6_exactly(tmp_path, v6_package):
    path = tmp_path / "v6.db"
    url = f"sqlite:///{path}"
    made_by_v6 = ("import datetime, fenceq; from fenceq.migrate import migrate; migrate({url!r})\n"
                  "with fenceq.connect({url!r}) as c:\n"
                  "    c.create_queue('q', lease=datetime.timedelta(hours=1)); c.set_queue_history('q', True)\n"
                  "    c.submit('q', 't'); c.submit('q', 't')").format(url=url)
    subprocess.run([sys.executable, "-c", made_by_v6], env=dict(os.environ, PYTHONPATH=str(v6_package)), check=True)
    v6_rows = master_rows(path)
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("sqlite")
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
    history = events(path)
    # Through the later steps too (a claim by token: nothing version 8 must refuse to lose).
    assert rollback(url, to_version=6) == steps_above("sqlite", 6)
    assert steps_above("sqlite", 6)[-1] == "0007_fenceq_v7", "an empty series: lossless"
    assert master_rows(path) == v6_rows
    assert events(path) == history
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.heartbeat(claim.fence), "the claim stays live across 7 -> 6 -> 7"
        assert client.complete(claim.fence)
        assert client.sample_activity() == 1
    fresh = tmp_path / "fresh.db"
    assert all(check.ok for check in migrate(f"sqlite:///{fresh}"))
    assert structure(path) == structure(fresh), "upgraded equals a fresh version 7"


def test_rollback_to_6_refuses_to_lose_the_activity_series_unless_allowed(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("q", lease=timedelta(hours=1))
        assert client.sample_activity() == 1
    with pytest.raises(FenceqError) as info:
        rollback(sqlite_db.url, to_version=6)
    assert info.value.sqlstate == "QF901"
    with sqlite_db.connect() as client:
        assert client.version() == "7", "nothing dropped"
        assert len([b for b in client.activity(queue="q") if b.pending is not None]) == 1
    assert rollback(sqlite_db.url, to_version=6, allow_data_loss=True) == ["0007_fenceq_v7"]
    with sqlite_db.connect() as client:
        assert client.version() == "6"
    assert all(check.ok for check in migrate(sqlite_db.url))
