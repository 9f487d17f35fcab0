"""What a user runs: ``fenceq.Worker`` (async no-op handler, concurrency 16)
against PgQueuer 1.6's ``QueueManager`` (batch size 10, asyncpg), each
draining the same number of jobs on the same server.

The parent (``python -m bench``) fills both queues and takes a CHECKPOINT;
each drain then runs in a fresh child process, one per system::

    python -m bench.worker_bench fenceq|pgqueuer --url URL --jobs N [--profile]
    python -m bench.worker_bench wake --url URL --jobs SAMPLES

The child prints one JSON line: jobs, seconds (from before the worker or
queue manager starts until the last job is done: for fenceq the N-th
fenced completion, for PgQueuer the return of ``run(mode=drain)``) and the
process's CPU seconds. ``--profile`` runs the fenceq worker under cProfile
(untimed) and adds where its time went. ``wake`` measures how fast an idle
fenceq worker starts a job submitted from elsewhere (LISTEN/NOTIFY).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

QUEUE = "bench_worker"
WAKE_QUEUE = "bench_wake"
TASK = "bench"
CONCURRENCY = 16
PGQUEUER_BATCH = 10
UNTRACKED = {"pg_stat_statements.track": "none"}


def untracked_url(url: str) -> str:
    """The URL with this session's statement tracking off (timed runs)."""
    options = quote(" ".join(f"-c {k}={v}" for k, v in UNTRACKED.items()))
    return f"{url}{'&' if '?' in url else '?'}options={options}"


# --- parent side ---------------------------------------------------------------

async def _pgqueuer_queries(url: str):
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    return conn, Queries(AsyncpgDriver(conn))


async def install_pgqueuer(url: str) -> None:
    conn, queries = await _pgqueuer_queries(url)
    try:
        await queries.install()
    finally:
        await conn.close()


async def fill_pgqueuer(url: str, count: int, chunk: int = 1000) -> None:
    conn, queries = await _pgqueuer_queries(url)
    try:
        for start in range(0, count, chunk):
            size = min(chunk, count - start)
            await queries.enqueue([TASK] * size, [b'{"n": %d}' % (start + i) for i in range(size)],
                                  [0] * size)
    finally:
        await conn.close()


