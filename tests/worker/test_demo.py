"""`fenceq demo` tells its whole story: on SQLite exactly as `make demo` runs
it (no URL: a fresh embedded database), on PostgreSQL with --url."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_tells_its_story(db, tmp_path):
    command = [sys.executable, "-m", "fenceq.cli", "demo"]
    if db.backend != "sqlite":
        command += ["--url", db.url]
    env = {k: v for k, v in os.environ.items() if k != "FENCEQ_DATABASE_URL"}
    workdir = tmp_path / "clone"
    workdir.mkdir()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in ("ok    graph in order", "ok    crash takeover", "ok    stale writes refused", "ok    frozen transfer rolled back",
                 "ok    duplicate replayed",
                 "ok    cancel acknowledged", "ok    dead letter replayed", "ok    graceful drain"):
        assert line in out, out
    assert "killed (pid" in out and "took over at generation 2" in out
    assert "late completion at generation 1 is refused" in out
    assert "Traceback" not in done.stderr
    if db.backend == "sqlite":
        # `make demo`: the embedded default ./fenceq.db, left for a look around afterwards.
        assert [p.name for p in workdir.iterdir()] == ["fenceq.db"]
        assert "fenceq stats " in out
        stats = subprocess.run([sys.executable, "-m", "fenceq.cli", "stats"], cwd=workdir, env=env,
                               capture_output=True, text=True, timeout=30)
        assert stats.returncode == 0 and "demo" in stats.stdout
        again = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=90)
        assert again.returncode == 0, "a second run on the same database tells the same story\n" + again.stdout
