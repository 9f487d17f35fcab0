"""SQLite per-call throughput: fenceq's client beside a bare SQLite loop.

    .venv/bin/python bench/sqlite_bench.py [DIRECTORY] [--jobs N] [--rounds R]
        [--synchronous FULL|NORMAL|OFF] [--json]

Issue 8's target: per-job submit and drain (claim_next + complete, each its
own transaction) through the fenceq client at >= 0.9x a bare SQLite loop in
the same run. Both sides use the same connection settings as the client
(WAL, synchronous=FULL, manual transactions, BEGIN IMMEDIATE per call) on
files in the same directory. Each round uses fresh database files and runs
each operation on both sides back to back, alternating which goes first;
the median of the per-round ratios is reported.

Bare loop:
  submit: BEGIN IMMEDIATE; INSERT INTO jobs ...; COMMIT
  drain:  BEGIN IMMEDIATE; UPDATE jobs SET ... WHERE id = (SELECT id FROM
          jobs WHERE status='pending' ORDER BY priority DESC, id LIMIT 1)
          RETURNING ...; COMMIT, then
          BEGIN IMMEDIATE; UPDATE jobs SET status='completed' ... WHERE id=?; COMMIT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

try:
    import fenceq
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python_client"))
    import fenceq

QUEUE = "bench"
PAYLOAD = {"n": 0, "kind": "bench", "tags": ["a", "b"]}

_BARE_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    task TEXT NOT NULL,
    payload TEXT,
    priority INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending',
    owner_id TEXT,
    claim_token TEXT,
    generation INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    result TEXT,
    created_at INTEGER NOT NULL,
    finished_at INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (priority DESC, id) WHERE status = 'pending';
"""


# Setup ----------------------------------------------------------------------------

def _bare_connection(path: Path, synchronous: str) -> sqlite3.Connection:
    """The client's connection settings (see fenceq.backends.sqlite.open_connection)."""
    connection = sqlite3.connect(str(path), timeout=10.0, isolation_level=None,
                                 check_same_thread=False, cached_statements=512)
    connection.execute("PRAGMA journal_mode = WAL").fetchall()
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    connection.execute("PRAGMA temp_store = MEMORY")
    return connection


def _bare_open(path: Path, synchronous: str) -> sqlite3.Connection:
    connection = _bare_connection(path, synchronous)
    connection.executescript(_BARE_SCHEMA)
    return connection


def _fenceq_open(path: Path, synchronous: str):
    client = fenceq.connect(f"sqlite:///{path}")
    client.migrate()
    client.create_queue(QUEUE)
    if synchronous != "FULL":  # a diagnostic only: the client always uses FULL
        client._backend._connection.execute(f"PRAGMA synchronous = {synchronous}")
    return client


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


# The measured loops -----------------------------------------------------------------

