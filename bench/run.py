"""Entry point: ``python -m bench`` (``make bench``). Every fenceq figure has
a bare figure measured in the same round; rounds alternate which system
goes first, and each ratio is the median of the per-round ratios."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import cpu, db, drivers, report, sqlite_bench, worker_bench
from . import statements as sql
from .serverstats import ServerStats

REPO = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).resolve().parent / "runs"
DOC = REPO / "docs" / "benchmarks.md"
SYSTEMS = ["bare", "fenceq"]
Q_DRAIN, Q_BATCH, Q_SUBMIT, Q_LATENCY, Q_DIAG = (
    "bench_drain", "bench_batch", "bench_submit", "bench_latency", "bench_diag")
QUEUES = [Q_DRAIN, Q_BATCH, Q_SUBMIT, Q_LATENCY, Q_DIAG, worker_bench.QUEUE, worker_bench.WAKE_QUEUE]


@dataclass
class Config:
    rounds: int = 7
    drain_jobs: dict[int, int] = field(default_factory=lambda: {1: 4000, 4: 8000, 16: 8000})
    batch_jobs: int = 20000
    batch_workers: int = 4
    batch_size: int = 10
    submit_calls: int = 3000
    submit_batch_size: int = 1000
    submit_batch_calls: int = 20
    owned_batch_calls: int = 5    # owned submit_batch is an order of magnitude slower today
    backlogs: tuple[int, int] = (1_000, 1_000_000)
    latency_samples: int = 1000   # per system and backlog
    latency_blocks: int = 10      # alternating between the systems
    latency_warmup: int = 50      # per system and backlog, not kept
    worker_jobs: int = 10000
    worker_rounds: int = 3
    wake_samples: int = 200
    diag_jobs: int = 2000
    sqlite_jobs: int = 2000
    sqlite_rounds: int = 5

    @classmethod
    def quick(cls) -> "Config":
        """For development: a few minutes; the large backlog is 100k."""
        return cls(rounds=3, drain_jobs={1: 2000, 4: 4000, 16: 4000}, batch_jobs=8000,
                   submit_calls=1500, submit_batch_calls=10, owned_batch_calls=2, backlogs=(1_000, 100_000),
                   latency_samples=500, worker_jobs=5000, worker_rounds=2, diag_jobs=1000,
                   sqlite_jobs=1000, sqlite_rounds=2)


def alternate(round_no: int, items: list) -> list:
    return items if round_no % 2 == 0 else list(reversed(items))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def paired_ratio(numerators: list[float], denominators: list[float]) -> float:
    """Median of the per-round ratios: both sides of a round run back to
    back, so slow drift on the machine cancels out."""
    return median([a / b for a, b in zip(numerators, denominators) if b])


class Bench:
    def __init__(self, server_url: str, url: str, config: Config, log: Callable[[str], None]):
        self.server_url = server_url
        self.url = url
        self.config = config
        self.log = log
        self.admin = db.connect(url)
        self.stats = ServerStats(self.admin)
        self.rates: dict[str, dict[str, list[float]]] = {}
        self.results: dict[str, Any] = {"windows": {}, "latency": {}, "worker": {}, "phases": {},
                                        "load": {}, "commit_probe": []}
        self.postmaster = cpu.postmaster_pid(self.admin)
        self.conns: list = []

    def record(self, workload: str, system: str, rate: float) -> None:
        self.rates.setdefault(workload, {}).setdefault(system, []).append(rate)

    async def phase(self, name: str, body) -> None:
        self.log(f"== {name}")
        started = time.monotonic()
        before = cpu.sample(self.postmaster, [], self.admin.info.dbname)
        await body()
        load = cpu.other_load(before, cpu.sample(self.postmaster, [], self.admin.info.dbname))
        self.results["phases"][name] = time.monotonic() - started
        if load is not None:
            self.results["load"][name] = load["other_share"]
            if load["other_share"] > 0.05:
                self.log(f"  note: other processes used {load['other_share']:.0%} of the CPU")

    async def timed(self, workload: str, label: str, conns: list, loop, expected: int, /,
                    **kwargs) -> None:
        db.checkpoint(self.admin)
        self.results["commit_probe"].append(db.commit_latency(self.admin))
        result = await drivers.run_workers(conns, loop, **kwargs)
        if result.jobs != expected:
            raise RuntimeError(f"{workload} {label}: {result.jobs} of {expected} jobs")
        self.record(workload, label, result.rate)
        self.log(f"  {workload:28} {label:14} {result.rate:9,.0f} jobs/s "
                 f"({result.jobs} in {result.seconds:.2f}s)")

    def fill_both(self, queue: str, count: int) -> None:
        for system in SYSTEMS:
            db.fill(self.admin, system, queue, count)
        db.vacuum(self.admin)

    # -- phases --------------------------------------------------------------

    async def warm_up(self) -> None:
        """Every connection prepares every statement and compiles fenceq's
        PL/pgSQL before anything is timed."""
        self.conns = await drivers.open_connections(self.url, max(self.config.drain_jobs))
        per_conn = 20
        self.fill_both(Q_DRAIN, per_conn * len(self.conns))
        for system in SYSTEMS:
            await drivers.run_workers(self.conns, drivers.drain_per_job, system=system, queue=Q_DRAIN)
        self.fill_both(Q_BATCH, per_conn * self.config.batch_size * self.config.batch_workers)
        for system in SYSTEMS:
            await drivers.run_workers(self.conns[:self.config.batch_workers], drivers.drain_batched,
                                      system=system, queue=Q_BATCH, size=self.config.batch_size)
        for variant in drivers.SUBMIT:
            await drivers.submit_each(self.conns[0], "warm", variant, Q_SUBMIT, per_conn, "warm")
        await self.empty_queue(Q_SUBMIT)

    async def per_job_drains(self) -> None:
        c = self.config
        for workers, jobs in c.drain_jobs.items():
            for r in range(c.rounds):
                self.fill_both(Q_DRAIN, jobs)
                for system in alternate(r, SYSTEMS):
                    await self.timed(f"drain/{workers}", system, self.conns[:workers],
                                     drivers.drain_per_job, jobs, system=system, queue=Q_DRAIN)
                db.clear_finished(self.admin)

    async def batched_drains(self) -> None:
        c = self.config
        for r in range(c.rounds):
            self.fill_both(Q_BATCH, c.batch_jobs)
            for system in alternate(r, SYSTEMS):
                await self.timed(f"batch/{c.batch_size}", system, self.conns[:c.batch_workers],
                                 drivers.drain_batched, c.batch_jobs, system=system, queue=Q_BATCH,
                                 size=c.batch_size)
            db.clear_finished(self.admin)

    async def submits(self) -> None:
        c = self.config
        one = self.conns[:1]
        size = c.submit_batch_size
        plain = [db.plain_requests(size)] * c.submit_batch_calls
        for r in range(c.rounds):
            for variant in alternate(r, list(drivers.SUBMIT)):
                await self.timed("submit", variant, one, drivers.submit_each, c.submit_calls,
                                 variant=variant, queue=Q_SUBMIT, count=c.submit_calls, tag=f"r{r}")
            owned = [db.owned_requests(size, f"r{r}-{k}") for k in range(c.owned_batch_calls)]
            batches = {"bare": (sql.BARE_INSERT_BATCH, plain), "fenceq": (sql.FQ_SUBMIT_BATCH, plain),
                       "fenceq_owned": (sql.FQ_SUBMIT_BATCH, owned)}
            for variant in alternate(r, list(batches)):
                statement, arrays = batches[variant]
                await self.timed("submit_batch", variant, one, drivers.submit_batches,
                                 size * len(arrays), statement=statement, queue=Q_SUBMIT, arrays=arrays)
            await self.empty_queue(Q_SUBMIT)

    async def empty_queue(self, queue: str) -> None:
        """Submitted jobs stay pending: drain them (fenceq through its API)
        so later phases see a table of the same size."""
        await drivers.run_workers(self.conns[:4], drivers.drain_batched, system="fenceq",
                                  queue=queue, size=100)
        self.admin.execute("DELETE FROM bare_jobs WHERE queue = %s", (queue,))
        db.clear_finished(self.admin)
        db.vacuum(self.admin)

    async def diagnostics(self) -> None:
        """Per call, on one connection with statement tracking on: server
        time (top-level and nested), statements, WAL, full-page images and
        index entries. Claims and completions are separate windows so that
        nested statements are attributed to the function that ran them."""
        c = self.config
        n = c.diag_jobs
        calls = n // c.batch_size
        conn = (await drivers.open_connections(self.url, 1, track="all"))[0]
        # Planning inside the functions is time outside every statement's execution.
        await conn.execute("SET pg_stat_statements.track_planning = on")
        try:
            for system in SYSTEMS:
                for shape, (claim, complete), count, size in (
                        ("", drivers.PER_JOB[system], n, ()),
                        ("_batch", drivers.BATCHED[system], calls, (c.batch_size,))):
                    db.fill(self.admin, system, Q_DIAG, n)
                    db.vacuum(self.admin)
                    db.checkpoint(self.admin)
                    claims = await self.window(f"{system}/claim{shape}", count, n, self._claims,
                                               conn, claim, count, size)
                    # No checkpoint here: a job is completed soon after its claim.
                    await self.window(f"{system}/complete{shape}", count, n, self._completes,
                                      conn, complete, claims)
                    db.clear_finished(self.admin)
            for variant in drivers.SUBMIT:
                db.checkpoint(self.admin)
                await self.window(f"{variant}/submit", n, n, drivers.submit_each,
                                  conn, "diag", variant, Q_DIAG, n, "diag")
            size = c.submit_batch_size
            plain = [db.plain_requests(size)] * c.owned_batch_calls
            owned = [db.owned_requests(size, f"diag-{k}") for k in range(c.owned_batch_calls)]
            for variant, statement, arrays in (
                    ("bare", sql.BARE_INSERT_BATCH, plain), ("fenceq", sql.FQ_SUBMIT_BATCH, plain),
                    ("fenceq_owned", sql.FQ_SUBMIT_BATCH, owned)):
                db.checkpoint(self.admin)
                await self.window(f"{variant}/submit_batch", len(arrays), size * len(arrays),
                                  drivers.submit_batches, conn, "diag", statement, Q_DIAG, arrays)
        finally:
            await conn.close()
        await self.empty_queue(Q_DIAG)

    async def window(self, key: str, calls: int, jobs: int, body, *args):
        """Run body(*args) inside a measured window; returns what it returns."""
        self.stats.begin()
        result = await body(*args)
        window = self.results["windows"][key] = self.stats.end(calls, jobs)
        top = max((s for s in window["statements"] if s["toplevel"]),
                  key=lambda s: s["total_ms"], default=None)
        if top:
            self.log(f"  {key:28} {top['total_ms'] * 1000 / max(1, top['calls']):8.1f} µs/call server, "
                     f"{window['wal']['bytes'] / jobs:7.0f} WAL bytes/job")
        return result

    @staticmethod
    async def _claims(conn, claim, calls: int, size: tuple) -> list:
        claims = []
        for _ in range(calls):
            row = await claim(conn, Q_DIAG, "bench-diag", *size)
            if not row:
                raise RuntimeError("the diagnostic queue ran dry")
            claims.append(row)
        return claims

    @staticmethod
    async def _completes(conn, complete, claims: list) -> None:
        for row in claims:
            await complete(conn, row, "bench-diag")

    async def workers_vs_pgqueuer(self) -> None:
        c = self.config
        n = c.worker_jobs
        await worker_bench.install_pgqueuer(self.url)
        timed_url = worker_bench.untracked_url(self.url)
        out = self.results["worker"]

        async def fill_and_checkpoint(systems) -> None:
            if "fenceq" in systems:
                db.fill(self.admin, "fenceq", worker_bench.QUEUE, n)
            if "pgqueuer" in systems:
                await worker_bench.fill_pgqueuer(self.url, n)
            self.admin.execute("VACUUM (ANALYZE)")
            db.checkpoint(self.admin)

        for r in range(c.worker_rounds):
            for system in alternate(r, ["pgqueuer", "fenceq"]):
                await fill_and_checkpoint([system])
                run = worker_bench.run_child(system, timed_url, n)
                self.record("worker", system, n / run["seconds"])
                out.setdefault(f"{system}/cpu_per_job", []).append(run["cpu_seconds"] / n)
                self.log(f"  worker {system:9} {n / run['seconds']:9,.0f} jobs/s, "
                         f"client CPU {run['cpu_seconds'] / n * 1e6:.0f} µs/job")
            db.clear_finished(self.admin)
        # Untimed: statements each system sends per job, and the fenceq profile.
        for system in ("pgqueuer", "fenceq"):
            await fill_and_checkpoint([system])
            self.stats.begin()
            run = worker_bench.run_child(system, self.url, n, profile=system == "fenceq")
            window = self.stats.end(n, n)
            out[f"{system}/statements"] = [s for s in window["statements"] if s["toplevel"]]
            if system == "fenceq":
                out["profile"] = run
        db.clear_finished(self.admin)
        out["wake"] = report.percentiles(worker_bench.run_child("wake", timed_url, c.wake_samples)["wake"])
        self.log(f"  wake-up latency p50 {out['wake']['p50'] * 1e3:.2f} ms")

    async def sqlite(self) -> None:
        c = self.config
        with tempfile.TemporaryDirectory(prefix="fenceq-sqlite-bench-") as directory:
            self.results["sqlite"] = {
                synchronous: sqlite_bench.run(directory, jobs=c.sqlite_jobs, rounds=c.sqlite_rounds,
                                              synchronous=synchronous)
                for synchronous in ("FULL", "OFF")}
        full = self.results["sqlite"]["FULL"]
        self.log(f"  SQLite drain {full['drain_ratio']:.2f}×, submit {full['submit_ratio']:.2f}×")

    async def latency(self) -> None:
        """claim + complete p50 on one connection per backlog, both backlogs
        live at once: the small one in a second database, so that its tables
        hold only it. Both systems fill through their batch insert. Short
        blocks rotate over system and backlog, a CHECKPOINT before each, so
        that all four see the same drift in the disk's fsync latency."""
        c = self.config
        small_url = db.recreate_database(self.server_url, self.admin.info.dbname + "_small")
        try:
            db.install(small_url, [Q_LATENCY])
            with db.connect(small_url) as small_admin:
                await self._latency_blocks({c.backlogs[0]: (small_url, small_admin),
                                            c.backlogs[1]: (self.url, self.admin)})
        finally:
            db.drop_database(self.server_url, self.admin.info.dbname + "_small")

    async def _latency_blocks(self, stages: dict[int, tuple]) -> None:
        c = self.config
        per_block = c.latency_samples // c.latency_blocks
        conns = {}
        for backlog, (url, admin) in stages.items():
            filled = time.monotonic()
            for system in SYSTEMS:
                db.fill(admin, system, Q_LATENCY, backlog + c.latency_warmup + c.latency_samples)
            db.vacuum(admin)
            self.results["phases"][f"latency fill {backlog:,}"] = time.monotonic() - filled
            conns[backlog] = (await drivers.open_connections(url, 1))[0]
            for system in SYSTEMS:
                await drivers.claim_complete_latencies(conns[backlog], system, Q_LATENCY, c.latency_warmup)
        combos = [(system, backlog) for backlog in stages for system in SYSTEMS]
        samples: dict[tuple, list[float]] = {combo: [] for combo in combos}
        try:
            for k in range(c.latency_blocks):
                for system, backlog in alternate(k, combos):
                    db.checkpoint(self.admin)
                    samples[system, backlog] += await drivers.claim_complete_latencies(
                        conns[backlog], system, Q_LATENCY, per_block)
        finally:
            await drivers.close_connections(list(conns.values()))
        for (system, backlog), timings in samples.items():
            got = self.results["latency"][f"{system}/{backlog}"] = report.percentiles(timings)
            self.log(f"  claim+complete p50 {system:6} at {backlog:>9,} pending: {got['p50'] * 1e3:.3f} ms")

    # -- figures ---------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """Medians and paired ratios from the recorded rounds."""
        out = {}
        for workload, by_system in self.rates.items():
            base = "pgqueuer" if workload == "worker" else "bare"
            for system, rates in by_system.items():
                entry = {"rate": median(rates), "rounds": rates}
                if system != base and base in by_system:
                    entry["ratio"] = paired_ratio(rates, by_system[base])
                out[f"{workload}/{system}"] = entry
        batches = self.rates.get("submit_batch", {})
        if "fenceq_owned" in batches and "fenceq" in batches:
            out["submit_batch/fenceq_owned"]["ratio_to_plain"] = paired_ratio(
                batches["fenceq_owned"], batches["fenceq"])
        return out

    def close(self) -> None:
        self.admin.close()


