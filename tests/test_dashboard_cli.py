"""`fenceq dashboard` as `make demo` leaves things: run in the folder the
demo ran in (the embedded ./fenceq.db, no URL), it shows the demo's jobs,
among them the one taken over at generation 2; SIGTERM stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from observed import PATIENCE, get


def test_fenceq_dashboard_after_the_demo_shows_its_jobs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FENCEQ_DATABASE_URL"}
    demo = subprocess.run([sys.executable, "-m", "fenceq.cli", "demo", "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=PATIENCE * 2)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    dashboard = subprocess.Popen([sys.executable, "-m", "fenceq.cli", "dashboard", "--port", "0"], cwd=tmp_path,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = dashboard.stdout.readline()
        address = re.search(r"(http://127\.0\.0\.1:\d+/) \(read-only\)", line)
        assert address, line
        base = address.group(1)
        status, queues = get(base + "queues")
        assert status == 200 and ">demo</a>" in queues
        status, finished = get(base + "jobs?status=completed&window=1h")
        assert status == 200 and finished.count("<td>thumbnail</td>") >= 8
        taken_over = re.search(r'href="/jobs/([^"]+)">[^<]+</a></td><td>demo</td><td>report</td>', finished)
        status, job = get(base + "jobs/" + taken_over.group(1))
        assert status == 200 and "completed by generation 2" in job and "worker-A" in job
    finally:
        dashboard.send_signal(signal.SIGTERM)
        assert dashboard.wait(PATIENCE) == 0