def _bare_submit(connection: sqlite3.Connection, n: int) -> None:
    execute = connection.execute
    for i in range(n):
        payload = json.dumps(dict(PAYLOAD, n=i), separators=(",", ":"), sort_keys=True)
        execute("BEGIN IMMEDIATE")
        execute("INSERT INTO jobs (queue, task, payload, priority, created_at) VALUES (?, ?, ?, ?, ?)",
                (QUEUE, "t", payload, 0, time.time_ns() // 1000))
        execute("COMMIT")


def _bare_drain(connection: sqlite3.Connection, n: int) -> int:
    execute = connection.execute
    done = 0
    while True:
        token = uuid.uuid4().hex
        now = time.time_ns() // 1000
        execute("BEGIN IMMEDIATE")
        row = execute(
            "UPDATE jobs SET status = 'claimed', owner_id = ?, claim_token = ?,"
            " generation = generation + 1, lease_expires_at = ?"
            " WHERE id = (SELECT id FROM jobs WHERE status = 'pending'"
            "             ORDER BY priority DESC, id LIMIT 1)"
            " RETURNING id, queue, task, payload, priority, generation, claim_token, lease_expires_at",
            ("worker", token, now + 30_000_000)).fetchone()
        execute("COMMIT")
        if row is None:
            break
        json.loads(row[3])
        execute("BEGIN IMMEDIATE")
        execute("UPDATE jobs SET status = 'completed', result = NULL, finished_at = ?"
                " WHERE id = ? AND status = 'claimed' AND generation = ? AND claim_token = ?",
                (time.time_ns() // 1000, row[0], row[5], row[6]))
        execute("COMMIT")
        done += 1
    assert done == n, (done, n)
    return done


def _fenceq_submit(client, n: int) -> None:
    submit = client.submit
    for i in range(n):
        submit(QUEUE, "t", dict(PAYLOAD, n=i))


def _fenceq_drain(client, n: int) -> int:
    claim_next, complete = client.claim_next, client.complete
    queues = [QUEUE]
    done = 0
    while True:
        claim = claim_next(queues, "worker", uuid.uuid4().hex)
        if claim is None:
            break
        assert complete(claim.fence)
        done += 1
    assert done == n, (done, n)
    return done


def _timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


# One round ------------------------------------------------------------------------

def _round(directory: Path, n: int, tag: str, synchronous: str, fenceq_first: bool) -> dict:
    """Both sides on fresh files; each operation runs on both sides back
    to back (the disk's fsync latency drifts with other load), the order
    flipping between submit and drain."""
    fenceq_path, bare_path = directory / f"fenceq-{tag}.db", directory / f"bare-{tag}.db"
    for path in (fenceq_path, bare_path):
        _remove(path)
    client = _fenceq_open(fenceq_path, synchronous)
    connection = _bare_open(bare_path, synchronous)
    loops = {"fenceq": {"submit": (_fenceq_submit, client), "drain": (_fenceq_drain, client)},
             "bare": {"submit": (_bare_submit, connection), "drain": (_bare_drain, connection)}}
    order = ["fenceq", "bare"] if fenceq_first else ["bare", "fenceq"]
    figures: dict = {"fenceq": {}, "bare": {}}
    try:
        for operation in ("submit", "drain"):
            for side in order:
                function, handle = loops[side][operation]
                figures[side][operation] = n / _timed(function, handle, n)
            order.reverse()
    finally:
        client.close()
        connection.close()
        for path in (fenceq_path, bare_path):
            _remove(path)
    return figures


def run(directory: str | os.PathLike, *, jobs: int = 2000, rounds: int = 3,
        synchronous: str = "FULL") -> dict:
    """Measure in ``directory`` (fresh files per round, removed afterwards).

    Returns jobs/s per side and operation (median of the rounds; rounds
    alternate which side goes first), each round's figures, and the ratios
    fenceq / bare (median of the per-round ratios). ``synchronous`` other
    than FULL (the client's setting, the target's) is a diagnostic: with OFF
    the figures show the CPU cost per call without the fsync at COMMIT."""
    if synchronous not in ("FULL", "NORMAL", "OFF"):
        raise ValueError("synchronous must be FULL, NORMAL or OFF")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    per_round = []
    for index in range(rounds):
        per_round.append(_round(directory, jobs, f"{index}", synchronous, fenceq_first=index % 2 == 0))
    result: dict = {"jobs": jobs, "rounds": rounds, "sqlite": sqlite3.sqlite_version,
                    "directory": str(directory), "synchronous": synchronous}
    for operation in ("submit", "drain"):
        fq = [r["fenceq"][operation] for r in per_round]
        bare = [r["bare"][operation] for r in per_round]
        result[f"{operation}_fenceq_jobs_per_s"] = statistics.median(fq)
        result[f"{operation}_bare_jobs_per_s"] = statistics.median(bare)
        result[f"{operation}_ratio"] = statistics.median(f / b for f, b in zip(fq, bare))
        result[f"{operation}_ratio_per_round"] = [round(f / b, 3) for f, b in zip(fq, bare)]
    result["per_round"] = per_round
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="where to put the database files "
                        "(default: a fresh temporary directory, removed afterwards)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per round and side (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported (default 3)")
    parser.add_argument("--synchronous", default="FULL", choices=("FULL", "NORMAL", "OFF"),
                        help="PRAGMA synchronous on both sides (default FULL, the client's; "
                             "OFF shows the CPU cost alone)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    temporary = None
    directory = args.directory
    if directory is None:
        temporary = directory = tempfile.mkdtemp(prefix="fenceq-sqlite-bench-")
    try:
        figures = run(directory, jobs=args.jobs, rounds=args.rounds, synchronous=args.synchronous)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"SQLite {figures['sqlite']}, synchronous={figures['synchronous']}, {figures['jobs']} jobs "
          f"x {figures['rounds']} rounds in {figures['directory']}")
    for operation in ("submit", "drain"):
        print(f"{operation:7} fenceq {figures[f'{operation}_fenceq_jobs_per_s']:8.0f} jobs/s   "
              f"bare {figures[f'{operation}_bare_jobs_per_s']:8.0f} jobs/s   "
              f"ratio {figures[f'{operation}_ratio']:.2f}  (rounds {figures[f'{operation}_ratio_per_round']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
