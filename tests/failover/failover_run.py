"""The failover run (issue 20, ``make test-failover``): a primary and a
streaming standby (``scripts/pg-failover-cluster``), worker processes and a
producer connected through the multi-host URL, and while they drain
thousands of jobs (checkpoints, retries, dependencies, schedules ticking)
the primary is killed at random points (``pg_ctl stop -m immediate`` and
SIGKILL of the postmaster, in turn), the standby promoted with ``pg_ctl
promote`` and a new standby made from the new primary.

Afterwards the database and the records of the producer and of the workers
(``tests/hosts/host_worker.py``'s journals) are audited: the multi-host
run's checks (``tests/hosts/audit.py``: nothing accepted on a stale fence,
no job lost or completed twice, every claim in ``fenceq.attempts``) and
this run's own: every acknowledged submission and completion is there, no
claim token in two claims, every dependency join released once, one job per
schedule occurrence.

With ``--sync off`` the standby is asynchronous: what that loses is counted
and reported, not failed (docs/dba.md, "Running with a standby").
``auto_failover_run.py`` runs the same drain and audit on a pg_auto_failover
formation.

    .venv/bin/python tests/failover/failover_run.py [--sync on|off] [--failovers 3 --jobs 3000 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "hosts"))

import fenceq  # noqa: E402
from audit import CHECKS, EFFECTS_TABLE, Database, Journals, audit  # noqa: E402
from fenceq.errors import PersistenceFailed  # noqa: E402

CLUSTER = ROOT / "scripts" / "pg-failover-cluster"
QUEUE = "hosts"          # host_worker.py's queue
SCHEDULES = ("every-minute-a", "every-minute-b")
# The first of the run's two ports (the primary's, at the start); the small
# tests' cluster takes the two after (conftest.py).
BASE_PORT = int(os.environ.get("FENCEQ_FAILOVER_PG_PORT", "54406"))
PATIENCE = 150.0         # seconds: bounds a wait for what must happen; never a measurement
OWN_CHECKS = ("acknowledged_submission_missing", "acknowledged_completion_missing", "claim_token_reused",
              "join_released_wrongly", "schedule_occurrence_not_one_job")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class RunFailed(Exception):
    pass


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = PATIENCE, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class ClusterScript:
    """A cluster's script run with its options: each command's last line of
    output, or RunFailed with its error."""

    def __init__(self, *argv: str):
        self.argv = list(argv)

    def _run(self, *command: str) -> str:
        done = subprocess.run(self.argv + list(command), capture_output=True, text=True)
        if done.returncode != 0:
            raise RunFailed(f"{Path(self.argv[0]).name} {' '.join(command)}: {done.stderr.strip()}")
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""

    def stop(self) -> None:
        self._run("stop")

    def primary_url(self) -> str:
        """The URL of the node that is primary now, alone."""
        return f"postgresql://postgres@127.0.0.1:{self._run('primary')}/postgres"


class Cluster(ClusterScript):
    """``scripts/pg-failover-cluster`` on two ports of its own."""

    def __init__(self, port: int, sync: str):
        super().__init__(str(CLUSTER), "--port", str(port), "--sync", sync)
        self.url = self._run("url")

    def start(self) -> None:
        self._run("start")

    def kill(self, mode: str, node: int | None = None) -> str:
        return self._run("kill", mode, *([] if node is None else [str(node)]))

    def promote(self) -> str:
        return self._run("promote")

    def rebuild(self) -> str:
        return self._run("rebuild")

    def standby(self) -> str:
        """The port of the node that is a standby now."""
        return self._run("standby")


class Reader:
    """The run's own reads, on whichever node is primary (reconnecting)."""

    def __init__(self, url: str):
        self.url = url
        self._connection: psycopg.Connection | None = None

    def rows(self, sql: str, params: Any = None) -> list[tuple]:
        while True:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = psycopg.connect(self.url, autocommit=True)
                return self._connection.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                time.sleep(0.1)

    def connection(self) -> psycopg.Connection:
        self.rows("SELECT 1")
        assert self._connection is not None
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


