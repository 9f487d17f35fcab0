"""One worker process of bench/peers.py, for the Python systems.

    python bench/peers_child.py SYSTEM COMMAND --url URL [--jobs N]

SYSTEM: fenceq-worker, raw, bare (these need fenceq and the bench package),
pgqueuer, procrastinate, oban (these need only their own library, so that
oban can run from a Python >= 3.12 virtualenv of its own). COMMAND:

- ``setup``: install the system's schema in the database (peers only: the
  parent installs fenceq and the bare table itself);
- ``fill --jobs N``: submit N no-op jobs through the system's own API;
- ``work``: the timed part. The child imports and builds everything, prints
  ``{"ready": true}``, waits for a line ``go`` on stdin, works the queue
  (16 jobs in flight) until a line ``stop`` (or end of input), stops
  gracefully and prints ``{"handled": N}``: the jobs its handler ran (for
  the raw and bare loops, the jobs it completed).

The parent decides when the queue is drained (it counts in the database);
the child never exits on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

QUEUE = "bench_peers"
TASK = "bench"  # bench/worker_bench.py's task name (its PgQueuer fill)
CONCURRENCY = 16          # jobs in flight per process
BATCH = 100               # the raw and bare loops: jobs per claim statement
FILL_CHUNK = 1000


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


async def read_line() -> str:
    return (await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)).strip()


async def serve(start, stop, handled, **ready) -> None:
    """The protocol of ``work``: ready, go, stop. ``start`` works the queue
    (it may return at once, having started background tasks), ``stop``
    stops it, ``handled`` counts the jobs; ``ready`` goes with the ready line."""
    say(ready=True, **ready)
    if await read_line() != "go":
        return
    running = asyncio.ensure_future(start())
    stopping = asyncio.ensure_future(read_line())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running.done() and not running.cancelled() and running.exception() is not None:
        raise running.exception()
    await stopping
    await stop()
    await asyncio.wait({running}, timeout=60)
    if not running.done():
        raise RuntimeError("the worker did not stop within 60 s")
    if not running.cancelled() and running.exception() is not None:
        raise running.exception()
    say(handled=handled())


# --- fenceq: the Worker, and the raw and bare loops -----------------------------------

def _bench_on_path() -> None:
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)


async def work_fenceq_worker(url: str) -> None:
    import fenceq
    from fenceq.worker import App, Worker

    app = App(queues=[QUEUE])

    @app.task(TASK)
    async def noop(ctx):  # noqa: ANN001 - a no-op handler
        return None

    worker = Worker(app, url=url, concurrency=CONCURRENCY)

    async def stop() -> None:
        worker.stop()

    await serve(worker.run_async, stop, lambda: worker.counts["completed"], fenceq=str(Path(fenceq.__file__).parent))


async def work_loop(url: str, system: str) -> None:
    """fenceq's own raw loop (its best claim call of 100: claim_jobs with one
    nonce from version 8, claim_batch of 100 tokens before; one
    complete_batch) or the bare loop (the same on bare_jobs):
    bench/drivers.py's drain."""
    _bench_on_path()
    import psycopg

    from bench import drivers

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    if system == "fenceq" and int((await (await conn.execute("SELECT fenceq.version()")).fetchone())[0]) >= 8:
        system = "fenceq_jobs"
    done = 0

    async def start() -> None:
        nonlocal done
        done = await drivers.drain_batched(conn, owner=f"peers-{system}", system=system, queue=QUEUE, size=BATCH)

    async def stop() -> None:
        pass

    try:
        await serve(start, stop, lambda: done)
    finally:
        await conn.close()


# --- PgQueuer 1.6 -------------------------------------------------------------------

async def setup_pgqueuer(url: str) -> None:
    _bench_on_path()
    from bench import worker_bench

    await worker_bench.install_pgqueuer(url)


async def fill_pgqueuer(url: str, jobs: int) -> None:
    _bench_on_path()
    from bench import worker_bench

    await worker_bench.fill_pgqueuer(url, jobs)


