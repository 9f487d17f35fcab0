"""The failover run as tests (``make test-failover``, docs/dba.md "Running
with a standby"): ``failover_run.py`` with a synchronous standby, where
nothing acknowledged may be lost, duplicated or accepted under a stale
fence; and once with an asynchronous standby a second behind, where what
is lost is measured and printed. Each run's summary is printed and kept in
``$FENCEQ_FAILOVER_SUMMARIES`` (a folder) when that is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from failover_run import BASE_PORT, HERE
from replicated import needs_failover

pytestmark = needs_failover


def run(tmp_path: Path, *options: str) -> dict:
    summary_path = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, str(HERE / "failover_run.py"), "--port", str(BASE_PORT),
                           "--dir", str(tmp_path / "journals"), "--summary", str(summary_path), *options])
    assert summary_path.exists(), "the run ended before its audit (see its output above)"
    summary = json.loads(summary_path.read_text())
    keep = os.environ.get("FENCEQ_FAILOVER_SUMMARIES")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{summary['standby']}.json").write_text(json.dumps(summary, indent=2) + "\n")
    assert summary["failures"] == [] and done.returncode == 0
    return summary


def test_three_failovers_under_a_synchronous_standby_lose_and_duplicate_nothing(tmp_path):
    summary = run(tmp_path, "--sync", "on", "--jobs", "3000", "--failovers", "3", "--lease", "2")
    assert summary["violations"] == dict.fromkeys(summary["violations"], 0)
    assert summary["failovers"] == 3 and summary["jobs"] >= 3000 and summary["schedule_jobs"] >= 2
    assert summary["server_switches"] >= summary["workers"]   # every worker moved at least once
    assert len(summary["failover_details"]) == 3
    assert all(f["first_completion_seconds"] is not None for f in summary["failover_details"])


def test_what_a_lagging_asynchronous_standby_loses_is_measured(tmp_path):
    """The WAL sender is held back a second before each kill: what the
    primary acknowledged in that second is lost, and the audit sees it
    (which also shows that the audit can fail)."""
    summary = run(tmp_path, "--sync", "off", "--stall", "1", "--jobs", "800", "--failovers", "3", "--lease", "2")
    assert summary["failovers"] == 3
    assert any(f["standby_behind_bytes"] > 0 for f in summary["failover_details"])
    assert summary["violations"]["acknowledged_submission_missing"] + \
        summary["violations"]["acknowledged_completion_missing"] > 0
    print("asynchronous standby, what acknowledged writes lost:", json.dumps(summary["violations"]))
