"""`fenceq demo`: a guided tour of fences at work, with real worker processes.

It declares a queue, submits a batch and a small graph of jobs that wait
for each other, runs two `fenceq worker` processes,
kills one in the middle of a job (its lease lapses; the other takes the job
over at a higher generation and skips the step already checkpointed),
freezes another past its lease (when it wakes, its writes are refused),
freezes one inside a ``ctx.transaction()`` money transfer (when it wakes,
the whole transfer rolls back; the new owner's lands once),
replays a duplicate submission to its original id, cancels a running job,
and replays a dead letter. It ends with a summary, and exits 1 if any part
of the story did not happen.

Database: the client's URL rules (--url, else $FENCEQ_DATABASE_URL, else the
embedded SQLite file ./fenceq.db); the demo migrates it and uses queue
"demo" (or "demo-<run>" if a "demo" queue with other settings exists).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from .backends import backend_of, write_lock_held
from .backends.migrations import migrate
from .client import connect, resolve_url
from .errors import FenceqError, SubmissionConflict

LEASE = 2.0


class StepFailed(Exception):
    pass


@dataclass
class WorkerProc:
    name: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> list[dict]:
        out = []
        try:
            lines = self.log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return out
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def find(self, event: str, **match: Any) -> list[dict]:
        return [e for e in self.events() if e.get("event") == event
                and all(e.get(k) == v for k, v in match.items())]


@dataclass
class Story:
    quiet: bool
    started: float = field(default_factory=time.monotonic)
    results: list[tuple[str, bool, str]] = field(default_factory=list)
    step_no: int = 0

    def say(self, text: str = "") -> None:
        if not self.quiet:
            print(text, flush=True)

    def step(self, title: str) -> None:
        self.step_no += 1
        self.say()
        self.say(f"[{self.step_no}] {title}")

    def at(self, text: str) -> None:
        self.say(f"    +{time.monotonic() - self.started:6.2f}s  {text}")

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.results.append((name, ok, detail))
        if not ok:
            self.say(f"    !! {name}: {detail}")


def freeze(process: subprocess.Popen, url: str) -> None:
    """SIGSTOP a worker process. On SQLite, a process frozen inside a write
    transaction would keep the file's write lock and stall every other
    process: probe with BEGIN IMMEDIATE and, if the lock is held, let the
    process run an instant to finish its transaction, then freeze it again."""
    os.kill(process.pid, signal.SIGSTOP)
    for _ in range(50):
        if not write_lock_held(url):
            return
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.005)
        os.kill(process.pid, signal.SIGSTOP)


def _wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Demo:
    def __init__(self, url: str, folder: Path, quiet: bool):
        self.url = url
        self.folder = folder
        self.story = Story(quiet)
        self.client = connect(url)
        self.queue = "demo"
        self.run_id = secrets.token_hex(3)  # submission ids are per run, so a rerun starts afresh
        self.events_path = folder / "events.jsonl"
        self.workers: dict[str, WorkerProc] = {}
        self.job_ids: list[str] = []

    # Workers ----------------------------------------------------------------------

    def start_worker(self, name: str) -> WorkerProc:
        log = self.folder / f"{name}.log"
        command = [sys.executable, "-m", "fenceq.cli", "worker", "fenceq._demo_tasks:app",
                   "--url", self.url, "--queue", self.queue, "--concurrency", "2", "--owner-id", name,
                   "--record-pid", "--log-format", "json", "--reap-interval", "0.3s",
                   "--poll-interval", "0.2s", "--drain-timeout", "3s"]
        with open(log, "wb") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=os.getcwd(),
                                       start_new_session=True)
        worker = WorkerProc(name, process, log)
        self.workers[name] = worker
        _wait(lambda: worker.find("worker_started") or process.poll() is not None, 20, f"{name} to start")
        if process.poll() is not None:
            raise StepFailed(f"{name} exited at start:\n" + log.read_text(encoding="utf-8")[-2000:])
        return worker

    def holder(self, job_id: str) -> WorkerProc | None:
        job = self.client.get_job(job_id)
        if job is None or job.status != "claimed" or job.owner_id not in self.workers:
            return None
        return self.workers[job.owner_id]

    def notes(self, event: str, **match: Any) -> list[dict]:
        try:
            lines = self.events_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.strip()]
        return [e for e in out if e["event"] == event and all(e.get(k) == v for k, v in match.items())]

    def wait_status(self, job_id: str, status: str, timeout: float = 20.0) -> Any:
        return _wait(lambda: (j := self.client.get_job(job_id)) is not None and j.status == status and j,
                     timeout, f"job to become {status}")

    def sid(self, name: str) -> str:
        return f"{name}.{self.run_id}"

    def submit(self, task: str, payload: Any, **options: Any) -> str:
        job_id = self.client.submit(self.queue, task, payload, **options)
        self.job_ids.append(job_id)
        return job_id

    def payload(self, **extra: Any) -> dict:
        return {"events": str(self.events_path), **extra}

    # The story --------------------------------------------------------------------

    def run(self) -> int:
        s = self.story
        kind = "embedded SQLite, no server" if backend_of(self.url) == "sqlite" else "PostgreSQL"
        s.say("fenceq demo: fenced, owned jobs in the database")
        s.say(f"database: {self._shown_url()} ({kind})")
        steps = [self.step_setup, self.step_batch, self.step_graph, self.step_crash, self.step_freeze,
                 self.step_transfer, self.step_duplicate, self.step_cancel, self.step_dead_letter, self.step_shutdown]
        for step in steps:
            try:
                step()
            except (StepFailed, FenceqError, OSError) as error:
                s.check(step.__name__.removeprefix("step_"), False, str(error).splitlines()[0])
                if step in (self.step_setup,):
                    break
        return self.summary()

    def _shown_url(self) -> str:
        if self.url.startswith("sqlite"):
            return self.url
        rest = self.url.split("://", 1)[1]
        return "postgresql://…@" + rest.rsplit("@", 1)[-1] if "@" in rest else self.url

    def step_setup(self) -> None:
        s = self.story
        s.step('Declare queue "demo" and start two worker processes')
        settings = dict(lease=timedelta(seconds=LEASE), max_attempts=3, backoff_base=timedelta(0),
                        backoff_max=timedelta(0), dead_letter=True)
        try:
            self.client.create_queue(self.queue, **settings)
        except FenceqError as error:
            if error.sqlstate != "QF100":
                raise
            # A queue named "demo" exists with other settings: use a fresh name.
            self.queue = f"demo-{self.run_id}"
            self.client.create_queue(self.queue, **settings)
        s.at(f"queue {self.queue}: lease {LEASE:.0f}s, 3 attempts, dead letters kept")
        for name in ("worker-A", "worker-B"):
            w = self.start_worker(name)
            s.at(f"{name} running as pid {w.pid} (fenceq worker --concurrency 2)")
        s.check("setup", True, "queue declared, two workers up")

    def step_batch(self) -> None:
        s = self.story
        s.step("Submit a batch of 8 jobs in one call (each with a submission id)")
        requests = [{"task": "thumbnail", "payload": {"image": f"photo-{i}"}, "submission_id": self.sid(f"thumb-{i}")}
                    for i in range(1, 9)]
        self.batch_ids = self.client.submit_batch(self.queue, requests)
        self.job_ids += self.batch_ids
        s.at(f"submit_batch -> 8 job ids ({self.batch_ids[0][:8]}…, …)")
        def batch_done() -> list | None:
            jobs = [self.client.get_job(i) for i in self.batch_ids]
            return jobs if all(j.status == "completed" for j in jobs) else None

        jobs = _wait(batch_done, 20, "the batch to complete")
        by: dict[str, int] = {}
        for job in jobs:
            by[job.owner_id] = by.get(job.owner_id, 0) + 1
        s.at("all 8 completed: " + ", ".join(f"{k} did {v}" for k, v in sorted(by.items())))
        s.check("batch", True, f"8 jobs completed ({', '.join(f'{k}: {v}' for k, v in sorted(by.items()))})")

    def step_graph(self) -> None:
        s = self.story
        s.step("A small graph: fetch, then resize and caption side by side, then publish")
        ids = {name: f"{name}-{self.run_id}" for name in ("fetch", "resize", "caption", "publish")}
        graph = [{"task": "stage", "payload": self.payload(stage=name), "job_id": ids[name],
                  "submission_id": self.sid(f"graph-{name}"), "depends_on": [ids[d] for d in deps]}
                 for name, deps in (("publish", ("resize", "caption")), ("resize", ("fetch",)),
                                    ("caption", ("fetch",)), ("fetch", ()))]
        submitted = self.client.submit_batch(self.queue, graph)
        self.job_ids += submitted
        waiting = {name: self.client.get_job(job_id).blocked_by for name, job_id in ids.items()}
        s.at("submit_batch with depends_on -> waiting on: "
             + ", ".join(f"{name} {n}" for name, n in waiting.items()))
        def graph_done() -> dict | None:
            jobs = {name: self.client.get_job(job_id) for name, job_id in ids.items()}
            return jobs if all(j.status == "completed" for j in jobs.values()) else None

        done = _wait(graph_done, 20, "the graph to complete")
        started = {name: self.client.attempts(job_id)[0].claimed_at for name, job_id in ids.items()}
        order = sorted(ids, key=lambda name: started[name])
        s.at("claimed in the order " + " -> ".join(order) + " ("
             + ", ".join(f"{name} by {done[name].owner_id}" for name in order) + ")")
        in_order = (started["resize"] >= done["fetch"].finished_at and started["caption"] >= done["fetch"].finished_at
                    and started["publish"] >= max(done["resize"].finished_at, done["caption"].finished_at))
        replayed = self.client.submit_batch(self.queue, graph) == submitted
        s.at("the same graph again under its submission ids -> the same job ids, nothing new")
        ok = in_order and replayed and waiting == {"fetch": 0, "resize": 1, "caption": 1, "publish": 2}
        s.check("graph in order", ok, "each stage was claimed only after the stages it waits on completed; "
                "the replayed graph answered with the same ids")

    def step_crash(self) -> None:
        s = self.story
        s.step("Crash: kill a worker in the middle of a job (SIGKILL)")
        job_id = self.submit("report", self.payload(step_seconds=0.8),
                                    submission_id=self.sid("report-1"))
        self.report_id = job_id
        s.at(f"submitted report job {job_id[:8]}… (3 checkpointed steps: fetch, render, upload)")
        _wait(lambda: self.notes("checkpoint", job_id=job_id, step="fetch"), 15, "step 'fetch' to be recorded")
        victim = self.holder(job_id)
        if victim is None:
            raise StepFailed("the report job finished before it could be interrupted")
        before = self.client.get_job(job_id)
        os.kill(victim.pid, signal.SIGKILL)
        victim.process.wait(10)
        killed_at = time.monotonic()
        s.at(f"{victim.name} recorded checkpoint 'fetch', then was killed (pid {victim.pid}) while holding "
             f"the job at generation {before.generation}")
        expires = before.lease_expires_at.astimezone(timezone.utc)
        s.at(f"its lease runs until {expires:%H:%M:%S}.{expires.microsecond // 1000:03d} UTC "
             "and nobody renews it")
        job = _wait(lambda: (j := self.client.get_job(job_id)).generation > before.generation and j, 20,
                    "the takeover")
        s.at(f"lease lapsed; reaped; claimed again by {job.owner_id} at generation {job.generation} "
             f"({time.monotonic() - killed_at:.1f}s after the kill)")
        done = self.wait_status(job_id, "completed")
        s.at(f"completed by {done.owner_id}: ran {done.result['steps_run_here']}, "
             f"reused checkpoint {done.result['steps_from_checkpoints']}")
        claims = self.client.attempts(job_id)
        s.at("claims: " + "; ".join(f"generation {a.generation} by {a.owner_id}" for a in claims))
        ok = (done.generation == before.generation + 1 and done.owner_id != victim.name
              and done.result["steps_from_checkpoints"] == ["fetch"])
        s.check("crash takeover", ok, f"{victim.name} killed at generation {before.generation}; "
                f"{done.owner_id} took over at generation {done.generation} and completed once, "
                f"reusing the 'fetch' checkpoint")
        replacement = "worker-C"
        w = self.start_worker(replacement)
        s.at(f"a replacement, {replacement}, starts (pid {w.pid})")
        self.killed = victim.name

    def step_freeze(self) -> None:
        s = self.story
        s.step("Freeze: pause a worker past its lease (SIGSTOP), then wake it (SIGCONT)")
        job_id = self.submit("invoice", self.payload(number="INV-42", seconds=1.5),
                                    submission_id=self.sid("invoice-42"))
        _wait(lambda: self.notes("started", job_id=job_id), 15, "the invoice job to start")
        frozen = self.holder(job_id)
        if frozen is None:
            raise StepFailed("the invoice job finished before it could be frozen")
        time.sleep(0.2)
        freeze(frozen.process, self.url)
        s.at(f"{frozen.name} (pid {frozen.pid}) holds invoice {job_id[:8]}… at generation 1: frozen now")
        job = _wait(lambda: (j := self.client.get_job(job_id)).status == "completed" and j, 25,
                    "another worker to take over and complete the invoice")
        s.at(f"while it slept: lease lapsed, {job.owner_id} took over at generation {job.generation} "
             f"and completed it")
        os.kill(frozen.pid, signal.SIGCONT)
        s.at(f"{frozen.name} wakes up and carries on as if nothing happened")
        refused = _wait(lambda: frozen.find("complete_refused", job_id=job_id), 15,
                        f"{frozen.name}'s late completion to be refused")[0]
        told = self.notes("told", job_id=job_id, worker=frozen.name)
        cp = self.notes("checkpoint_refused", job_id=job_id, worker=frozen.name)
        if told:
            s.at("its handler is told: ctx.fence_live is false (lease gone)")
        if cp:
            s.at("its late checkpoint (sending the e-mail) is refused by the database")
        s.at(f"its late completion at generation {refused['generation']} is refused: the job stays "
             f"completed by {refused.get('current_owner')} at generation {refused.get('current_generation')}")
        after = self.client.get_job(job_id)
        ok = (after.owner_id == job.owner_id != frozen.name and after.generation == job.generation
              and after.result == job.result and bool(told) and bool(cp))
        s.check("stale writes refused", ok, f"{frozen.name}'s late checkpoint and completion (generation 1) "
                f"refused; the result of {after.owner_id} (generation {after.generation}) stands")

    def step_transfer(self) -> None:
        s = self.story
        s.step("Frozen inside a transaction: a money transfer by ctx.transaction(), frozen past its lease")
        with self.client.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS demo_accounts (id text PRIMARY KEY, balance integer NOT NULL)")
            tx.execute("CREATE TABLE IF NOT EXISTS demo_transfers (job_id text NOT NULL, generation integer NOT NULL,"
                       " worker text NOT NULL)")
            tx.execute("INSERT INTO demo_accounts VALUES ('alice', 0), ('bob', 0) ON CONFLICT DO NOTHING")
        before = self.balances()
        job_id = self.submit("transfer", self.payload(amount=25, seconds=1.0))
        _wait(lambda: self.notes("transfer_written", job_id=job_id), 15, "the transfer to write its rows")
        frozen = self.holder(job_id)
        if frozen is None:
            raise StepFailed("the transfer finished before it could be frozen")
        os.kill(frozen.pid, signal.SIGSTOP)  # inside the block: its writes are not committed
        s.at(f"{frozen.name} moved 25 from alice to bob inside its transaction, not yet committed: frozen now")
        if backend_of(self.url) == "postgres":
            _wait(lambda: len(self.client.attempts(job_id)) > 1, 25, "another worker to take the transfer over")
            s.at("its lease lapsed; another worker took the transfer over (its transaction waits for the "
                 "rows the frozen one holds)")
        else:
            # SQLite: the frozen transaction holds the write lock; nobody writes until it ends.
            lease_end = self.client.get_job(job_id).lease_expires_at
            _wait(lambda: datetime.now(timezone.utc) > lease_end, 25, "the frozen worker's lease to lapse")
            s.at("its lease lapsed (on SQLite every other writer waits for its open transaction)")
        os.kill(frozen.pid, signal.SIGCONT)
        _wait(lambda: frozen.find("lease_lost", job_id=job_id), 15, f"{frozen.name}'s completion to be refused")
        s.at(f"{frozen.name} wakes: the completion inside its transaction is refused, the whole transfer "
             "rolls back")
        done = self.wait_status(job_id, "completed", 25)
        rows = self.transfers(job_id)
        after = self.balances()
        s.at(f"{done.owner_id} completed it at generation {done.generation}; transfer rows for the job: "
             + ", ".join(f"generation {g} by {w}" for g, w in rows))
        moved = (before["alice"] - after["alice"], after["bob"] - before["bob"])
        ok = rows == [(done.generation, done.owner_id)] and done.generation > 1 and moved == (25, 25)
        s.check("frozen transfer rolled back", ok, f"{frozen.name}'s transfer (generation 1) rolled back; "
                f"25 moved once, by generation {done.generation}")

    def balances(self) -> dict[str, int]:
        with self.client.transaction() as tx:
            return dict(tx.execute("SELECT id, balance FROM demo_accounts"))

    def transfers(self, job_id: str) -> list[tuple[int, str]]:
        mark = "%s" if backend_of(self.url) == "postgres" else "?"
        with self.client.transaction() as tx:
            return [tuple(row) for row in tx.execute(
                f"SELECT generation, worker FROM demo_transfers WHERE job_id = {mark} ORDER BY generation",
                (job_id,))]

    def step_duplicate(self) -> None:
        s = self.story
        s.step("Duplicate submission: the same request again under its submission id")
        again = self.client.submit(self.queue, "thumbnail", {"image": "photo-3"},
                                   submission_id=self.sid("thumb-3"))
        s.at(f"submit({self.sid('thumb-3')}) again -> {again[:8]}… (the original job, not a new one)")
        conflict = None
        try:
            self.client.submit(self.queue, "thumbnail", {"image": "photo-999"}, submission_id=self.sid("thumb-3"))
        except SubmissionConflict as error:
            conflict = error
            s.at(f"a different request under the same id is refused: {error.sqlstate} {error.reason}")
        ok = again == self.batch_ids[2] and conflict is not None
        s.check("duplicate replayed", ok, "resubmission returned the original job id; a changed request "
                "under the same id was refused (QF201)")

    def step_cancel(self) -> None:
        s = self.story
        s.step("Cancel a running job")
        job_id = self.submit("export", self.payload())
        _wait(lambda: self.notes("started", job_id=job_id), 15, "the export job to start")
        holder = self.holder(job_id)
        answer = self.client.cancel(job_id)
        asked = time.monotonic()
        s.at(f"cancel({job_id[:8]}…) -> {answer!r} while {holder.name if holder else '?'} runs it")
        job = self.wait_status(job_id, "cancelled")
        saw = self.notes("saw_cancel", job_id=job_id)
        s.at(f"the handler saw ctx.cancelled, stopped, and the worker acknowledged: status "
             f"{job.status} ({time.monotonic() - asked:.2f}s)")
        s.check("cancel acknowledged", answer == "cancel_requested" and bool(saw),
                "cancel requested -> handler told -> acknowledge_cancel -> cancelled")

    def step_dead_letter(self) -> None:
        s = self.story
        s.step("Dead letter: a job that cannot succeed, fixed and replayed")
        flag = self.folder / "card-updated"
        job_id = self.submit("charge", self.payload(amount="19.99", fixed_flag=str(flag)))
        job = self.wait_status(job_id, "failed")
        s.at(f"charge {job_id[:8]}… failed at once, no retry: {job.last_error.splitlines()[0]}")
        letters = [d for d in self.client.dead_letters(queue=self.queue) if d.job_id == job_id]
        if not letters:
            raise StepFailed("no dead letter was written")
        s.at(f"dead letter {letters[0].dlq_id} (see: fenceq dlq list)")
        flag.write_text("yes")
        s.at("the customer updates their card; replay the dead letter (fenceq dlq replay)")
        replayed = self.client.replay_dead_letter(letters[0].dlq_id)
        done = self.wait_status(job_id, "completed")
        s.at(f"replayed to the same job id; completed by {done.owner_id} at generation {done.generation}")
        s.check("dead letter replayed", replayed == job_id and done.generation == job.generation + 1,
                "failed -> dead letter -> replay -> completed (same job id, next generation)")

    def step_shutdown(self) -> None:
        s = self.story
        s.step("Shut down: SIGTERM drains the workers (stop claiming, finish or release)")
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        codes = {}
        for worker in self.workers.values():
            try:
                codes[worker.name] = worker.process.wait(15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                codes[worker.name] = "killed"
        s.at(", ".join(f"{name} exit {code}" + (" (killed in the crash step)" if name == getattr(self, "killed", None)
                                                else "") for name, code in codes.items()))
        alive = {n: c for n, c in codes.items() if n != getattr(self, "killed", None)}
        s.check("graceful drain", all(c == 0 for c in alive.values()), "workers exited cleanly")

    def summary(self) -> int:
        s = self.story
        statuses: dict[str, int] = {}
        for job_id in dict.fromkeys(self.job_ids):
            job = self.client.get_job(job_id)
            if job is not None:
                statuses[job.status] = statuses.get(job.status, 0) + 1
        print()
        print("Summary")
        print("-------")
        width = max(len(name) for name, _, _ in s.results) if s.results else 0
        for name, ok, detail in s.results:
            print(f"  {'ok  ' if ok else 'FAIL'}  {name:<{width}}  {detail}")
        if statuses:
            print(f"  jobs in queue {self.queue}: "
                  + ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())))
        print()
        print("Every write a worker makes carries its fence (job, owner, generation, claim token):")
        print("a worker that lost its lease can no longer change the job, however late it wakes up.")
        return 0 if s.results and all(ok for _, ok, _ in s.results) else 1

    def close(self) -> None:
        for worker in self.workers.values():
            if worker.process.poll() is None:
                try:
                    os.kill(worker.pid, signal.SIGCONT)
                    worker.process.kill()
                except ProcessLookupError:
                    pass
                worker.process.wait(10)
        self.client.close()


def run_demo(url: str | None = None, keep: bool = False, quiet: bool = False) -> int:
    """The demo on ``url`` (default: $FENCEQ_DATABASE_URL, else the embedded
    SQLite file ./fenceq.db). Worker logs go to a temporary folder."""
    url = resolve_url(url)
    folder = Path(tempfile.mkdtemp(prefix="fenceq-demo-"))
    demo = None
    try:
        migrate(url)
        demo = Demo(url, folder, quiet)
        code = demo.run()
        shown = demo._shown_url()
        example = getattr(demo, "report_id", "JOB_ID")
    finally:
        if demo is not None:
            demo.close()
        if keep:
            print(f"\nkept: {folder} (the workers' JSON logs and the handlers' events)")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    flag = "" if url == resolve_url(None) else f" --url {shown if url.startswith('sqlite') else 'URL'}"
    print(f"\nlook around: fenceq stats{flag}   fenceq dlq list --include-handled{flag}   fenceq job {example}{flag}")
    return code
