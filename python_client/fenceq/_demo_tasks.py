"""The tasks that `fenceq demo` runs in its worker processes.

Each handler notes what it does in the demo's events file (the payload's
``events`` path), so that the demo can tell the story as it happens.
"""

from __future__ import annotations

import json
import os
import time

from .worker import App, JobCancelled, LeaseLost, NonRetryable

app = App("fenceq-demo")


def note(ctx, event: str, **fields) -> None:
    path = (ctx.payload or {}).get("events")
    if not path:
        return
    line = json.dumps({"event": event, "job_id": ctx.job_id, "generation": ctx.generation,
                       "worker": ctx.owner_id, "t": time.time(), **fields})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@app.task("thumbnail")
def thumbnail(ctx):
    time.sleep(0.15)
    return {"thumbnail": f"{ctx.payload['image']}.thumb.jpg", "by": ctx.owner_id}


@app.task("stage")
def stage(ctx):
    """One stage of a small graph: it runs only after the stages it depends on completed."""
    note(ctx, "stage_started", stage=ctx.payload["stage"])
    time.sleep(0.2)
    return {"stage": ctx.payload["stage"], "by": ctx.owner_id}


@app.task("report")
def report(ctx):
    """Three checkpointed steps: a step recorded by an earlier claim is not run again."""
    ran, reused = [], []
    for step in ("fetch", "render", "upload"):
        if step in ctx.checkpoints:
            reused.append(step)
            continue

        def work(step=step):
            time.sleep(ctx.payload.get("step_seconds", 0.8))
            return {"done_by": ctx.owner_id, "generation": ctx.generation}

        ctx.checkpoint(step, work)
        ran.append(step)
        note(ctx, "checkpoint", step=step)
    return {"steps_run_here": ran, "steps_from_checkpoints": reused, "by": ctx.owner_id}


@app.task("invoice")
def invoice(ctx):
    """The first claim works slowly and checks its fence before the side effect."""
    note(ctx, "started")
    if ctx.generation == 1:
        deadline = time.monotonic() + ctx.payload.get("seconds", 3.0)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        if not ctx.fence_live:
            note(ctx, "told", lost=ctx.lost.is_set())
        try:
            ctx.checkpoint("email", lambda: {"sent_by": ctx.owner_id})
            note(ctx, "checkpoint_accepted")
        except LeaseLost:
            note(ctx, "checkpoint_refused")
    else:
        ctx.checkpoint("email", lambda: {"sent_by": ctx.owner_id})
    return {"invoice": ctx.payload["number"], "by": ctx.owner_id, "generation": ctx.generation}


@app.task("export")
def export(ctx):
    note(ctx, "started")
    if ctx.cancelled.wait(ctx.payload.get("seconds", 60)):
        note(ctx, "saw_cancel")
        raise JobCancelled()
    return {"exported": True}


@app.task("charge")
def charge(ctx):
    fixed = ctx.payload.get("fixed_flag")
    if not (fixed and os.path.exists(fixed)):
        raise NonRetryable("card declined: the customer must update their card")
    return {"charged": ctx.payload["amount"], "by": ctx.owner_id}


@app.task("transfer")
def transfer(ctx):
    """Moves money between two rows in ``ctx.transaction()``: the writes commit
    with the completion, or not at all. The first claim lingers inside the
    block (the demo freezes it there)."""
    amount = ctx.payload["amount"]
    with ctx.transaction() as tx:
        mark = "%s" if tx.backend == "postgres" else "?"
        tx.execute(f"UPDATE demo_accounts SET balance = balance - {mark} WHERE id = 'alice'", (amount,))
        tx.execute(f"UPDATE demo_accounts SET balance = balance + {mark} WHERE id = 'bob'", (amount,))
        tx.execute(f"INSERT INTO demo_transfers VALUES ({mark}, {mark}, {mark})",
                   (ctx.job_id, ctx.generation, ctx.owner_id))
        note(ctx, "transfer_written")
        if ctx.generation == 1:
            time.sleep(ctx.payload.get("seconds", 1.0))
        tx.result = {"moved": amount, "by": ctx.owner_id, "generation": ctx.generation}
    note(ctx, "transfer_committed")

