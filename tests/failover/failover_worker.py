"""A worker process of the failover run (``failover_run.py``): the
multi-host run's worker (``tests/hosts/host_worker.py``: its journals of
effects and calls, its ``steps`` task with checkpoints), connected through
the cluster's multi-host URL, with three more tasks:

- ``flaky``: fails on its first claim (a retry), completes on the next;
- ``join``: the child of two parents (``depends_on``);
- ``tick``: the job of a schedule's occurrence.

Each returns the result the audit expects of the claim that completed it,
and journals ``finish`` under its fence first.

    python failover_worker.py --url URL --owner w1 --effects F --calls F [--concurrency 8 --lease 4]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hosts"))

import host_worker  # noqa: E402
from host_worker import app, effect  # noqa: E402


def finished(ctx) -> dict:
    effect(ctx, "finish")
    return {"gen": ctx.generation, "owner": ctx.owner_id}


@app.task("flaky")
def flaky(ctx):
    if ctx.generation == 1:
        raise RuntimeError("the first claim of a flaky job fails")
    return finished(ctx)


@app.task("join")
def join(ctx):
    return finished(ctx)


@app.task("tick")
def tick(ctx):
    return finished(ctx)


if __name__ == "__main__":
    host_worker.main()
