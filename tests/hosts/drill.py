"""The multi-host fault drill (issue 13 §3): PostgreSQL on a database host,
worker hosts on their own namespaces, a drain of thousands of jobs, and
three faults on the links while it runs:

1. cut: one worker host's switch port goes down while it is mid-job, until
   every job it held was taken over by another host at a higher
   generation; then the port comes back, and its late heartbeats,
   checkpoints and completions must all be refused;
2. impair: latency and loss on another worker host's link, and short
   spells in which its requests arrive and the answers are lost (a
   userspace relay: the kernel has no tc netem), until some of its claims'
   acknowledgements were lost and the claims recovered by nonce;
3. partition: the database host's port goes down until every lease in
   flight has lapsed (at database time), then comes back.

Then the drain runs out, the workers stop, and ``audit.py`` checks the
database and the journals. Everything is started by this process and
removed by it, also on failure or interruption. ``scripts/test-hosts`` and
``tests/hosts/test_hosts.py`` run ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import psycopg

import fenceq
import netlab
from audit import CHECKS, EFFECTS_TABLE, RECOVERIES, Database, Journals, audit, late_writes

HERE = Path(__file__).resolve().parent
PG_BIN = Path(os.environ.get("FENCEQ_PG_BINDIR", "/usr/lib/postgresql/15/bin"))
PG_PORT = 5432            # inside the database host's own namespace
QUEUE = "hosts"
PATIENCE = 180.0          # seconds: bounds a wait for what must happen; never a measurement
DRAIN_PATIENCE = 900.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = PATIENCE, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DrillFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class DrillFailed(Exception):
    pass


class DatabaseHost:
    """A PostgreSQL server of its own, inside the database host's namespace,
    listening on that host's address only, run as the ``postgres`` user."""

    def __init__(self, lab: netlab.Lab, directory: Path):
        self.lab = lab
        self.data = directory / "pg"
        self.socket_dir = directory / "sock"
        self.log_path = directory / "server.log"
        self.process: subprocess.Popen | None = None

    @property
    def local_url(self) -> str:
        """Over the Unix socket: the observer's way in, which no network fault touches."""
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port={PG_PORT}"

    @property
    def worker_url(self) -> str:
        """Over TCP from the worker hosts. A cut link must surface as an error
        within seconds, not after the kernel's 15-minute retransmission
        limit: unacknowledged data aborts the connection after 0.5 s, idle
        connections are probed every second."""
        return (f"postgresql://postgres@{self.lab.address('db')}:{PG_PORT}/postgres?connect_timeout=2"
                "&tcp_user_timeout=500&keepalives=1&keepalives_idle=1&keepalives_interval=1&keepalives_count=2")

    def start(self) -> None:
        for path in (self.data, self.socket_dir):
            path.mkdir(parents=True)
            shutil.chown(path, "postgres")
        netlab.run("runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(self.data), "-U",
                   "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C")
        with open(self.data / "pg_hba.conf", "w", encoding="utf-8") as hba:
            hba.write(f"local all all trust\nhost all all {netlab.NETWORK} trust\n")
        settings = {"listen_addresses": self.lab.address("db"), "port": PG_PORT,
                    "unix_socket_directories": self.socket_dir, "max_connections": 300,
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                    # the server, too, lets go of connections whose worker host is cut off
                    "tcp_keepalives_idle": 2, "tcp_keepalives_interval": 1, "tcp_keepalives_count": 3,
                    "tcp_user_timeout": 3000}
        argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", str(PG_BIN / "postgres"),
                "-D", str(self.data)] + [a for k, v in settings.items() for a in ("-c", f"{k}={v}")]
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(self.lab.exec_argv("db", argv), stdout=out, stderr=subprocess.STDOUT)
        wait_for(self._ready, "the database server to accept connections", interval=0.2)

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise DrillFailed(f"the database server exited:\n{self.log_path.read_text()[-2000:]}")
        try:
            with psycopg.connect(self.local_url, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)   # fast shutdown
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