def run_child(system: str, url: str, jobs: int, profile: bool = False) -> dict:
    command = [sys.executable, "-m", "bench.worker_bench", system, "--url", url, "--jobs", str(jobs)]
    if profile:
        command.append("--profile")
    out = subprocess.run(command, capture_output=True, text=True, timeout=900,
                         cwd=Path(__file__).resolve().parent.parent)
    if out.returncode != 0:
        raise RuntimeError(f"the {system} worker run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- child side ----------------------------------------------------------------

async def drain_fenceq(url: str, jobs: int) -> float:
    from fenceq.worker import App, Worker

    app = App(queues=[QUEUE])

    @app.task(TASK)
    async def noop(ctx):  # noqa: ANN001 - a no-op handler
        return None

    worker = Worker(app, url=url, concurrency=CONCURRENCY)
    started = time.perf_counter()
    running = asyncio.create_task(worker.run_async())
    while worker.counts["completed"] < jobs:
        if running.done():
            running.result()
            raise RuntimeError("the fenceq worker stopped early")
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - started
    worker.stop()
    await running
    return elapsed


async def drain_pgqueuer(url: str, jobs: int) -> float:
    import asyncpg
    from pgqueuer import AsyncpgDriver, QueueManager, Queries
    from pgqueuer.types import QueueExecutionMode

    handled = 0
    started = time.perf_counter()
    conn = await asyncpg.connect(url.split("?", 1)[0],
                                 server_settings=UNTRACKED if "options=" in url else None)
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint(TASK)
    async def noop(job) -> None:  # noqa: ANN001 - a no-op handler
        nonlocal handled
        handled += 1

    await manager.run(batch_size=PGQUEUER_BATCH, mode=QueueExecutionMode.drain)
    elapsed = time.perf_counter() - started
    await conn.close()
    if handled != jobs:
        raise RuntimeError(f"PgQueuer handled {handled} of {jobs} jobs")
    return elapsed


async def wake_latency(url: str, samples: int) -> list[float]:
    """An idle worker (polling every 30 s, so only LISTEN/NOTIFY wakes it);
    one job submitted at a time from another connection; seconds from just
    before the submit to the handler's first line."""
    import psycopg
    from fenceq.worker import App, Worker

    from . import statements as sql

    app = App(queues=[WAKE_QUEUE])
    started: dict[str, float] = {}
    arrived = asyncio.Event()

    @app.task(TASK)
    async def mark(ctx):  # noqa: ANN001
        started[ctx.job_id] = time.monotonic()
        arrived.set()

    worker = Worker(app, url=url, poll_interval=30, reap_interval=None)
    running = asyncio.create_task(worker.run_async())
    out = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as producer:
        await asyncio.sleep(0.5)  # listening, idle
        for i in range(samples):
            arrived.clear()
            sent = time.monotonic()
            cur = await producer.execute(sql.FQ_SUBMIT, {"queue": WAKE_QUEUE, "task": TASK,
                                                         "payload": '{"n": %d}' % i})
            job_id = (await cur.fetchone())[0]
            while job_id not in started:
                await asyncio.wait_for(arrived.wait(), timeout=10)
                arrived.clear()
            out.append(started[job_id] - sent)
            await asyncio.sleep(0.02)  # back to idle
    worker.stop()
    await running
    return out


DRAINS = {"fenceq": drain_fenceq, "pgqueuer": drain_pgqueuer}
# Imported before the CPU clock starts, so that it counts only the drain:
# each system with its driver (fenceq imports psycopg with its first connection).
IMPORTS = {"fenceq": ["fenceq.worker", "fenceq.backends.postgres"], "pgqueuer": ["asyncpg", "pgqueuer"],
           "wake": ["fenceq.worker"]}

# Where profiled time goes, by the file a function lives in (first match).
PROFILE_GROUPS = [
    ("waiting in the event loop's poll (round trips, idle)", ("method 'poll' of 'select.epoll'",)),
    ("fenceq client validation (validate.py, canonical.py)", ("fenceq/validate.py", "fenceq/canonical.py")),
    ("fenceq client call layer (client.py, backends, types.py)",
     ("fenceq/client.py", "fenceq/_postgres.py", "fenceq/backends/", "fenceq/types.py", "fenceq/errors.py")),
    ("fenceq worker (claim loop, dispatch, completion, heartbeats)", ("fenceq/worker", "fenceq/_worker_log.py")),
    ("psycopg (query building, encoding, decoding, protocol)", ("psycopg",)),
    ("asyncio event loop (scheduling, callbacks, transports)", ("asyncio/", "selectors.py")),
]
OTHER = "other (stdlib, json, uuid, logging, ...)"


def _group(name: str) -> str | None:
    for group, markers in PROFILE_GROUPS:
        if any(marker in name for marker in markers):
            return group
    return None


def summarize_profile(profile: cProfile.Profile, jobs: int, wall: float) -> dict:
    """Self time by group; a C function without a group of its own counts
    for the group of the caller that spent most in it."""
    stats = pstats.Stats(profile).stats
    label = {func: f"{func[0]}:{func[2]}" for func in stats}
    groups: dict[str, float] = {}
    top = []
    for func, (_, calls, self_time, _, callers) in stats.items():
        group = _group(label[func])
        if group is None and func[0] == "~" and callers:
            heaviest = max(callers.items(), key=lambda item: item[1][2])[0]
            group = _group(label[heaviest])
        group = group or OTHER
        groups[group] = groups.get(group, 0.0) + self_time
        top.append((self_time, calls, label[func]))
    top.sort(reverse=True)
    total = sum(groups.values()) or 1.0
    return {"jobs": jobs, "wall": wall,
            "groups": sorted(([g, t, t / total] for g, t in groups.items()), key=lambda r: -r[1]),
            "top": [[_short(name), calls, t] for t, calls, name in top[:15]]}


def _short(name: str) -> str:
    """A function's file relative to its package root."""
    for root in ("site-packages/", "/lib/python3.", "/python_client/"):
        if root in name:
            name = name.split(root, 1)[1]
            return name.split("/", 1)[1] if root == "/lib/python3." else name
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=sorted(DRAINS) + ["wake"],
                        help="wake: fenceq's wake-up latency, --jobs samples")
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--profile", action="store_true", help="run under cProfile (fenceq only)")
    args = parser.parse_args(argv)
    for module in IMPORTS[args.system]:
        importlib.import_module(module)
    if args.system == "wake":
        print(json.dumps({"wake": asyncio.run(wake_latency(args.url, args.jobs))}))
        return 0
    drain = DRAINS[args.system]
    cpu = time.process_time()
    if args.profile:
        profile = cProfile.Profile()
        seconds = profile.runcall(asyncio.run, drain(args.url, args.jobs))
        result = summarize_profile(profile, args.jobs, seconds)
    else:
        seconds = asyncio.run(drain(args.url, args.jobs))
        result = {}
    result.update(jobs=args.jobs, seconds=seconds, cpu_seconds=time.process_time() - cpu)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
