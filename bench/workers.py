"""Worker processes: each holds its own autocommit connection and runs one
task at a time on command. The pool starts every worker of a run, waits
until each is ready, then releases them together; each worker reports how
many jobs it handled between its own start and end (CLOCK_MONOTONIC, which
is comparable across processes), and the run's rate is the total over the
span from the first start to the last end.

Processes rather than threads, so that 16 workers are 16 Python
interpreters (as 16 worker processes would be), not 16 threads sharing one
GIL.
"""

from __future__ import annotations

import multiprocessing as mp
import secrets
import time
import traceback
from dataclasses import dataclass
from typing import Any

from . import statements as sql

RESULT_TIMEOUT = 600.0


def new_token() -> str:
    """A fresh 128-bit claim token, as fenceq.new_claim_token() makes."""
    return secrets.token_hex(16)


# --- tasks -------------------------------------------------------------------
# Each task is split in two: a setup (run before the worker says "ready",
# untimed) and the timed body, which returns the number of jobs handled.


def _drain_fenceq(conn, index: int, queue: str, **_: Any):
    owner = f"bench-worker-{index}"
    queues = [queue]

    def body() -> int:
        done = 0
        while True:
            token = new_token()
            row = conn.execute(sql.FQ_CLAIM_NEXT,
                               {"queues": queues, "owner": owner, "token": token}).fetchone()
            if row is None:
                return done
            ok = conn.execute(sql.FQ_COMPLETE, {"job_id": row[0], "owner": owner,
                                                "generation": row[1], "token": token}).fetchone()[0]
            if not ok:
                raise RuntimeError("fenceq.complete returned false for a live claim")
            done += 1
    return body


def _drain_bare(conn, index: int, queue: str, **_: Any):
    owner = f"bench-worker-{index}"

    def body() -> int:
        done = 0
        while True:
            row = conn.execute(sql.BARE_CLAIM, {"queue": queue, "owner": owner}).fetchone()
            if row is None:
                return done
            cur = conn.execute(sql.BARE_COMPLETE, {"id": row[0], "owner": owner})
            if cur.rowcount != 1:
                raise RuntimeError("bare complete updated no row")
            done += 1
    return body


def _drain_fenceq_batch(conn, index: int, queue: str, batch: int, **_: Any):
    owner = f"bench-worker-{index}"
    queues = [queue]

    def body() -> int:
        done = 0
        while True:
            tokens = [new_token() for _ in range(batch)]
            rows = conn.execute(sql.FQ_CLAIM_BATCH,
                                {"queues": queues, "owner": owner, "tokens": tokens}).fetchall()
            if not rows:
                return done
            answers = conn.execute(sql.FQ_COMPLETE_BATCH, {
                "job_ids": [r[0] for r in rows], "owners": [owner] * len(rows),
                "generations": [r[1] for r in rows], "tokens": [r[2] for r in rows],
            }).fetchone()[0]
            if not all(answers):
                raise RuntimeError("fenceq.complete_batch returned false for a live claim")
            done += len(rows)
    return body


def _drain_bare_batch(conn, index: int, queue: str, batch: int, **_: Any):
    owner = f"bench-worker-{index}"

    def body() -> int:
        done = 0
        while True:
            rows = conn.execute(sql.BARE_CLAIM_BATCH,
                                {"queue": queue, "owner": owner, "n": batch}).fetchall()
            if not rows:
                return done
            cur = conn.execute(sql.BARE_COMPLETE_BATCH, {"ids": [r[0] for r in rows], "owner": owner})
            if cur.rowcount != len(rows):
                raise RuntimeError("bare batch complete missed rows")
            done += len(rows)
    return body


_CLIENTS: dict[str, Any] = {}


def _drain_client(conn, index: int, queue: str, url: str, **_: Any):
    """The same per-job loop through the Python client (fenceq.connect)."""
    import fenceq

    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = fenceq.connect(url)
    owner = f"bench-client-{index}"
    queues = [queue]

    def body() -> int:
        done = 0
        while True:
            claim = client.claim_next(queues, owner, fenceq.new_claim_token())
            if claim is None:
                return done
            if not client.complete(claim.fence):
                raise RuntimeError("client.complete returned false for a live claim")
            done += 1
    return body


