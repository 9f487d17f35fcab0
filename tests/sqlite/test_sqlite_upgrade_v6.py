"""SQLite's step 0006_fenceq_v6 (docs/design-v6.md): a file that version 5
made (its package, SQL and migrations from git history), with a live claim,
upgrades in place and keeps the fence; 6 -> 5 puts version 5 back exactly
(every sqlite_master row as the released steps made it) while nothing of
version 6 is in use, and refuses (QF901) while an event, a dispatch record
or a queue setting of version 6 would be lost, unless allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

import fenceq
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback
from helpers import released_package, schema_version, steps_above
from test_sqlite_upgrade_v5 import master_rows, structure

# The last commit whose SQLite schema was version 5's.
V5_COMMIT = "9214773"


@pytest.fixture(scope="session")
def v5_package(tmp_path_factory):
    package = released_package(tmp_path_factory.mktemp("fenceq-v5"), V5_COMMIT)
    if package is None:
        pytest.skip(f"this clone lacks commit {V5_COMMIT}")
    return package


def test_5_to_6_to_5_keeps_a_live_claim_and_restores_v5_exactly(tmp_path, v5_package):
    path = tmp_path / "v5.db"
    url = f"sqlite:///{path}"
    made_by_v5 = ("import datetime, fenceq; from fenceq.migrate import migrate; migrate({url!r})\n"
                  "with fenceq.connect({url!r}) as c:\n"
                  "    c.create_queue('q', lease=datetime.timedelta(hours=1)); c.submit('q', 't')").format(url=url)
    subprocess.run([sys.executable, "-c", made_by_v5], env=dict(os.environ, PYTHONPATH=str(v5_package)), check=True)
    v5_rows = master_rows(path)
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("sqlite")
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
    assert rollback(url, to_version=5) == steps_above("sqlite", 5), "nothing of version 6 in use: lossless"
    assert master_rows(path) == v5_rows
    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.heartbeat(claim.fence), "the claim stays live across 6 -> 5 -> 6"
        assert client.complete(claim.fence)
    fresh = tmp_path / "fresh.db"
    assert all(check.ok for check in migrate(f"sqlite:///{fresh}"))
    assert structure(path) == structure(fresh), "upgraded equals a fresh version 6"


@pytest.mark.parametrize("in_use", ["event", "dispatch", "requeue_priority"])
def test_rollback_to_5_refuses_to_lose_version_6_data_unless_allowed(sqlite_db, in_use):
    with sqlite_db.connect() as client:
        client.create_queue("q", lease=timedelta(hours=1))
        if in_use == "event":
            client.set_queue_history("q", True)
            client.submit("q", "t")
            client.set_queue_history("q", False)  # the event stays
        elif in_use == "dispatch":
            client.submit("q", "t")
            claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
            assert client.reserve_dispatch(claim.fence, "farm", "r1")
        else:
            client.alter_queue("q", requeue_priority="first")
    with pytest.raises(FenceqError) as info:
        rollback(sqlite_db.url, to_version=5)
    assert info.value.sqlstate == "QF901"
    with sqlite_db.connect() as client:
        assert client.version() == "6", "nothing dropped"
    assert rollback(sqlite_db.url, to_version=5, allow_data_loss=True) == ["0006_fenceq_v6"]
    assert all(check.ok for check in migrate(sqlite_db.url))
