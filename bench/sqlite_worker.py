"""SQLite, the embedded default: ``fenceq.Worker`` against fenceq's own loop
of ``claim_jobs`` of 100 + ``complete_batch`` through the client, and a bare
sqlite3 loop of 100 jobs per transaction (issue 29's SQLite target).

    .venv/bin/python -m bench.sqlite_worker [DIRECTORY] [--jobs N] [--rounds R] [--json]

Each round fills fresh database files with N no-op jobs (one
``submit_batch`` per 1,000; the bare table by one insert per 1,000) and
drains them with each system in turn, the order alternating between
rounds; jobs/s is each system's median and each ratio the median of the
per-round ratios. The files use the client's settings (WAL,
synchronous=FULL, BEGIN IMMEDIATE per transaction). Timed: from the
worker's start (or the loop's first call) until the last job is done; the
process's CPU over the same span.

- **Worker**: ``bench.worker_bench``'s drain: ``Worker(app, url=..., concurrency=16)``,
  async no-op handler.
- **fenceq loop**: ``claim_jobs`` of 100 under one nonce (version 8; the
  loop of earlier runs sent ``claim_batch`` of 100 nonces), then
  ``complete_batch`` of what it claimed, until a claim comes back empty.
- **bare loop**: ``UPDATE ... WHERE id IN (SELECT ... LIMIT 100) RETURNING``
  and one ``UPDATE`` completing them, each in its own transaction.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from . import worker_bench
from .sqlite_bench import PAYLOAD, QUEUE, _bare_open, _fenceq_open, _remove

BATCH = 100


def _fill_bare(connection, n: int) -> None:
    rows = [(QUEUE, "t", json.dumps(dict(PAYLOAD, n=i)), time.time_ns() // 1000) for i in range(n)]
    for start in range(0, n, 1000):
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany("INSERT INTO jobs (queue, task, payload, created_at) VALUES (?, ?, ?, ?)",
                               rows[start:start + 1000])
        connection.execute("COMMIT")


def _fill_fenceq(client, n: int, queue: str = QUEUE, task: str = "t") -> None:
    for start in range(0, n, 1000):
        client.submit_batch(queue, [{"task": task, "payload": dict(PAYLOAD, n=start + i)}
                                    for i in range(min(1000, n - start))])


def _timed(step: Callable[[], int], n: int) -> tuple[float, float]:
    """Seconds and CPU seconds until ``step`` (one claim and its completion:
    the jobs it did) finds nothing more; all ``n`` jobs must be done."""
    done = 0
    started, cpu = time.perf_counter(), time.process_time()
    while finished := step():
        done += finished
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert done == n, (done, n)
    return elapsed, cpu


def drain_bare(path: Path, n: int) -> tuple[float, float]:
    connection = _bare_open(path, "FULL")
    _fill_bare(connection, n)
    execute = connection.execute

    def step() -> int:
        execute("BEGIN IMMEDIATE")
        rows = execute(
            "UPDATE jobs SET status = 'claimed', owner_id = ?, claim_token = ?, generation = generation + 1,"
            " lease_expires_at = ? WHERE id IN (SELECT id FROM jobs WHERE status = 'pending'"
            " ORDER BY priority DESC, id LIMIT ?) RETURNING id, payload, generation",
            ("worker", secrets.token_hex(16), time.time_ns() // 1000 + 30_000_000, BATCH)).fetchall()
        execute("COMMIT")
        if rows:
            for row in rows:
                json.loads(row[1])
            execute("BEGIN IMMEDIATE")
            execute(f"UPDATE jobs SET status = 'completed', finished_at = ? WHERE id IN ({','.join('?' * len(rows))})",
                    (time.time_ns() // 1000, *(row[0] for row in rows)))
            execute("COMMIT")
        return len(rows)

    try:
        return _timed(step, n)
    finally:
        connection.close()


def drain_loop(path: Path, n: int) -> tuple[float, float]:
    client = _fenceq_open(path, "FULL")
    _fill_fenceq(client, n)

    def step() -> int:
        claims = client.claim_jobs([QUEUE], "loop", secrets.token_hex(16), BATCH)
        if claims:
            assert all(client.complete_batch([claim.fence for claim in claims]))
        return len(claims)

    try:
        return _timed(step, n)
    finally:
        client.close()


def drain_worker(path: Path, n: int) -> tuple[float, float]:
    """``bench.worker_bench``'s fenceq drain (its queue, task and worker), on SQLite."""
    client = _fenceq_open(path, "FULL")
    client.create_queue(worker_bench.QUEUE)
    _fill_fenceq(client, n, worker_bench.QUEUE, worker_bench.TASK)
    client.close()
    cpu = time.process_time()
    elapsed = asyncio.run(worker_bench.drain_fenceq(f"sqlite:///{path}", n))
    return elapsed, time.process_time() - cpu


SYSTEMS = {"worker": drain_worker, "loop": drain_loop, "bare": drain_bare}


def run(directory: Path, jobs: int, rounds: int) -> dict:
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in SYSTEMS}
    for round_number in range(rounds):
        order = list(SYSTEMS) if round_number % 2 == 0 else list(reversed(SYSTEMS))
        for name in order:
            path = directory / f"{name}-{round_number}.db"
            _remove(path)
            figures[name].append(SYSTEMS[name](path, jobs))
            _remove(path)
    rates = {name: [jobs / elapsed for elapsed, _ in runs] for name, runs in figures.items()}

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    return {"jobs": jobs, "rounds": rounds,
            "jobs_per_s": {name: statistics.median(r) for name, r in rates.items()},
            "cpu_us_per_job": {name: statistics.median(cpu / jobs * 1e6 for _, cpu in runs)
                               for name, runs in figures.items()},
            "worker_to_loop": ratio("worker", "loop"), "loop_to_bare": ratio("loop", "bare")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="where the database files go (default: a temporary one)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        result = run(Path(args.directory or scratch), args.jobs, args.rounds)
    if args.json:
        print(json.dumps(result))
        return 0
    for name in SYSTEMS:
        print(f"{name:>7}: {result['jobs_per_s'][name]:9,.0f} jobs/s, "
              f"{result['cpu_us_per_job'][name]:5.0f} µs of CPU per job")
    print(f"Worker / fenceq loop: {result['worker_to_loop']:.2f}x; fenceq loop / bare: {result['loop_to_bare']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
