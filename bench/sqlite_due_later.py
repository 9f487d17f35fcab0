"""``python -m bench.sqlite_due_later``: what an empty SQLite ``claim_next``
and ``next_due`` cost with many jobs due later in one queue and none due
(docs/design-v5.md §6), through the Python client on a fresh file::

    python -m bench.sqlite_due_later --jobs 100000 --levels 10
    python -m bench.sqlite_due_later --jobs 100000 --levels 0   # every priority distinct

It measures the package it imports: to measure version 4, put version 4's
package first on the path (``git archive c84eff85b9 python_client sql
migrations``, then ``PYTHONPATH=<there>/python_client``). Prints the
version, then the median and 90th percentile of each call.

With ``--upgrade-sizes 100000,1000000`` it times SQLite's step 0005 instead
(docs/dba.md §7): applied alone by yoyo to a file the released steps 0001
to 0004 made, filled with that many pending jobs of one queue, half due in
an hour, half due now.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fenceq
from fenceq.migrate import migrate


FILL = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :size),
     clock(now) AS (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)
INSERT INTO fenceq__jobs (job_id, queue, task, priority, max_attempts, run_at, created_at)
SELECT lower(hex(randomblob(16))), 'q', 't', n % 5, 3, clock.now + (n % 2) * 3600000000, clock.now
  FROM g, clock
"""


def time_upgrade(size: int) -> str:
    import sqlite3

    from yoyo import get_backend, read_migrations

    from fenceq.backends.migrations import migrations_dir

    path = Path(tempfile.mkdtemp()) / "v4.db"
    backend = get_backend(f"sqlite:///{path}")
    steps = read_migrations(str(migrations_dir("sqlite")))
    try:
        with backend.lock():
            backend.apply_migrations(backend.to_apply(steps.filter(lambda m: m.id <= "0004_fenceq_v4")))
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO fenceq__queues (queue, lease, max_attempts, backoff_base, backoff_factor,"
                         " backoff_max, dead_letter, created_at) VALUES ('q', 30000000, 3, 1000000, 2, 60000000, 1, 0)")
            conn.execute(FILL, {"size": size})
        started = time.perf_counter()
        with backend.lock():
            backend.apply_migrations(backend.to_apply(steps.filter(lambda m: m.id == "0005_fenceq_v5")))
        elapsed = time.perf_counter() - started
    finally:
        backend.connection.close()
    return f"{size} jobs: step 0005 {elapsed:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--levels", type=int, default=10, help="priority levels; 0: every job its own")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--upgrade-sizes", help="comma-separated job counts: time step 0005 instead")
    options = parser.parse_args()
    if options.upgrade_sizes:
        for size in options.upgrade_sizes.split(","):
            print(time_upgrade(int(size)))
        return
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'due_later.db'}"
    migrate(url)
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with fenceq.connect(url) as client:
        client.create_queue("q")
        for start in range(0, options.jobs, 1000):
            client.submit_batch("q", [{"task": "t", "run_at": later + timedelta(milliseconds=n),
                                       "priority": n % options.levels if options.levels else n}
                                      for n in range(start, min(start + 1000, options.jobs))])
        print(f"version {client.version()}: {options.jobs} jobs due later,"
              f" {options.levels or options.jobs} priority levels")
        calls = {"claim_next": lambda: client.claim_next(["q"], "w", fenceq.new_claim_token()),
                 "next_due": lambda: client.next_due(["q"])}
        for name, call in calls.items():
            for _ in range(max(options.rounds // 10, 2)):
                call()
            times = []
            for _ in range(options.rounds):
                started = time.perf_counter()
                answer = call()
                times.append(time.perf_counter() - started)
                assert name != "claim_next" or answer is None, "a job was due"
            times.sort()
            print(f"{name}: median {statistics.median(times) * 1000:.3f} ms,"
                  f" p90 {times[int(len(times) * 0.9) - 1] * 1000:.3f} ms")


if __name__ == "__main__":
    main()