async def run_bench(bench: Bench, only: set[str] | None) -> None:
    phases = [("warm-up", bench.warm_up), ("per-job drain", bench.per_job_drains),
              ("batched drain", bench.batched_drains), ("submit", bench.submits),
              ("diagnostics per call", bench.diagnostics),
              ("fenceq.Worker vs PgQueuer", bench.workers_vs_pgqueuer), ("SQLite", bench.sqlite),
              ("claim latency against backlog", bench.latency)]
    try:
        for name, body in phases:
            if only is None or name == "warm-up" or name.split()[0].lower() in only:
                await bench.phase(name, body)
    finally:
        await drivers.close_connections(bench.conns)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("FENCEQ_BENCH_PG_URL"),
                        help="server URL (any database; default $FENCEQ_BENCH_PG_URL)")
    parser.add_argument("--db", default="fenceq_bench", help="database to (re)create (default fenceq_bench)")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("FENCEQ_BENCH_QUICK") == "1",
                        help="development run (100k backlog, fewer rounds); prints, writes nothing "
                             "(also FENCEQ_BENCH_QUICK=1)")
    parser.add_argument("--label", help="name of this run in docs/benchmarks.md "
                        "(default: v<fenceq.version()>)")
    parser.add_argument("--only", help="development: run only these phases (comma-separated first "
                        "words: per-job, batched, submit, diagnostics, fenceq.worker, sqlite, claim); "
                        "implies printing instead of recording")
    parser.add_argument("--command", default="make bench", help="the command the report names")
    parser.add_argument("--commit", help="the measured code's commit, when fenceq is imported from "
                        "elsewhere than this checkout (e.g. an older version on PYTHONPATH)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.url:
        print("bench: set FENCEQ_BENCH_PG_URL (or --url); `make bench` starts a server and sets it",
              file=sys.stderr)
        return 2
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    config = Config.quick() if args.quick else Config()
    url = db.recreate_database(args.url, args.db)
    db.install(url, QUEUES)
    bench = Bench(args.url, url, config, log)
    try:
        version = db.fenceq_version(bench.admin)
        preload = bench.admin.execute("SHOW shared_preload_libraries").fetchone()[0]
        if "pg_stat_statements" not in preload:
            print("bench: the server must preload pg_stat_statements "
                  "(FENCEQ_PG_STAT_STATEMENTS=1 scripts/pg-test-server start)", file=sys.stderr)
            return 2
        meta = {"label": args.label or f"v{version}", "version": version,
                "commit": args.commit or db.git_commit(REPO),
                "command": args.command + (" BENCH_ARGS=--quick" if args.quick else ""),
                "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": db.machine_facts(), "server": db.server_facts(bench.admin),
                "config": asdict(config), "waldump": bench.stats.waldump is not None}
        log(f"fenceq {version} at {meta['commit']}; {meta['server']['version']}, "
            f"fsync={meta['server'].get('fsync')}")
        only = set(args.only.lower().split(",")) if args.only else None
        asyncio.run(run_bench(bench, only))
    finally:
        bench.close()
        db.drop_database(args.url, args.db)
    meta["minutes"] = (time.monotonic() - started) / 60
    run = {"meta": meta, "figures": bench.figures(), **bench.results}
    if args.quick or args.only:
        print(report.render_run(run))
    else:
        RUNS.mkdir(exist_ok=True)
        (RUNS / f"{meta['label']}.json").write_text(json.dumps(run, indent=1, default=str) + "\n")
        DOC.write_text(report.render(RUNS))
        log(f"wrote {DOC.relative_to(REPO)} and bench/runs/{meta['label']}.json")
    log(f"done in {meta['minutes']:.1f} min")
    return 0
