"""How late an idle worker starts a job that falls due later: a delayed job
(``run_at`` = now + 3 s) and a retry (the queue's backoff: 2 s), with the
worker's defaults (on PostgreSQL a 5 s poll interval). Schema version 3
sent no notification for either (a job not due when it was submitted or
failed sent none); version 4 sends ``fenceq_jobs`` for both, and the idle
worker re-reads ``next_due``. docs/guarantees.md §13 has the figures::

    python -m bench.wakeup --url URL [--runs 20]

For each run the worker first idles for a random 5 to 10 s (long enough to
back off to its poll interval, and at a random phase of it), then one job is
submitted from another connection. The delay is the wall time at the
handler's first line minus the job's ``run_at`` (the retry's: its attempt
2). The worker is the ``fenceq`` that Python imports: put an older tree's
``python_client`` first on ``PYTHONPATH`` to measure it (the database must
have the current schema: ``fenceq migrate`` it from this tree first).
Prints one JSON line: the delays in seconds, and their median and maximum.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

QUEUE = "bench_wakeup"
DELAY = timedelta(seconds=3)
BACKOFF = timedelta(seconds=2)


async def measure(url: str, runs: int) -> dict[str, list[float]]:
    import fenceq
    from fenceq.worker import App, Worker

    app = App(queues=[QUEUE])
    started: dict[str, float] = {}

    @app.task("delayed")
    async def delayed(ctx):  # noqa: ANN001
        started[ctx.job_id] = time.time()

    @app.task("retried")
    async def retried(ctx):  # noqa: ANN001
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        started[ctx.job_id] = time.time()

    producer = await fenceq.connect_async(url)
    await producer.create_queue(QUEUE, max_attempts=3, backoff_base=BACKOFF, backoff_max=BACKOFF)
    worker = Worker(app, url=url)
    running = asyncio.create_task(worker.run_async())
    delays: dict[str, list[float]] = {"delayed": [], "retried": []}
    try:
        while not worker.started.is_set():
            await asyncio.sleep(0.01)
        for _ in range(runs):
            for task in delays:
                await asyncio.sleep(random.uniform(5.0, 10.0))
                run_at = datetime.now(timezone.utc) + DELAY if task == "delayed" else None
                job_id = await producer.submit(QUEUE, task, run_at=run_at)
                while job_id not in started:
                    if running.done():
                        running.result()
                    await asyncio.sleep(0.005)
                due = (await producer.get_job(job_id)).run_at
                delays[task].append(round(started[job_id] - due.timestamp(), 4))
    finally:
        worker.stop()
        await running
        await producer.close()
    return delays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    import fenceq

    delays = asyncio.run(measure(args.url, args.runs))
    summary = {task: {"median": statistics.median(values), "max": max(values), "delays": values}
               for task, values in delays.items()}
    print(json.dumps({"fenceq": str(Path(fenceq.__file__).parents[1]), **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
