"""The failover run on a pg_auto_failover formation (``make
test-failover``, docs/dba.md "Running with a standby"):
``auto_failover_run.py`` with one ``pg_autoctl perform failover`` and one
killed primary promoted by the monitor, where nothing acknowledged may be
lost, duplicated or accepted under a stale fence. Its summary is printed
and kept in ``$FENCEQ_FAILOVER_SUMMARIES`` (a folder) when that is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from auto_failover_run import AUTO_PORT
from failover_run import HERE
from replicated import needs_failover

pytestmark = needs_failover


def test_a_performed_failover_and_a_killed_primary_under_pg_auto_failover_lose_and_duplicate_nothing(tmp_path):
    summary_path = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, str(HERE / "auto_failover_run.py"), "--port", str(AUTO_PORT),
                           "--dir", str(tmp_path / "journals"), "--summary", str(summary_path),
                           "--jobs", "1500", "--failovers", "2", "--lease", "2"])
    assert summary_path.exists(), "the run ended before its audit (see its output above)"
    summary = json.loads(summary_path.read_text())
    keep = os.environ.get("FENCEQ_FAILOVER_SUMMARIES")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "pg_auto_failover.json").write_text(json.dumps(summary, indent=2) + "\n")
    assert summary["failures"] == [] and done.returncode == 0
    assert summary["violations"] == dict.fromkeys(summary["violations"], 0)
    assert [f["mode"] for f in summary["failover_details"]] == ["perform failover", "killed primary"]
    assert all(f["old_primary"] != f["new_primary"] for f in summary["failover_details"])
    assert summary["jobs"] >= 1500 and summary["schedule_jobs"] >= 2
    assert summary["server_switches"] >= summary["workers"]   # every worker moved at least once
    assert all(f["first_completion_seconds"] is not None for f in summary["failover_details"])
