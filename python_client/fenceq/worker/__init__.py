"""The worker runtime: ``App`` (a task registry) and ``Worker``.

A worker claims jobs from named queues, runs the registered handler of each
job's task, and writes every outcome with the claim's fence, so that a
worker that was paused, partitioned or simply slow can never overwrite the
work of the worker that took its job over: the database refuses its writes.

    app = fenceq.App()

    @app.task("resize")
    def resize(ctx):                       # runs in a thread
        image = ctx.checkpoint("download", lambda: download(ctx.payload["url"]))
        if ctx.cancelled.is_set():
            raise fenceq.JobCancelled()
        return {"size": len(image)}

    @app.task("notify")
    async def notify(ctx):                 # runs on the event loop
        await send(ctx.payload)

    fenceq.Worker(app, url="postgresql://…", queues=["default"], concurrency=4).run()

Each runtime concern has a module of its own (docs/architecture.md walks a
job through them): ``claimer`` (claim loop, nonce recovery), ``executor``
(invoke the handler), ``settler`` (write its outcome), ``fenced_writer``
(re-send, read back, "landed" checks), ``completer`` (batching),
``heartbeater``, ``cancel_watcher``, ``notifier`` (LISTEN wake-ups and
control messages), ``transaction`` (``ctx.transaction()``: the handler's
writes commit with its fenced completion), ``maintenance`` (reap and purge
duty), ``shutdown``
(stop, drain, release), ``dispatch`` (``ctx.dispatch``: external execution
under the fence), wired by ``runtime`` around one ``state``; ``reconciler``
(``Reconciler``) settles the dispatched jobs whose lease lapsed. The
worker reaches its database only through ``fenceq.backends`` and the client.
"""

from .app import App, load_app
from .context import (AsyncJobContext, AsyncJobTransaction, JobCancelled, JobContext, JobTransaction, LeaseLost,
                      NonRetryable)
from .outcome import Dispatched
from .reconciler import PollResult, Reconciler
from .runtime import Worker
from .settings import default_owner_id

__all__ = ["App", "AsyncJobContext", "AsyncJobTransaction", "Dispatched", "JobCancelled", "JobContext",
           "JobTransaction", "LeaseLost", "NonRetryable", "PollResult", "Reconciler", "Worker", "default_owner_id",
           "load_app"]