def _submit(conn, index: int, queue: str, variant: str, duration: float, tag: str, **_: Any):
    statement = {"bare": sql.BARE_INSERT, "fenceq": sql.FQ_SUBMIT,
                 "fenceq_owned": sql.FQ_SUBMIT_OWNED}[variant]

    def body() -> int:
        done = 0
        end = time.monotonic() + duration
        while time.monotonic() < end:
            payload = '{"n": %d, "kind": "bench"}' % done
            if variant == "fenceq_owned":
                params = (queue, "bench", payload, f"{tag}-{index}-{done}")
            else:
                params = (queue, "bench", payload)
            conn.execute(statement, params).fetchone()
            done += 1
        return done
    return body


TASKS = {
    "drain_fenceq": _drain_fenceq,
    "drain_bare": _drain_bare,
    "drain_fenceq_batch": _drain_fenceq_batch,
    "drain_bare_batch": _drain_bare_batch,
    "drain_client": _drain_client,
    "submit": _submit,
}


def _worker_main(index: int, url: str, pipe, go) -> None:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    pipe.send(("up", None))
    while True:
        message = pipe.recv()
        if message is None:
            break
        kind, kwargs = message
        session = kwargs.pop("session", None) or []
        try:
            for statement in session:
                conn.execute(statement)
            body = TASKS[kind](conn, index, **kwargs)
        except Exception:  # report, do not die: the parent decides
            pipe.send(("error", traceback.format_exc()))
            continue
        pipe.send(("ready", None))
        go.wait()
        try:
            start = time.monotonic()
            count = body()
            end = time.monotonic()
            if session:
                conn.execute("RESET ALL")
            pipe.send(("done", (count, start, end)))
        except Exception:
            pipe.send(("error", traceback.format_exc()))
    conn.close()
    for client in _CLIENTS.values():
        client.close()


@dataclass
class RunResult:
    jobs: int
    seconds: float
    per_worker: list[int]

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


class Pool:
    """A fixed set of worker processes, each with its own connection."""

    def __init__(self, url: str, size: int):
        ctx = mp.get_context("spawn")
        self._go = ctx.Event()
        self._broken = False
        self._workers = []
        for index in range(size):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_worker_main, args=(index, url, child, self._go),
                                  name=f"bench-worker-{index}", daemon=True)
            process.start()
            self._workers.append((process, parent))
        for _, pipe in self._workers:
            self._expect(pipe, "up")

    def _expect(self, pipe, kind: str):
        if not pipe.poll(RESULT_TIMEOUT):
            self._broken = True
            raise RuntimeError(f"a bench worker did not answer ({kind}) within {RESULT_TIMEOUT:.0f}s")
        got, value = pipe.recv()
        if got == "error":
            self._broken = True
            raise RuntimeError("a bench worker failed:\n" + value)
        if got != kind:
            raise RuntimeError(f"a bench worker said {got!r}, expected {kind!r}")
        return value

    def run(self, workers: int, kind: str, **kwargs: Any) -> RunResult:
        """Run task `kind` on the first `workers` workers at once."""
        active = self._workers[:workers]
        self._go.clear()
        for _, pipe in active:
            pipe.send((kind, dict(kwargs)))
        for _, pipe in active:
            self._expect(pipe, "ready")
        self._go.set()
        results = [self._expect(pipe, "done") for _, pipe in active]
        self._go.clear()
        start = min(r[1] for r in results)
        end = max(r[2] for r in results)
        return RunResult(jobs=sum(r[0] for r in results), seconds=end - start,
                         per_worker=[r[0] for r in results])

    @property
    def pids(self) -> list[int]:
        return [process.pid for process, _ in self._workers if process.is_alive()]

    def close(self) -> None:
        if self._broken:  # some workers may be stuck mid-task: stop them
            for process, _ in self._workers:
                process.terminate()
        for process, pipe in self._workers:
            try:
                pipe.send(None)
            except (BrokenPipeError, OSError):
                pass
        for process, _ in self._workers:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
