"""The Node example (examples/node) runs the whole protocol against a fresh
fenceq database, calling the SQL functions directly with the npm `pg` driver.

Needs `node` (skipped, with the reason, when it is not installed). The
example's dependencies are installed once per session with `npm ci` when
examples/node/node_modules is missing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import Database

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "node"


@pytest.fixture(scope="session")
def node_example() -> Path:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node example needs Node 20 and npm")
    if not (EXAMPLE / "node_modules" / "pg").is_dir():
        npm = shutil.which("npm")
        assert npm is not None, "node is installed but npm is not: cannot install the example's dependencies"
        command = [npm, "ci"] if (EXAMPLE / "package-lock.json").exists() else [npm, "install"]
        # Concurrent test runs on one checkout install once, one at a time.
        with open(Path(tempfile.gettempdir()) / f"fenceq-node-example-{os.getuid()}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (EXAMPLE / "node_modules" / "pg").is_dir():
                done = subprocess.run(command + ["--no-audit", "--no-fund"], cwd=EXAMPLE,
                                      capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return EXAMPLE / "example.js"


def test_node_example_runs_the_protocol(pg: Database, node_example: Path) -> None:
    env = dict(os.environ, FENCEQ_DATABASE_URL=pg.url)
    done = subprocess.run(["node", str(node_example)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"
    assert "FAIL" not in out, out
    for line in (
        "ok    create_queue: created node-example-",
        "ok    submit replay: same job id returned",
        "ok    submit changed request under the same submission id: refused with QF201",
        "ok    claim_next: job ",
        "ok    heartbeat: true",
        "ok    complete: true",
        "ok    complete again: false",
        "ok    claim_next reusing a claim token: refused with QF301",
        "ok    recover_claim: same fence: job ",
        "ok    complete recovered: true",
        "ok    submit to an undeclared queue: refused with QF101",
        "done: every step answered as expected",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"

    # What the database says: three jobs, all completed, one claim each, and
    # the replayed submission did not create a fourth job.
    assert pg.sql("SELECT status, count(*) FROM fenceq.jobs GROUP BY status") == [("completed", 3)]
    assert pg.sql("SELECT count(*) FROM fenceq.attempts") == [(3,)]
    assert pg.sql("SELECT count(*) FROM fenceq.jobs WHERE submission_id IS NOT NULL") == [(2,)]


def test_node_example_fails_loudly_without_fenceq(pg: Database, node_example: Path) -> None:
    """An unexpected answer is a non-zero exit, not a silent success."""
    pg.sql("DROP SCHEMA fenceq CASCADE")
    env = dict(os.environ, FENCEQ_DATABASE_URL=pg.url)
    done = subprocess.run(["node", str(node_example)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  unexpected error: 3F000" in done.stdout