class WorkerHost:
    def __init__(self, lab: netlab.Lab, name: str, directory: Path):
        self.lab, self.name, self.directory = lab, name, directory
        self.process: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / f"worker-{self.name}.log"

    def start(self, url: str, concurrency: int, lease: float) -> None:
        argv = [sys.executable, str(HERE / "host_worker.py"), "--url", url, "--owner", self.name,
                "--concurrency", str(concurrency), "--lease", str(lease),
                "--effects", str(self.directory / f"effects-{self.name}.jsonl"),
                "--calls", str(self.directory / f"calls-{self.name}.jsonl")]
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(self.lab.exec_argv(self.name, argv), stdout=out,
                                            stderr=subprocess.STDOUT, preexec_fn=netlab.die_with_parent)

    def journals(self) -> Journals:
        return Journals.load(self.directory, self.name)

    def has_event(self, event: str) -> bool:
        return any(e.get("event") == event for e in self.journals().events)

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


class Drill:
    def __init__(self, options: argparse.Namespace):
        self.options = options
        self.names = [f"w{i}" for i in range(1, options.hosts + 1)]
        self.lab = netlab.Lab({"db": 1, **{name: 10 + i for i, name in enumerate(self.names, 1)}})
        self.directory = Path(options.dir or f"/tmp/{self.lab.run_id}")
        self.db = DatabaseHost(self.lab, self.directory)
        self.workers = {name: WorkerHost(self.lab, name, self.directory) for name in self.names}
        self.connection: Any = None
        self.submitted: list[str] = []
        self.faults: dict[str, dict] = {}
        self._stop_feeding = threading.Event()
        self._feeder: threading.Thread | None = None

    # The run ---------------------------------------------------------------------------

    def run(self) -> dict:
        started = time.monotonic()
        stale = netlab.remove_stale()
        if stale:
            log(f"removed {len(stale)} namespaces left by earlier runs: {', '.join(stale)}")
        for run_id in {name.rsplit("-", 1)[0] for name in stale}:
            for leftover in ("pg", "sock"):   # their server's files; their journals stay
                shutil.rmtree(self.directory.parent / run_id / leftover, ignore_errors=True)
        if self.directory.exists() and any(self.directory.iterdir()):
            raise DrillFailed(f"{self.directory} is not empty")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o755)
        self.lab.up()
        log(f"network up: db {self.lab.address('db')}, " + ", ".join(
            f"{n} {self.lab.address(n)}" for n in self.names))
        self.db.start()
        self._install()
        for worker in self.workers.values():
            worker.start(self.db.worker_url, self.options.concurrency, self.options.lease)
        for worker in self.workers.values():
            wait_for(lambda w=worker: w.has_event("worker_started") or not w.alive(), f"{worker.name} to start")
            if not worker.alive():
                raise DrillFailed(f"{worker.name} exited at start:\n{worker.log_path.read_text()[-2000:]}")
        log(f"{len(self.workers)} workers started, {self.options.concurrency} jobs in flight each")
        self._feeder = threading.Thread(target=self._feed, name="feeder", daemon=True)
        self._feeder.start()
        self.cut(self.names[0])
        self.impair(self.names[1 % len(self.names)])
        self.partition()
        wait_for(lambda: not self._feeder.is_alive() and self._settled(), "the drain to finish",
                 timeout=DRAIN_PATIENCE, interval=0.5)
        if len(self.submitted) < self.options.jobs:
            raise DrillFailed(f"only {len(self.submitted)} of {self.options.jobs} jobs were submitted")
        log("drain finished; stopping the workers")
        exits = {name: worker.stop() for name, worker in self.workers.items()}
        return self._summary(exits, time.monotonic() - started)

    def _install(self) -> None:
        subprocess.run([str(Path(sys.executable).parent / "fenceq"), "migrate", "--url", self.db.local_url],
                       check=True, stdout=subprocess.DEVNULL)
        self.connection = psycopg.connect(self.db.local_url, autocommit=True)
        self.connection.execute(EFFECTS_TABLE)
        with fenceq.connect(self.db.local_url) as client:
            client.create_queue(QUEUE, lease=timedelta(seconds=self.options.lease), max_attempts=100,
                                backoff_base=timedelta(0), backoff_max=timedelta(0))
        log(f"fenceq migrated, queue {QUEUE!r} (lease {self.options.lease:g}s)")

    def _feed(self) -> None:
        """Submit the jobs as the drain goes, keeping about one job pending
        per worker slot: a job whose lease lapses goes back to the end of the
        queue, and behind thousands it would wait minutes for its takeover
        (while the cut-off worker gives its writes up after 10 s)."""
        o = self.options
        backlog = o.hosts * o.concurrency
        payload = {"steps": o.steps, "step_seconds": o.step_seconds, "finish_seconds": o.finish_seconds}
        with fenceq.connect(self.db.local_url) as client:
            while len(self.submitted) < o.jobs and not self._stop_feeding.is_set():
                pending = client.stats()
                due = sum(q.pending for q in pending if q.queue == QUEUE)
                if due < backlog:
                    start = len(self.submitted)
                    self.submitted += client.submit_batch(QUEUE, [
                        {"task": "steps", "payload": {**payload, "transaction": i % 2 == 0},
                         "submission_id": f"hosts-{i}"}
                        for i in range(start, min(start + backlog, o.jobs))])
                self._stop_feeding.wait(0.05)

    # Database reads (over the Unix socket) --------------------------------------------

    def _status(self) -> dict[str, int]:
        return dict(self.connection.execute("SELECT status, count(*) FROM fenceq.jobs GROUP BY status").fetchall())

    def _settled(self) -> bool:
        """Nothing left pending or claimed."""
        status = self._status()
        return not status.get("pending") and not status.get("claimed")

    def _claimed(self, owner: str | None = None) -> dict[str, int]:
        """Claimed jobs (of ``owner``) -> generation."""
        rows = self.connection.execute(
            "SELECT job_id, generation FROM fenceq.jobs WHERE status = 'claimed'"
            " AND (%(owner)s::text IS NULL OR owner_id = %(owner)s)", {"owner": owner}).fetchall()
        return dict(rows)

    def _moved_on(self, held: dict[str, int]) -> dict[str, str]:
        """The held jobs (job -> generation) that moved on: 'taken_over' (a
        higher generation) or 'finished' (completed under the held one).
        Both are final, so a job once listed stays listed."""
        rows = self.connection.execute(
            "SELECT job_id, generation, status FROM fenceq.jobs WHERE job_id = ANY(%s)", (list(held),)).fetchall()
        out = {}
        for job_id, generation, status in rows:
            if generation > held[job_id]:
                out[job_id] = "taken_over"
            elif status == "completed":
                out[job_id] = "finished"
        return out

    def _mid_job(self, host: str) -> bool:
        """Whether ``host`` has claimed jobs both in a checkpointed step and in
        the unrecorded finish outside a transaction (so a cut strands
        checkpoints and completions that are re-sent after the heal)."""
        claimed = self._claimed(host)
        if len(claimed) < self.options.concurrency // 2:
            return False
        latest: dict[str, str] = {}
        for effect in self.workers[host].journals().effects:
            if claimed.get(effect["job"]) == effect["gen"]:
                latest[effect["job"]] = "in_transaction" if effect.get("transaction") else effect["what"]
        phases = set(latest.values())
        return {"step", "finish"} <= phases

    def _wait_progress(self, share: float) -> None:
        target = int(self.options.jobs * share)
        wait_for(lambda: self._status().get("completed", 0) >= target, f"{target} jobs completed", interval=0.2)

    # Faults ---------------------------------------------------------------------------

    def cut(self, host: str) -> None:
        self._wait_progress(0.1)
        wait_for(lambda: self._mid_job(host), f"{host} to be mid-job", interval=0.01)
        self.lab.cut(host)
        cut_at = time.time()
        held = self._claimed(host)
        log(f"cut {host}'s link with {len(held)} of its jobs in flight (all hosts: {len(self._claimed())})")
        wait_for(lambda: len(self._moved_on(held)) == len(held), f"every job {host} held to be taken over")
        self.lab.heal(host)
        healed_at = time.time()
        moved = self._moved_on(held)
        taken = {job: gen for job, gen in held.items() if moved[job] == "taken_over"}
        log(f"healed {host} after {healed_at - cut_at:.1f}s: {len(taken)} jobs taken over by other hosts")
        # The cut-off worker finds out: for each taken-over job a write of it is
        # answered (refused), or the worker logs losing or giving up on it.
        ends = ("lease_lost", "complete_refused", "checkpoint_refused", "write_abandoned")

        def told() -> bool:
            journals = self.workers[host].journals()
            seen = {(e.get("job_id"), e.get("generation")) for e in journals.events if e.get("event") in ends}
            seen |= {(job, gen) for call, _kind, (job, gen, _owner), _ok in journals.writes()
                     if call["t1"] >= healed_at}
            batch_abandoned = any(e.get("event") == "write_abandoned" and "job_id" not in e for e in journals.events)
            return batch_abandoned or all((job, gen) in seen for job, gen in taken.items())
        wait_for(told, f"{host} to learn that it lost its jobs", interval=0.2)
        self.faults["cut"] = {"host": host, "held": len(held), "taken_over": len(taken),
                              "seconds": round(healed_at - cut_at, 1), "healed_at": healed_at, "fences": taken}

    def impair(self, host: str) -> None:
        o = self.options
        self._wait_progress(0.3)
        self.lab.impair(host, o.delay, o.jitter, o.loss, o.outage, o.outage_gap, seed=os.getpid())
        began = time.time()
        log(f"impaired {host}'s link: {o.delay * 1000:.0f} ± {o.jitter * 1000:.0f} ms each way, "
            f"{o.loss * 100:g}% loss, answers lost for ~{o.outage:g}s every ~{o.outage_gap:g}s")

        def recovered() -> bool:
            return any(c["op"] in RECOVERIES and c.get("answer") for c in self.workers[host].journals().calls)
        try:
            wait_for(recovered, f"a claim of {host} to be recovered by nonce", interval=0.5)
        finally:
            relay = self.lab.restore(host)
        ended = time.time()
        log(f"restored {host}'s link after {ended - began:.1f}s")
        self.faults["impair"] = {"host": host, "delay_ms": o.delay * 1000, "jitter_ms": o.jitter * 1000,
                                 "loss": o.loss, "outage_s": o.outage, "outage_gap_s": o.outage_gap,
                                 "seconds": round(ended - began, 1),
                                 "began": began, "ended": ended, "relay": relay}

    def partition(self) -> None:
        self._wait_progress(0.5)
        self.lab.cut("db")
        cut_at = time.time()
        held = self._claimed()
        log(f"partitioned the database host from all workers, {len(held)} jobs in flight")
        wait_for(lambda: not self.connection.execute(
            "SELECT 1 FROM fenceq.jobs WHERE status = 'claimed' AND lease_expires_at > clock_timestamp()"
            " LIMIT 1").fetchone(), "every lease in flight to lapse", interval=0.1)
        self.lab.heal("db")
        healed_at = time.time()
        log(f"healed the partition after {healed_at - cut_at:.1f}s (every lease had lapsed)")
        wait_for(lambda: len(self._moved_on(held)) == len(held),
                 "every job in flight at the partition to be claimed anew")
        moved = self._moved_on(held)
        taken = {job: gen for job, gen in held.items() if moved[job] == "taken_over"}
        self.faults["partition"] = {"held": len(held), "taken_over": len(taken),
                                    "seconds": round(healed_at - cut_at, 1), "healed_at": healed_at, "fences": taken}

    # Results --------------------------------------------------------------------------

    def _summary(self, exits: dict[str, int | None], duration: float) -> dict:
        journals = [worker.journals() for worker in self.workers.values()]
        db = Database.read(self.connection)
        report = audit(db, journals, self.submitted, self.options.lease)
        by_host = {j.host: j for j in journals}
        cut, partition, impair = self.faults["cut"], self.faults["partition"], self.faults["impair"]
        cut_late = late_writes(by_host[cut["host"]], cut["fences"], cut["healed_at"])
        partition_late: dict[str, dict[str, int]] = {}
        for journal in journals:
            for kind, counts in late_writes(journal, partition["fences"], partition["healed_at"]).items():
                total = partition_late.setdefault(kind, {"refused": 0, "accepted": 0})
                for key, value in counts.items():
                    total[key] += value
        impaired = by_host[impair["host"]]
        in_window = [c for c in impaired.calls if impair["began"] <= c["t0"] <= impair["ended"]]
        summary = {
            "jobs": len(self.submitted),
            "hosts": {"workers": len(self.workers), "database": 1},
            "concurrency_per_host": self.options.concurrency,
            "lease_seconds": self.options.lease,
            "duration_seconds": round(duration, 1),
            "cut": {k: v for k, v in cut.items() if k not in ("fences", "healed_at")} | {"late_writes": cut_late},
            "impair": {k: v for k, v in impair.items() if k not in ("began", "ended")} | {
                "calls": len(in_window),
                "answered_after_a_lease": sum(1 for c in in_window if "t1" in c and "error" not in c
                                              and c["t1"] - c["t0"] > self.options.lease),
                "never_answered": sum(1 for c in in_window if "error" in c),
                "claims_recovered_by_nonce": sum(1 for c in in_window if c["op"] in RECOVERIES
                                                 and c.get("answer"))},
            "partition": {k: v for k, v in partition.items() if k not in ("fences", "healed_at")}
            | {"late_writes": partition_late},
            **report.figures,
            "worker_exits": exits,
            "violations": report.counts(),
        }
        failures = self._failures(summary, report)
        summary["passed"] = not failures
        summary["failures"] = failures
        return summary

    def _failures(self, summary: dict, report: Any) -> list[str]:
        failures = [f"{check}: {len(report.violations[check])} (first: {report.violations[check][:3]})"
                    for check in CHECKS if report.violations.get(check)]
        for fault in ("cut", "partition"):
            late = summary[fault]["late_writes"]
            if any(counts["accepted"] for counts in late.values()):
                failures.append(f"{fault}: late writes accepted: {late}")
            if not sum(counts["refused"] for counts in late.values()):
                failures.append(f"{fault}: no late write was seen refused")
        for kind in ("heartbeats", "checkpoints", "completions"):
            if not (summary["cut"]["late_writes"][kind]["refused"]
                    + summary["partition"]["late_writes"][kind]["refused"]):
                failures.append(f"no late {kind[:-1]} was refused after a heal")
        if summary["cut"]["taken_over"] == 0:
            failures.append("cut: no job was taken over")
        if summary["impair"]["claims_recovered_by_nonce"] == 0:
            failures.append("impair: no claim was recovered by nonce")
        failures += [f"{name} exited with {code}" for name, code in summary["worker_exits"].items() if code != 0]
        return failures

    # Teardown -------------------------------------------------------------------------

    def close(self, keep: bool) -> list[str]:
        """Stop everything this run started; what is left of it (nothing)."""
        self._stop_feeding.set()
        if self._feeder is not None:
            self._feeder.join(30)
        for worker in self.workers.values():
            with contextlib.suppress(Exception):
                worker.stop(timeout=20)
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.close()
        with contextlib.suppress(Exception):
            self.db.stop()
        self.lab.down()
        shutil.rmtree(self.db.data, ignore_errors=True)
        shutil.rmtree(self.db.socket_dir, ignore_errors=True)
        if not keep:
            shutil.rmtree(self.directory, ignore_errors=True)
        left = self.lab.leftovers()
        left += [f"process {p.pid}" for p in [self.db.process, *(w.process for w in self.workers.values())]
                 if p is not None and p.poll() is None]
        return left