class Producer:
    """Submits rounds of ten jobs (five ``steps``, two ``flaky``, two
    parents and their ``join``), each with a submission id, re-sent unchanged
    while its outcome is unknown; keeps a backlog of about two jobs per
    worker slot, and submits no more than ``allowed`` (raised by the run
    after each failover, so that every failover falls in a drain).
    ``acknowledged``: submission id -> job id, as answered."""

    def __init__(self, url: str, jobs: int, backlog: int, reader: Reader):
        self.url, self.jobs, self.backlog, self.reader = url, jobs, backlog, reader
        self.allowed = jobs
        self.acknowledged: dict[str, str] = {}
        self.joins: dict[str, list[str]] = {}   # join job -> its parents
        self.resent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _submit(self, client: fenceq.Client, submission_id: str, task: str, **options: Any) -> str:
        delay = 0.05
        while True:
            try:
                job_id = client.submit(QUEUE, task, {"steps": 2, "step_seconds": 0, "finish_seconds": 0},
                                       submission_id=submission_id, **options)
                self.acknowledged[submission_id] = job_id
                return job_id
            except PersistenceFailed:
                self.resent += 1
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _run(self) -> None:
        client = None
        while client is None:
            with contextlib.suppress(PersistenceFailed):
                client = fenceq.connect(self.url)
        rounds = 0
        with client:
            while len(self.acknowledged) < self.jobs and not self._stop.is_set():
                pending = self.reader.rows("SELECT count(*) FROM fenceq.jobs WHERE status = 'pending'")[0][0]
                if pending >= self.backlog or len(self.acknowledged) >= self.allowed:
                    self._stop.wait(0.05)
                    continue
                name = f"r{rounds}"
                for i in range(5):
                    self._submit(client, f"{name}-steps{i}", "steps")
                for i in range(2):
                    self._submit(client, f"{name}-flaky{i}", "flaky")
                parents = [self._submit(client, f"{name}-parent{i}", "steps") for i in range(2)]
                self.joins[self._submit(client, f"{name}-join", "join", depends_on=parents)] = parents
                rounds += 1

    def stop(self) -> None:
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(30)
        self.reader.close()


class WorkerProcess:
    def __init__(self, name: str, directory: Path):
        self.name, self.directory = name, directory
        self.process: subprocess.Popen | None = None

    def start(self, url: str, concurrency: int, lease: float) -> None:
        argv = [sys.executable, str(HERE / "failover_worker.py"), "--url", url, "--owner", self.name,
                "--concurrency", str(concurrency), "--lease", str(lease),
                "--effects", str(self.directory / f"effects-{self.name}.jsonl"),
                "--calls", str(self.directory / f"calls-{self.name}.jsonl")]
        with open(self.directory / f"worker-{self.name}.log", "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def journals(self) -> Journals:
        return Journals.load(self.directory, self.name)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the worker drains), SIGKILL if it does not end."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode


