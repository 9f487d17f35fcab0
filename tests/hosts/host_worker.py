"""The worker process of one worker host: a ``fenceq.Worker`` connected to
the database host over the namespaces' network, started by ``drill.py``
inside the host's namespace.

It keeps two journals (JSON lines, on the shared filesystem: the filesystem
is not the network under test):

- effects: what the handler did, under which fence: one line per step it
  worked on and one when it finished, with ``(job, gen, owner)``;
- calls: every call the worker made to the database through its clients,
  with the fences it carried, when it was sent and answered (wall clock:
  every namespace shares the kernel's clock with the database server) and
  the answer, or that none came (the outcome stayed unknown).

The worker's own log (JSON events) goes to stderr.

    python host_worker.py --url URL --owner w1 --effects F --calls F [--concurrency 8 --lease 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from typing import Any, AsyncIterator

from fenceq import Claim, Fence
from fenceq._worker_log import configure
from fenceq.worker import App, LeaseLost, Worker

QUEUE = "hosts"
app = App(queues=[QUEUE])


class Journal:
    """Append-only JSON lines, written whole (handlers write from their threads)."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, **entry: Any) -> None:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


effects: Journal | None = None


def effect(ctx, what: str, **fields: Any) -> None:
    assert effects is not None
    effects.write(what=what, job=ctx.job_id, gen=ctx.generation, owner=ctx.owner_id, live=ctx.fence_live,
                  t=time.time(), **fields)


@app.task("steps")
def steps(ctx):
    """``steps`` steps of ``step_seconds`` each, checkpointed one by one (a
    later claim skips the steps already recorded), then ``finish_seconds``
    of work that no checkpoint records, then the result; with
    ``transaction`` (every other job of the multi-host run; absent in the
    failover run's jobs, which finish plainly) that finish runs inside
    ``ctx.transaction()`` and writes one row in ``host_effects``, which
    commits with the result (docs/transactions.md). The
    handler never stops early on its own: a claim that lost its lease keeps
    trying to write, which is what the test needs to see refused."""
    for step in range(ctx.payload["steps"]):
        def work(step=step):
            effect(ctx, "step", step=step)
            time.sleep(ctx.payload["step_seconds"])
            return {"gen": ctx.generation, "owner": ctx.owner_id}
        try:
            ctx.checkpoint(f"step{step}", work)
        except LeaseLost:
            effect(ctx, "lost", step=step)
            raise
    result = {"gen": ctx.generation, "owner": ctx.owner_id}
    in_transaction = ctx.payload.get("transaction", False)
    effect(ctx, "finish", transaction=in_transaction)
    if not in_transaction:
        time.sleep(ctx.payload["finish_seconds"])
        return result
    # The finish is an effect in a table of the database's own, in a
    # transaction that commits only with this claim's completion.
    with ctx.transaction() as tx:
        tx.execute("INSERT INTO host_effects VALUES (%s, %s, %s)", (ctx.job_id, ctx.generation, ctx.owner_id))
        time.sleep(ctx.payload["finish_seconds"])
        tx.result = result


def _fence(fence: Fence) -> list:
    return [fence.job_id, fence.generation, fence.owner_id]


def _claimed(claim: Claim | None) -> list:
    return [] if claim is None else [[claim.job_id, claim.generation, claim.owner_id]]


# For each recorded call: the fences it carried (from its first argument or
# its answer) and its answer in JSON terms.
CALLS = {
    "claim_next": (None, lambda answer: _claimed(answer), lambda answer: answer is not None),
    "claim_batch": (None, lambda answer: [f for c in answer for f in _claimed(c)], len),
    "claim_jobs": (None, lambda answer: [f for c in answer for f in _claimed(c)], len),
    "recover_claim": (None, lambda answer: _claimed(answer), lambda answer: answer is not None),
    "recover_claims": (None, lambda answer: [f for c in answer for f in _claimed(c)], len),
    "heartbeat": (lambda fence: [_fence(fence)], None, bool),
    "heartbeat_batch": (lambda fences: [_fence(f) for f in fences], None, list),
    "checkpoint": (lambda fence: [_fence(fence)], None, lambda value: value is not None),
    "complete": (lambda fence: [_fence(fence)], None, bool),
    "complete_batch": (lambda fences: [_fence(f) for f in fences], None, list),
    "fail": (lambda fence: [_fence(fence)], None, bool),
    "release": (lambda fence: [_fence(fence)], None, bool),
    "acknowledge_cancel": (lambda fence: [_fence(fence)], None, bool),
}


class RecordingTransaction:
    """A worker's transaction (``ctx.transaction()``): its ``complete`` is
    journalled by ``RecordingClient.transaction`` once the commit's outcome
    is known."""

    def __init__(self, transaction: Any):
        self._transaction = transaction
        self.completion: dict | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transaction, name)

    async def complete(self, fence: Fence, result: Any = None) -> bool:
        self.completion = {"op": "complete", "t0": time.time(), "fences": [_fence(fence)]}
        try:
            answer = await self._transaction.complete(fence, result)
        except Exception as error:
            self.completion["error"] = type(error).__name__
            raise
        self.completion["answer"] = answer
        return answer


class RecordingClient:
    """Wraps the worker's ``AsyncClient``: each call in ``CALLS`` is
    journalled, and the completion inside a transaction as a ``complete``:
    accepted only once it committed (unknown when the commit's answer was
    lost; refused when it answered false, and the transaction rolled back)."""

    def __init__(self, client: Any, calls: Journal):
        self._client = client
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if name not in CALLS:
            return method
        sent_fences, answered_fences, answer_of = CALLS[name]

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            fences = sent_fences(args[0]) if sent_fences else []
            t0 = time.time()
            try:
                answer = await method(*args, **kwargs)
            except Exception as error:
                self._calls.write(op=name, t0=t0, t1=time.time(), fences=fences, error=type(error).__name__)
                raise
            if answered_fences:
                fences = answered_fences(answer)
            self._calls.write(op=name, t0=t0, t1=time.time(), fences=fences, answer=answer_of(answer))
            return answer

        return recorded

    @contextlib.asynccontextmanager
    async def transaction(self, own_connection: bool = False) -> AsyncIterator[RecordingTransaction]:
        recording: RecordingTransaction | None = None
        try:
            async with self._client.transaction(own_connection) as transaction:
                recording = RecordingTransaction(transaction)
                yield recording
        except Exception as error:
            if recording is not None and recording.completion and recording.completion.get("answer"):
                del recording.completion["answer"]  # accepted, then the commit failed: unknown
                recording.completion["error"] = type(error).__name__
            raise
        finally:
            if recording is not None and recording.completion is not None:
                self._calls.write(**recording.completion, t1=time.time())


def main() -> None:
    global effects
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--calls", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=4.0)
    args = parser.parse_args()
    configure("json", "INFO")
    effects = Journal(args.effects)
    calls = Journal(args.calls)
    worker = Worker(app, url=args.url, owner_id=args.owner, concurrency=args.concurrency, lease=args.lease,
                    reap_interval=0.5, poll_interval=1.0, drain_timeout=20.0,
                    wrap_client=lambda client: RecordingClient(client, calls))
    worker.run()


if __name__ == "__main__":
    main()