def markdown(summary: dict) -> str:
    cut, imp, part = summary["cut"], summary["impair"], summary["partition"]

    def late(block: dict) -> str:
        return ", ".join(f"{kind} {c['refused']} refused / {c['accepted']} accepted"
                         for kind, c in block["late_writes"].items())
    rows = [
        ("jobs drained", summary["jobs"]),
        ("worker hosts (+ database host)", summary["hosts"]["workers"]),
        ("jobs in flight per host, lease", f"{summary['concurrency_per_host']}, {summary['lease_seconds']:g} s"),
        ("cut", f"{cut['host']} for {cut['seconds']} s, {cut['held']} jobs held, {cut['taken_over']} taken over"),
        ("cut: late writes after the heal", late(cut)),
        ("impair", f"{imp['host']} {imp['delay_ms']:.0f} ± {imp['jitter_ms']:.0f} ms, {imp['loss'] * 100:g}% loss, "
                   f"{imp['relay'].get('outages', 0)} spells of ~{imp['outage_s']:g} s with answers lost, "
                   f"for {imp['seconds']} s"),
        ("impair: calls, answered after a lease, never answered",
         f"{imp['calls']}, {imp['answered_after_a_lease']}, {imp['never_answered']}"),
        ("impair: claims recovered by nonce", imp["claims_recovered_by_nonce"]),
        ("partition", f"database host for {part['seconds']} s, {part['held']} jobs in flight, "
                      f"{part['taken_over']} claimed anew"),
        ("partition: late writes after the heal", late(part)),
        ("refused in the whole run", ", ".join(f"{k} {v}" for k, v in summary["refused_total"].items())),
        ("claims uncertain / recovered by nonce / not made",
         f"{summary['claims_uncertain']} / {summary['claims_recovered_by_nonce']} / {summary['claims_not_made']}"),
        ("claims never handed to a worker (taken over)", summary["claims_unseen"]),
        ("acknowledgements recovered (write landed, answer lost)", summary["acks_recovered"]),
        ("jobs with generation > 1, highest generation",
         f"{summary['jobs_with_generation_above_1']}, {summary['max_generation']}"),
        ("fenceq.attempts rows", summary["attempts_rows"]),
        ("completions by host", ", ".join(f"{h} {n}" for h, n in summary["completions_by_host"].items())),
        ("effect rows (the handler's own table); transaction jobs with generation > 1",
         f"{summary['effect_rows']}; {summary['transaction_jobs_above_generation_1']}"),
        ("accepted on a stale fence / lost / completed twice / claims unaccounted / effects not once",
         " / ".join(str(summary["violations"][c]) for c in CHECKS)),
        ("duration", f"{summary['duration_seconds']} s"),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="test-hosts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--hosts", type=int, default=3, help="worker hosts (at least 3)")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs in flight per worker host")
    parser.add_argument("--lease", type=float, default=4.0,
                        help="seconds (long enough for a claim whose answer was lost to be recovered before "
                        "it lapses, on a link that drops answers for a second)")
    parser.add_argument("--steps", type=int, default=2, help="checkpointed steps per job")
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--finish-seconds", type=float, default=0.2, help="work after the last checkpoint")
    parser.add_argument("--delay", type=float, default=0.04, help="impairment: one-way delay, seconds")
    parser.add_argument("--jitter", type=float, default=0.02, help="impairment: ± seconds")
    parser.add_argument("--loss", type=float, default=0.05, help="impairment: share of frames dropped")
    parser.add_argument("--outage", type=float, default=1.0,
                        help="impairment: seconds a spell of lost answers lasts (± half)")
    parser.add_argument("--outage-gap", type=float, default=3.0,
                        help="impairment: seconds between those spells (± half)")
    parser.add_argument("--dir", help="journals and server files (default /tmp/fqh<pid>)")
    parser.add_argument("--summary", help="also write the summary (JSON) here")
    parser.add_argument("--keep", action="store_true", help="keep the journals after a passing run")
    options = parser.parse_args(argv)
    if options.hosts < 3:
        parser.error("--hosts must be at least 3")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    reason = netlab.unavailable()
    if reason:
        print(f"test-hosts: SKIPPED: {reason}", flush=True)
        return 0
    drill = Drill(options)

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)
    summary: dict | None = None
    try:
        summary = drill.run()
    except (DrillFailed, KeyboardInterrupt) as error:
        log(f"FAILED: {type(error).__name__}: {error}")
    except Exception:  # noqa: BLE001 - a bug in the drill: report it, then clean up
        log(f"FAILED:\n{traceback.format_exc()}")
    finally:
        passed = bool(summary and summary["passed"])
        left = drill.close(keep=options.keep or not passed)
        if left:
            log(f"left behind: {left}")
    if summary is not None:
        summary["left_behind"] = left
        print(json.dumps(summary, indent=2, default=str))
        print(markdown(summary))
        if options.summary:
            Path(options.summary).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        for failure in summary["failures"]:
            log(f"FAILED: {failure}")
    if not passed:
        log(f"journals kept in {drill.directory}")
    return 0 if passed and not left else 1
