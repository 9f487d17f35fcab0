"""Worker benchmark: end-to-end throughput of ``fenceq.Worker`` with no-op
handlers, and wake-up latency from submit to handler start (PostgreSQL).

    FENCEQ_BENCH_PG_URL=postgresql://postgres@127.0.0.1:54339/postgres \\
        .venv/bin/python bench/worker_bench.py [--jobs 5000] [--samples 200]

It creates a fresh database (``fenceq_worker_bench``) on that server, installs
fenceq, and measures:

* throughput: N jobs submitted up front (``submit_batch``), then one worker
  process runs them all: claim (``claim_next`` / ``claim_batch``), handler
  dispatch (a thread per job for a plain handler, a task for an async one),
  fenced completion (``complete`` / ``complete_batch``, batched
  opportunistically). Jobs per second from worker start to the last
  completion, at concurrency 1, 4 and 16.
* wake-up latency: an idle worker (polling set to 30 s, so only
  LISTEN/NOTIFY can wake it); one job submitted at a time from another
  connection; time from just before ``submit`` to the handler's first line.

Both run in this process: the worker on its own event loop in a thread, the
producer on the main thread (CLOCK_MONOTONIC is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_client"))

import psycopg  # noqa: E402

import fenceq  # noqa: E402
from fenceq.migrate import migrate  # noqa: E402
from fenceq.worker import App, Worker  # noqa: E402

DBNAME = "fenceq_worker_bench"


def fresh_database(server_url: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DBNAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DBNAME}")
    parts = urlsplit(server_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/" + DBNAME, parts.query, parts.fragment))
    migrate(url)
    return url


class WorkerThread:
    """A Worker on its own event loop in a background thread."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()), daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        if not self.worker.started.wait(30):
            raise SystemExit("worker did not start")
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(60)


def throughput(url: str, jobs: int, concurrency: int, handler_kind: str) -> float:
    queue = f"tp_{handler_kind}_{concurrency}"
    app = App(queues=[queue])
    if handler_kind == "async":
        async def noop(ctx):  # noqa: ANN001
            return None
        app.task("noop")(noop)
    else:
        app.task("noop")(lambda ctx: None)
    with fenceq.connect(url) as client:
        client.create_queue(queue, lease=timedelta(seconds=30))
        for start in range(0, jobs, 1000):
            client.submit_batch(queue, [{"task": "noop"}] * min(1000, jobs - start))
    worker = Worker(app, url=url, concurrency=concurrency, reap_interval=None, poll_interval=0.05)
    began = time.perf_counter()
    with WorkerThread(worker):
        while worker.counts["completed"] < jobs:
            time.sleep(0.005)
        elapsed = time.perf_counter() - began
    return jobs / elapsed


def wake_latency(url: str, samples: int) -> list[float]:
    queue = "wake"
    starts: dict[str, float] = {}
    app = App(queues=[queue])

    @app.task("mark")
    async def mark(ctx):  # noqa: ANN001
        starts[ctx.job_id] = time.monotonic()

    latencies = []
    with fenceq.connect(url) as client:
        client.create_queue(queue, lease=timedelta(seconds=30))
        worker = Worker(app, url=url, poll_interval=30, reap_interval=None)
        with WorkerThread(worker):
            time.sleep(0.5)
            for _ in range(samples):
                sent = time.monotonic()
                job_id = client.submit(queue, "mark")
                deadline = sent + 5
                while job_id not in starts and time.monotonic() < deadline:
                    time.sleep(0.0002)
                if job_id in starts:
                    latencies.append(starts[job_id] - sent)
                time.sleep(0.02)  # let the worker settle back to idle
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("FENCEQ_BENCH_PG_URL"),
                        help="server URL (default $FENCEQ_BENCH_PG_URL)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--markdown", type=Path, help="append the figures as a section of this file")
    args = parser.parse_args()
    if not args.url:
        parser.error("pass --url or set FENCEQ_BENCH_PG_URL (a PostgreSQL server URL)")
    url = fresh_database(args.url)
    print(f"worker throughput, no-op handlers, {args.jobs} jobs per run (jobs/s):")
    print(f"{'concurrency':>12} {'sync handler':>14} {'async handler':>14}")
    rows = []
    for concurrency in args.concurrency:
        sync_rate = throughput(url, args.jobs, concurrency, "sync")
        async_rate = throughput(url, args.jobs, concurrency, "async")
        rows.append((concurrency, sync_rate, async_rate))
        print(f"{concurrency:>12} {sync_rate:>14,.0f} {async_rate:>14,.0f}", flush=True)
    latencies = wake_latency(url, args.samples)
    ms = [x * 1000 for x in latencies]
    p50, p90, p99 = statistics.median(ms), percentile(ms, 0.9), percentile(ms, 0.99)
    print(f"wake-up latency, submit -> handler start (LISTEN/NOTIFY, idle worker), {len(ms)} samples:")
    print(f"  p50 {p50:.2f} ms   p90 {p90:.2f} ms   p99 {p99:.2f} ms   max {max(ms):.2f} ms")
    if args.markdown:
        lines = [
            "", "## Worker end to end (PostgreSQL)", "",
            f"`python bench/worker_bench.py` in the same `make bench` run, same server: one `fenceq.Worker` "
            f"process, no-op handlers, {args.jobs} jobs per figure (claim, dispatch, fenced completion, "
            "heartbeats). Compare with the per-job and batched bare-SQL drain baselines in the summary above.", "",
            "| concurrency | sync handler (jobs/s) | async handler (jobs/s) |", "|---:|---:|---:|",
            *[f"| {c} | {s:,.0f} | {a:,.0f} |" for c, s, a in rows], "",
            f"Wake-up latency from `submit` to the handler's first line, idle worker woken by LISTEN/NOTIFY "
            f"({len(ms)} samples): **p50 {p50:.2f} ms** (target ≤ 10 ms: "
            f"{'pass' if p50 <= 10 else 'MISS'}), p90 {p90:.2f} ms, p99 {p99:.2f} ms.", ""]
        with args.markdown.open("a", encoding="utf-8") as doc:
            doc.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
