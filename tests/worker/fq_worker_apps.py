"""Task handlers for the worker tests (imported in-process, and by worker
processes as ``fq_worker_apps:app`` with this folder on PYTHONPATH).

Handlers append one JSON line per event to the file named by the payload's
``trace`` key, so a test can see what ran where, and how often.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from fenceq.worker import App, JobCancelled, LeaseLost, NonRetryable

app = App(queues=["work"])


def trace(ctx, event: str, **fields) -> None:
    path = (ctx.payload or {}).get("trace")
    if not path:
        return
    line = json.dumps({"event": event, "job": ctx.job_id, "gen": ctx.generation, "pid": os.getpid(),
                       "t": time.time(), **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_trace(path) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


@app.task("quick")
def quick(ctx):
    trace(ctx, "start")
    time.sleep((ctx.payload or {}).get("seconds", 0))
    trace(ctx, "end")
    return {"gen": ctx.generation, "pid": os.getpid()}


@app.task("slow")
def slow(ctx):
    """Works for ``seconds`` in small steps (heartbeats keep the lease)."""
    trace(ctx, "start")
    deadline = time.monotonic() + ctx.payload["seconds"]
    while time.monotonic() < deadline:
        time.sleep(0.02)
    trace(ctx, "end")
    return {"gen": ctx.generation, "pid": os.getpid()}


@app.task("polite")
def polite(ctx):
    """Works until the worker asks it to stop (a drain), then finishes."""
    trace(ctx, "start")
    ctx.stopping.wait(ctx.payload.get("seconds", 60))
    trace(ctx, "end")
    return {"gen": ctx.generation}


@app.task("stall")
def stall(ctx):
    """Generation 1 stalls and watches its fence; later generations finish at once."""
    trace(ctx, "start")
    if ctx.generation > 1:
        trace(ctx, "end")
        return {"gen": ctx.generation}
    deadline = time.monotonic() + ctx.payload.get("seconds", 30)
    while time.monotonic() < deadline:
        if not ctx.fence_live:
            trace(ctx, "told", lost=ctx.lost.is_set())
            break
        time.sleep(0.02)
    try:
        ctx.checkpoint("late", lambda: "late work")
        trace(ctx, "checkpoint_accepted")
    except LeaseLost:
        trace(ctx, "checkpoint_refused", lost=ctx.lost.is_set())
    trace(ctx, "end")
    return {"gen": ctx.generation, "late": True}


@app.task("cancellable")
def cancellable(ctx):
    trace(ctx, "start")
    if ctx.cancelled.wait(ctx.payload.get("seconds", 30)):
        trace(ctx, "saw_cancel", lost=ctx.lost.is_set())
        raise JobCancelled()
    trace(ctx, "end")
    return "not cancelled"


@app.task("acancellable")
async def acancellable(ctx):
    trace(ctx, "start")
    try:
        await asyncio.wait_for(ctx.cancelled.wait(), ctx.payload.get("seconds", 30))
    except asyncio.TimeoutError:
        return "not cancelled"
    trace(ctx, "saw_cancel", lost=ctx.lost.is_set())
    return "stopped early"


@app.task("flaky")
def flaky(ctx):
    """Records a checkpoint, then fails on the first ``failures`` attempts."""
    calls = ctx.checkpoint("expensive", lambda: (trace(ctx, "expensive"), {"computed_by": ctx.generation})[1])
    trace(ctx, "start", attempt=ctx.attempt)
    if ctx.attempt <= ctx.payload.get("failures", 1):
        raise RuntimeError(f"transient trouble on attempt {ctx.attempt}")
    return {"checkpoint": calls, "attempt": ctx.attempt}


@app.task("broken")
def broken(ctx):
    trace(ctx, "start")
    raise NonRetryable("bad input: will never work")


@app.task("noop")
def noop(ctx):
    return None


@app.task("reporter")
def reporter(ctx):
    """Reports progress in a tight loop until the file named ``until`` exists."""
    reports = 0
    while not os.path.exists(ctx.payload["until"]):
        reports += 1
        ctx.progress({"reports": reports})
        time.sleep(0.001)
    return {"reports": reports}


# Transactions (docs/transactions.md): a transfer between two rows of the
# test's own tables, with one row per committed effect in ``effects`` (no
# unique key: a second effect of a job would show).

LEDGER = ("CREATE TABLE accounts (id text PRIMARY KEY, balance integer NOT NULL)",
          "CREATE TABLE effects (job_id text NOT NULL, generation integer NOT NULL, pid integer NOT NULL)",
          "INSERT INTO accounts VALUES ('alice', 1000), ('bob', 0)")


def wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


def transfer_statements(ctx, backend: str) -> list[tuple[str, tuple]]:
    mark = "%s" if backend == "postgres" else "?"
    amount = ctx.payload.get("amount", 10)
    return [(f"UPDATE accounts SET balance = balance - {mark} WHERE id = 'alice'", (amount,)),
            (f"UPDATE accounts SET balance = balance + {mark} WHERE id = 'bob'", (amount,)),
            (f"INSERT INTO effects VALUES ({mark}, {mark}, {mark})", (ctx.job_id, ctx.generation, os.getpid()))]


def follow_up(ctx) -> tuple[str, str, dict] | None:
    """The follow-up job a transfer submits in its transaction, if asked to."""
    queue = ctx.payload.get("follow_up")
    return (queue, "noop", {"after": ctx.job_id, "gen": ctx.generation}) if queue else None


@app.task("transfer")
def transfer(ctx):
    """Moves ``amount`` from alice to bob in ``ctx.transaction()``. Generation 1
    waits for the file ``hold_before`` before the block and ``hold_in`` inside
    it (after its writes); attempt ``fail_in`` raises inside the block."""
    payload = ctx.payload
    trace(ctx, "start")
    if payload.get("hold_before") and ctx.generation == 1:
        wait_for_file(payload["hold_before"])
    with ctx.transaction() as tx:
        for sql, params in transfer_statements(ctx, tx.backend):
            tx.execute(sql, params)
        if (job := follow_up(ctx)) is not None:
            tx.submit(*job)
        trace(ctx, "written")
        if payload.get("hold_in") and ctx.generation == 1:
            wait_for_file(payload["hold_in"])
        if payload.get("fail_in") == ctx.attempt:
            raise RuntimeError("trouble inside the transaction")
        tx.result = {"gen": ctx.generation, "pid": os.getpid()}
    trace(ctx, "committed")


@app.task("atransfer")
async def atransfer(ctx):
    """``transfer`` as an async handler (no holds)."""
    trace(ctx, "start")
    async with ctx.transaction() as tx:
        for sql, params in transfer_statements(ctx, tx.backend):
            await tx.execute(sql, params)
        if (job := follow_up(ctx)) is not None:
            await tx.submit(*job)
        if ctx.payload.get("fail_in") == ctx.attempt:
            raise RuntimeError("trouble inside the transaction")
        tx.result = {"gen": ctx.generation, "async": True}
    trace(ctx, "committed")
