"""SQLite's step 0005_fenceq_v5 (docs/dba.md §7): from a file that version 4
made (its package, statement files and migrations built from git history),
with work in every pending state and a live claim, 4 -> 5 marks the jobs
due later (they wait apart, and are claimed once due, never early), keeps
the live fence, and 5 -> 4 -> 5 puts version 4 back exactly (every
sqlite_master row as the released steps made it) and loses nothing; the
upgraded file's schema is a fresh version 5's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import fenceq
from fenceq.migrate import migrate, rollback
from helpers import released_package, schema_version, steps_above

ROOT = Path(__file__).resolve().parents[2]
# The last commit whose SQLite statement files were version 4's.
V4_COMMIT = "c84eff85b9"


@pytest.fixture(scope="session")
def v4_package(tmp_path_factory) -> Path:
    """Version 4's package, SQL and migrations, extracted from git history."""
    package = released_package(tmp_path_factory.mktemp("fenceq-v4"), V4_COMMIT)
    if package is None:
        pytest.skip(f"this clone lacks commit {V4_COMMIT}")
    return package


def run_v4(package: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "upgrade" / "v4_sqlite_work.py"), *args],
                          env=dict(os.environ, PYTHONPATH=str(package)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def master_rows(path: Path) -> list[tuple]:
    """fenceq's rows of sqlite_master as stored (text included), and the version."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                            " WHERE name LIKE 'fenceq%' ORDER BY name").fetchall()
        return rows + conn.execute("SELECT 'user_version', user_version, NULL, NULL FROM pragma_user_version").fetchall()


def _normalized(sql: str) -> str:
    text = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"\s*([(),])\s*", r"\1", re.sub(r"\s+", " ", text)).strip()


def structure(path: Path) -> dict:
    """What a file's schema is, however its text was written: each table's
    columns and strictness, each index's columns, uniqueness and condition,
    each view's text without comments or layout, and the version."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        shape: dict = {"version": conn.execute("PRAGMA user_version").fetchone()[0]}
        for kind, name, table, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                                                   " WHERE name LIKE 'fenceq%'"):
            if kind == "table":
                shape[name] = (conn.execute(f"PRAGMA table_xinfo('{name}')").fetchall(),
                               conn.execute(f"SELECT strict, wr FROM pragma_table_list('{name}')").fetchall())
            elif kind == "index":
                condition = re.split(r"\bWHERE\b", _normalized(sql), maxsplit=1)[1:] if sql else None
                shape[name] = (table, conn.execute(f"PRAGMA index_xinfo('{name}')").fetchall(),
                               [r[2:] for r in conn.execute(f"PRAGMA index_list('{table}')") if r[1] == name],
                               condition)
            else:
                shape[name] = (kind, _normalized(sql))
        return shape


def flags(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT job_id, scheduled FROM fenceq__jobs WHERE status = 'pending'").fetchall())


def test_4_to_5_to_4_to_5_moves_waiting_jobs_apart_and_restores_v4_exactly(tmp_path, v4_package):
    path = tmp_path / "v4.db"
    url = f"sqlite:///{path}"
    made = run_v4(v4_package, "make", url)
    v4_rows = master_rows(path)
    due, later, child, retried = made["due"], made["later"], made["child"], made["retried"]
    later_at = datetime.fromisoformat(made["later_at"])
    live = fenceq.Fence(**made["live"])

    assert all(check.ok for check in migrate(url))
    assert flags(path) == {due: 0, later: 1, child: 1, retried: 1}
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("sqlite")
        assert client.heartbeat(live), "a v4 claim stays live under v5"
        assert client.next_due(["q"]) == client.get_job(due).run_at
        assert client.complete(fenceq.Fence(**made["parent"]))  # frees the child, due now: ready
        assert flags(path)[child] == 0
        order = [client.claim_next(["q"], "w", fenceq.new_claim_token()) for _ in range(3)]
        assert [c and c.job_id for c in order] == [due, child, None], "the later and backing-off jobs wait"

    assert rollback(url, to_version=4) == steps_above("sqlite", 4)
    assert master_rows(path) == v4_rows, "version 4's table, indexes and views, exactly as the released steps made them"
    checked = run_v4(v4_package, "check", url, json.dumps(made))  # version 4's own statement files
    assert datetime.fromisoformat(checked["next_due"]) == later_at

    assert all(check.ok for check in migrate(url))
    with fenceq.connect(url) as client:
        assert client.version() == schema_version("sqlite")
        assert client.submit("q", "later", submission_id="s-later", run_at=later_at) == later, "its identity replays"
        assert client.get_job(later).status == "pending"
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None, "not claimed before its run_at"
        assert client.complete(live)
        assert all(client.complete(c.fence) for c in order if c)
    assert flags(path) == {later: 1, retried: 1}
    fresh = tmp_path / "fresh.db"
    assert all(check.ok for check in migrate(f"sqlite:///{fresh}"))
    assert structure(path) == structure(fresh), "upgraded equals a fresh version 5"
