"""Fixtures for the worker tests: a queue, worker processes (``fenceq
worker`` run as a real subprocess, logging JSON to a file), and in-process
workers.

No test measures time. Tests wait for events or database state, with
timeouts that only bound a failure (``PATIENCE``), and a lease short enough
to lapse is given only to the worker whose lease a test means to lose
(``SHORT_LEASE``): the queue's own lease is long, so that a loaded machine
pausing a worker never hands a job on behind a test's back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fq_worker_apps  # noqa: E402

LEASE = timedelta(seconds=60)
SHORT_LEASE = 1.0  # seconds
PATIENCE = 60.0    # seconds: how long a test waits for what must happen before it fails


def wait_for(predicate: Callable[[], Any], timeout: float = PATIENCE, what: str = "condition",
             interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def async_wait_for(predicate: Callable[[], Any], timeout: float = PATIENCE, what: str = "condition",
                         interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@pytest.fixture
def work_queue(db) -> str:
    with db.connect() as client:
        client.create_queue("work", lease=LEASE, max_attempts=3, backoff_base=timedelta(0),
                            backoff_max=timedelta(0))
    return "work"


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return tmp_path / "trace.jsonl"


def read_trace(path: Path) -> list[dict]:
    return fq_worker_apps.read_trace(path)


class WorkerProcess:
    """One ``fenceq worker`` process."""

    def __init__(self, name: str, process: subprocess.Popen, log: Path):
        self.name, self.process, self.log = name, process, log

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> list[dict]:
        out = []
        try:
            text = self.log.read_text(encoding="utf-8")
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def find(self, event: str, **match: Any) -> list[dict]:
        return [e for e in self.events()
                if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]

    def wait_event(self, event: str, timeout: float = PATIENCE, **match: Any) -> dict:
        return wait_for(lambda: (self.find(event, **match) or [None])[0], timeout,
                        f"{self.name}: log event {event} {match}\n--- log:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def freeze(self, url: str) -> None:
        """SIGSTOP, making sure (on SQLite) the process holds no write lock."""
        from fenceq.demo import freeze

        freeze(self.process, url)

    def wait(self, timeout: float = PATIENCE) -> int:
        return self.process.wait(timeout)


@pytest.fixture
def spawn_worker(db, tmp_path: Path):
    """Start ``fenceq worker fq_worker_apps:app`` processes; all are killed at teardown."""
    started: list[WorkerProcess] = []

    def spawn(name: str, *extra: str, concurrency: int = 1) -> WorkerProcess:
        log = tmp_path / f"worker-{name}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
        command = [sys.executable, "-m", "fenceq.cli", "worker", "fq_worker_apps:app", "--url", db.url,
                   "--owner-id", name, "--concurrency", str(concurrency), "--log-format", "json",
                   "--log-level", "debug", "--reap-interval", "0.2s", "--poll-interval", "0.1s", *extra]
        with open(log, "wb") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env,
                                       cwd=str(tmp_path))
        worker = WorkerProcess(name, process, log)
        started.append(worker)
        worker.wait_event("worker_started")
        return worker

    yield spawn
    for worker in started:
        if worker.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGCONT)
                worker.process.kill()
            worker.process.wait(PATIENCE)


@contextlib.asynccontextmanager
async def running(worker, timeout: float = PATIENCE):
    """Run an in-process Worker for the duration of the block."""
    task = asyncio.create_task(worker.run_async())
    try:
        await async_wait_for(lambda: worker.started.is_set() or task.done(), timeout, "worker start")
        if task.done():
            task.result()
        yield worker
    finally:
        worker.stop()
        try:
            await asyncio.wait_for(task, timeout)
        except asyncio.TimeoutError:
            worker.stop(now=True)
            await asyncio.wait_for(task, 5)