async def work_pgqueuer(url: str) -> None:
    """QueueManager with batch size 10 (bench/worker_bench.py's setting),
    continuous mode until stopped."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, QueueManager, Queries

    _bench_on_path()
    from bench import worker_bench

    conn = await asyncpg.connect(url)
    manager = QueueManager(Queries(AsyncpgDriver(conn)))
    handled = 0

    @manager.entrypoint(TASK)
    async def noop(job) -> None:  # noqa: ANN001 - a no-op handler
        nonlocal handled
        handled += 1

    async def start() -> None:
        await manager.run(batch_size=worker_bench.PGQUEUER_BATCH)

    async def stop() -> None:
        manager.shutdown.set()

    try:
        await serve(start, stop, lambda: handled)
    finally:
        await conn.close()


# --- procrastinate 3.x ----------------------------------------------------------------

def procrastinate_app(url: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    app.handled = 0

    @app.task(name=TASK, queue=QUEUE)
    async def noop(n: int) -> None:
        app.handled += 1

    return app, noop


async def setup_procrastinate(url: str) -> None:
    app, _ = procrastinate_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def fill_procrastinate(url: str, jobs: int) -> None:
    app, noop = procrastinate_app(url)
    async with app.open_async():
        for start in range(0, jobs, FILL_CHUNK):
            await noop.batch_defer_async(*({"n": start + i} for i in range(min(FILL_CHUNK, jobs - start))))


async def work_procrastinate(url: str) -> None:
    app, _ = procrastinate_app(url)
    async with app.open_async():
        # Its docs' throughput settings: async concurrency in one worker,
        # LISTEN/NOTIFY on (the default), no signal handlers of its own.
        task: asyncio.Task | None = None

        async def start() -> None:
            nonlocal task
            task = asyncio.current_task()
            await app.run_worker_async(queues=[QUEUE], concurrency=CONCURRENCY, wait=True,
                                       install_signal_handlers=False)

        async def stop() -> None:
            if task is not None:
                task.cancel()  # procrastinate's documented way to stop run_worker_async

        await serve(start, stop, lambda: app.handled)


# --- oban-py --------------------------------------------------------------------------

OBAN_HANDLED = [0]


def oban_worker_class():
    from oban import worker

    @worker(queue=QUEUE)
    class Noop:
        async def process(self, job) -> None:  # noqa: ANN001 - a no-op handler
            OBAN_HANDLED[0] += 1

    return Noop


async def oban_pool(url: str):
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(conninfo=url, min_size=1, max_size=10, open=False)
    await pool.open()
    return pool


async def setup_oban(url: str) -> None:
    from oban.schema import install

    pool = await oban_pool(url)
    try:
        await install(pool)
    finally:
        await pool.close()


async def fill_oban(url: str, jobs: int) -> None:
    from oban import Oban

    noop = oban_worker_class()
    pool = await oban_pool(url)
    try:
        async with Oban(pool=pool) as oban:  # client mode: no queues
            for start in range(0, jobs, FILL_CHUNK):
                await oban.enqueue_many(noop.new({"n": start + i}) for i in range(min(FILL_CHUNK, jobs - start)))
    finally:
        await pool.close()


async def work_oban(url: str) -> None:
    from oban import Oban

    noop = oban_worker_class()
    pool = await oban_pool(url)
    oban = Oban(pool=pool, queues={QUEUE: CONCURRENCY})
    try:
        async def start() -> None:
            await oban.start()

        async def stop() -> None:
            await oban.stop()

        await serve(start, stop, lambda: OBAN_HANDLED[0])
    finally:
        await pool.close()


SETUP = {"pgqueuer": setup_pgqueuer, "procrastinate": setup_procrastinate, "oban": setup_oban}
FILL = {"pgqueuer": fill_pgqueuer, "procrastinate": fill_procrastinate, "oban": fill_oban}
WORK = {"fenceq-worker": work_fenceq_worker, "raw": lambda url: work_loop(url, "fenceq"),
        "bare": lambda url: work_loop(url, "bare"), "pgqueuer": work_pgqueuer,
        "procrastinate": work_procrastinate, "oban": work_oban}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=sorted(WORK))
    parser.add_argument("command", choices=["setup", "fill", "work"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "setup":
        asyncio.run(SETUP[args.system](args.url))
    elif args.command == "fill":
        asyncio.run(FILL[args.system](args.url, args.jobs))
    else:
        asyncio.run(WORK[args.system](args.url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