class Run:
    # The ways a failover comes about, in turn (_switch).
    KINDS: tuple[str, ...] = ("immediate", "sigkill")

    def __init__(self, options: argparse.Namespace):
        self.options = options
        self.directory = Path(options.dir)
        self.cluster = self._cluster()
        self.reader = Reader(self.cluster.url)
        self.workers = [WorkerProcess(f"w{i}", self.directory) for i in range(1, options.workers + 1)]
        self.producer = Producer(self.cluster.url, options.jobs,
                                 2 * options.workers * options.concurrency, Reader(self.cluster.url))
        self.failovers: list[dict] = []

    def _cluster(self) -> Any:
        return Cluster(self.options.port, self.options.sync)

    def run(self) -> dict:
        started = time.monotonic()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self.cluster.start()
        log(f"cluster up ({'synchronous' if self.options.sync == 'on' else 'asynchronous'} standby): "
            f"{self.cluster.url}")
        self._install()
        for worker in self.workers:
            worker.start(self.cluster.url, self.options.concurrency, self.options.lease)
        tranche = self.options.jobs // (self.options.failovers + 1)
        self.producer.allowed = tranche
        self.producer.thread.start()
        for number in range(self.options.failovers):
            # Counted from now: an asynchronous standby's failover may have lost completions.
            self._failover(self.KINDS[number % len(self.KINDS)],
                           self._completed() + random.uniform(0.3, 0.8) * tranche)
            self.producer.allowed = (number + 2) * tranche
        self.producer.allowed = self.options.jobs
        wait_for(lambda: not self.producer.thread.is_alive() and self._settled() and self._ticked(),
                 "the drain to finish (and each schedule to tick once)", interval=0.5)
        log("drain finished; stopping the workers")
        exits = {worker.name: worker.stop() for worker in self.workers}
        return self._summary(exits, time.monotonic() - started)

    def _install(self) -> None:
        # fenceq migrate (yoyo) takes one host: the primary's
        primary = self.cluster.primary_url()
        subprocess.run([str(Path(sys.executable).parent / "fenceq"), "migrate", "--url", primary],
                       check=True, stdout=subprocess.DEVNULL)
        with fenceq.connect(self.cluster.url) as client:
            client.create_queue(QUEUE, lease=timedelta(seconds=self.options.lease), max_attempts=100,
                                backoff_base=timedelta(0), backoff_max=timedelta(0))
            for schedule in SCHEDULES:
                client.set_schedule(schedule, QUEUE, "tick", "* * * * *")
        # The multi-host audit counts the rows of ctx.transaction() handlers;
        # this run's handlers write none, so the table stays empty.
        with psycopg.connect(primary, autocommit=True) as connection:
            connection.execute(EFFECTS_TABLE)
        log(f"fenceq migrated, queue {QUEUE!r} (lease {self.options.lease:g}s), schedules {', '.join(SCHEDULES)}")

    def _completed(self) -> int:
        return self.reader.rows("SELECT count(*) FROM fenceq.jobs WHERE status = 'completed'")[0][0]

    def _settled(self) -> bool:
        return not self.reader.rows("SELECT 1 FROM fenceq.jobs WHERE status IN ('pending', 'claimed') LIMIT 1")

    def _ticked(self) -> bool:
        made = self.reader.rows("SELECT count(*) FROM fenceq.schedules WHERE last_job_id IS NOT NULL")[0][0]
        return made == len(SCHEDULES)

    def _failover(self, mode: str, completed: float) -> None:
        """Once ``completed`` jobs are (a random point of a tranche's drain;
        or, should a failover have lost completions, once the tranche is
        drained): kill the primary, promote the standby, make a new standby
        from it."""
        def submitted() -> bool:
            return len(self.producer.acknowledged) >= min(self.producer.allowed, self.options.jobs)
        wait_for(lambda: self._completed() >= completed or (submitted() and self._settled()),
                 "jobs to complete before the next failover")
        claimed = self.reader.rows("SELECT count(*) FROM fenceq.jobs WHERE status = 'claimed'")[0][0]
        sender = self._stall_replication()
        behind, primary = self.reader.rows(
            "SELECT coalesce(sum(pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)), 0),"
            " current_setting('port')::integer FROM pg_stat_replication")[0]
        killed_at = time.time()
        if sender is not None:
            os.kill(sender, signal.SIGKILL)   # what it had not sent dies with the primary
        switched = self._switch(mode, primary)
        promoted_at, rebuilt_at = switched.pop("promoted_at"), switched.pop("rebuilt_at")
        self.failovers.append({"mode": mode, **switched, "killed_at": killed_at,
                               "claimed_when_killed": claimed, "standby_behind_bytes": int(behind),
                               "promote_seconds": round(promoted_at - killed_at, 2),
                               "standby_rebuilt_seconds": round(rebuilt_at - killed_at, 2)})
        log(f"failover {len(self.failovers)} ({mode}): {switched['old_primary']} down with {claimed} jobs claimed, "
            f"{switched['new_primary']} promoted after {promoted_at - killed_at:.2f}s, "
            f"new standby after {rebuilt_at - killed_at:.2f}s")

    def _switch(self, mode: str, primary: int) -> dict:
        """Kill the primary (``mode``), promote the standby, make a new
        standby from it. ``dead_at``: from then on the old primary accepted
        nothing."""
        old = self.cluster.kill(mode, primary)
        dead_at = time.time()
        new = self.cluster.promote()
        promoted_at = time.time()
        self.cluster.rebuild()
        return {"old_primary": old, "new_primary": new, "dead_at": dead_at, "promoted_at": promoted_at,
                "rebuilt_at": time.time()}

    def _stall_replication(self) -> int | None:
        """With ``--stall``: stop the primary's WAL sender (SIGSTOP, by its
        pid) for that long, as a slow link would, so that the primary dies
        ahead of its standby; the sender's pid, to end it with the primary."""
        if not self.options.stall:
            return None
        pid = self.reader.rows("SELECT pid FROM pg_stat_replication")[0][0]
        os.kill(pid, signal.SIGSTOP)
        time.sleep(self.options.stall)
        return pid

    # The audit -------------------------------------------------------------------------

    def _summary(self, exits: dict[str, int | None], duration: float) -> dict:
        journals = [worker.journals() for worker in self.workers]
        connection = self.reader.connection()
        db = Database.read(connection)
        acknowledged_jobs = list(self.producer.acknowledged.values())
        scheduled = [job_id for (job_id,) in connection.execute(
            "SELECT job_id FROM fenceq._submissions WHERE submission_id LIKE 'fenceq:schedule:%'")]
        report = audit(db, journals, acknowledged_jobs + scheduled, self.options.lease)
        self._own_checks(connection, db, journals, report)
        recover = self._time_to_recover(journals)
        events = Counter(e.get("event") for j in journals for e in j.events)
        summary = {
            "standby": "synchronous" if self.options.sync == "on" else "asynchronous",
            "failovers": len(self.failovers),
            "jobs": len(db.jobs),
            "jobs_acknowledged_to_the_producer": len(acknowledged_jobs),
            "schedule_jobs": len(scheduled),
            "workers": len(self.workers),
            "concurrency_per_worker": self.options.concurrency,
            "lease_seconds": self.options.lease,
            "duration_seconds": round(duration, 1),
            "failover_details": [{k: v for k, v in f.items() if k not in ("killed_at", "dead_at")} | {"first_completion_seconds": r}
                                 for f, r in zip(self.failovers, recover)],
            "seconds_kill_to_first_completion": {"max": max(recover, default=None),
                                                 "median": sorted(recover)[len(recover) // 2] if recover else None},
            "unknown_outcomes_resolved": {"worker_writes_resent": events["write_uncertain"],
                                          "worker_claims_uncertain": events["claim_uncertain"],
                                          "producer_submissions_resent": self.producer.resent},
            "refused_after_takeover": self._refused_after_takeover(db, journals),
            "server_switches": events["server_switched"],
            "listener_reconnects": events["listener_reconnected"],
            **report.figures,
            "worker_exits": exits,
            "violations": report.counts() | {check: len(report.violations.get(check, [])) for check in OWN_CHECKS},
            "violation_examples": {check: found[:3] for check, found in report.violations.items() if found},
        }
        failures = [f"{check}: {count}" for check, count in summary["violations"].items() if count]
        failures += [f"{name} exited with {code}" for name, code in exits.items() if code != 0]
        if len(self.failovers) < self.options.failovers:
            failures.append("fewer failovers than asked for")
        if self.options.sync == "on":
            summary["failures"] = failures
        else:   # measured, not failed: what an asynchronous standby loses
            summary["failures"] = [f for f in failures if "exited" in f or "failovers" in f]
        summary["passed"] = not summary["failures"]
        return summary

    def _own_checks(self, connection: psycopg.Connection, db: Database, journals: list[Journals],
                    report: Any) -> None:
        submissions = dict(connection.execute("SELECT submission_id, job_id FROM fenceq._submissions"))
        for submission_id, job_id in self.producer.acknowledged.items():
            if submissions.get(submission_id) != job_id or job_id not in db.jobs:
                report.flag("acknowledged_submission_missing", f"{submission_id} -> {job_id}")
        for journal in journals:
            for _call, kind, (job_id, gen, owner), accepted in journal.writes():
                job = db.jobs.get(job_id)
                if kind == "completions" and accepted and (
                        job is None or (job["status"], job["generation"], job["owner"]) != ("completed", gen, owner)):
                    report.flag("acknowledged_completion_missing", f"{journal.host}: {job_id} gen {gen}")
        # Every claim, by token (the ledger's rows) or by a claim_jobs call
        # (version 8: the jobs' call_claims): one per (job, generation).
        for (reused,) in connection.execute(
                "SELECT count(*) - count(DISTINCT (job_id, generation)) FROM fenceq.attempts"):
            if reused:
                report.flag("claim_token_reused", f"{reused} claims share a (job, generation)")
        blocked = dict(connection.execute("SELECT job_id, blocked_by FROM fenceq._jobs WHERE blocked_by IS NOT NULL"))
        unsatisfied = {job for (job,) in connection.execute(
            "SELECT job_id FROM fenceq._dependencies WHERE NOT satisfied")}
        for join, parents in self.producer.joins.items():
            first = db.attempts.get((join, 1))
            parent_finished = [db.jobs.get(p, {}).get("finished_at") for p in parents]
            if (blocked.get(join, 0) != 0 or join in unsatisfied or first is None or None in parent_finished
                    or first["claimed_at"] < max(parent_finished)):
                report.flag("join_released_wrongly", f"{join}: blocked_by {blocked.get(join)}, first claim "
                            f"{first and first['claimed_at']}, parents finished {parent_finished}")
        # tick submits an occurrence under the submission id fenceq:schedule:<schedule>:<occurrence>
        per_job = connection.execute(
            "SELECT j.job_id, count(s.submission_id) FROM fenceq._jobs AS j LEFT JOIN fenceq._submissions AS s"
            " ON s.job_id = j.job_id AND s.submission_id LIKE 'fenceq:schedule:%' WHERE j.task = 'tick'"
            " GROUP BY j.job_id").fetchall()
        occurrences = connection.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM fenceq._submissions"
            " WHERE submission_id LIKE 'fenceq:schedule:%'").fetchone()
        for job_id, count in per_job:
            if count != 1:
                report.flag("schedule_occurrence_not_one_job", f"{job_id}: {count} occurrences")
        if occurrences[0] != occurrences[1] or occurrences[0] != len(per_job):
            report.flag("schedule_occurrence_not_one_job", f"{occurrences[0]} occurrences, {occurrences[1]} "
                        f"jobs of them, {len(per_job)} tick jobs")

    def _time_to_recover(self, journals: list[Journals]) -> list[float]:
        """Per failover: seconds from the kill to the first completion the
        new primary acknowledged (sent once the old one was dead)."""
        answered = sorted((call["t0"], call["t1"]) for j in journals for call, kind, _fence, ok in j.writes()
                          if kind == "completions" and ok)
        out = []
        for failover in self.failovers:
            first = min((t1 for t0, t1 in answered if t0 >= failover["dead_at"]), default=None)
            if first is not None:
                out.append(round(first - failover["killed_at"], 2))
        return out

    @staticmethod
    def _refused_after_takeover(db: Database, journals: list[Journals]) -> dict[str, int]:
        """Fenced writes refused because another claim had taken the job over."""
        refused: Counter = Counter()
        for journal in journals:
            for _call, kind, (job_id, gen, _owner), accepted in journal.writes():
                if not accepted and (job_id, gen + 1) in db.attempts:
                    refused[kind] += 1
        return {kind: refused[kind] for kind in ("heartbeats", "checkpoints", "completions", "failures")}

    def close(self) -> None:
        self.producer.stop()
        for worker in self.workers:
            with contextlib.suppress(Exception):
                worker.stop(timeout=20)
        self.reader.close()
        with contextlib.suppress(Exception):
            self.cluster.stop()


def markdown(summary: dict) -> str:
    rows = [("standby", summary["standby"]), ("failovers", summary["failovers"]),
            ("jobs (of them from schedules)", f"{summary['jobs']} ({summary['schedule_jobs']})"),
            ("worker processes × jobs in flight", f"{summary['workers']} × {summary['concurrency_per_worker']}"),
            ("seconds from kill to first completion on the new primary (median, max)",
             f"{summary['seconds_kill_to_first_completion']['median']}, "
             f"{summary['seconds_kill_to_first_completion']['max']}"),
            ("unknown outcomes resolved (worker writes re-sent, claims uncertain, submissions re-sent)",
             ", ".join(str(v) for v in summary["unknown_outcomes_resolved"].values())),
            ("claims recovered by nonce", summary["claims_recovered_by_nonce"]),
            ("acknowledgements recovered from the job row", summary["acks_recovered"]),
            ("writes refused after takeover (heartbeats, checkpoints, completions, failures)",
             ", ".join(str(v) for v in summary["refused_after_takeover"].values())),
            ("server switches seen by the workers", summary["server_switches"]),
            ("standby bytes behind at each kill", ", ".join(str(f["standby_behind_bytes"])
                                                          for f in summary["failover_details"])),
            ("run seconds", summary["duration_seconds"]),
            ("violations", ", ".join(f"{k} {v}" for k, v in summary["violations"].items()))]
    return "| | |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)


def parse(argv: list[str] | None, prog: str = "failover_run", description: str = __doc__,
          **defaults: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=BASE_PORT,
                        help="the first port: the primary's, the standby's one up (auto_failover_run: the "
                        "monitor's, the data nodes' the two after)")
    parser.add_argument("--sync", choices=("on", "off"), default="on")
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000, help="jobs the producer submits (schedules add theirs)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=4.0)
    parser.add_argument("--stall", type=float, default=0.0,
                        help="seconds the primary's WAL sender is stopped before each kill (--sync off: "
                        "what a lagging asynchronous standby loses)")
    parser.add_argument("--dir", default="/tmp/fenceq-failover-run", help="the journals")
    parser.add_argument("--summary", help="also write the summary (JSON) here")
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    return execute(Run(options), options)


def execute(run: Run, options: argparse.Namespace) -> int:
    """Run, print and keep the summary, clean up; 0 when it passed."""

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)
    summary: dict | None = None
    try:
        summary = run.run()
    except (RunFailed, KeyboardInterrupt) as error:
        log(f"FAILED: {type(error).__name__}: {error}")
    except Exception:  # noqa: BLE001 - a bug in the run: report it, then clean up
        log(f"FAILED:\n{traceback.format_exc()}")
    finally:
        run.close()
    if summary is None:
        return 1
    print(json.dumps(summary, indent=2, default=str))
    print(markdown(summary))
    if options.summary:
        Path(options.summary).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    for failure in summary["failures"]:
        log(f"FAILED: {failure}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
