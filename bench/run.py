"""Entry point: ``python -m bench`` (``make bench``)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

from . import db
from .measure import Bench, Config
from .report import write_report

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DOC = REPO / "docs" / "benchmarks.md"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="fenceq benchmark: fenceq's SQL functions beside a bare-SQL baseline, one run, "
                    "one server; writes docs/benchmarks.md.")
    parser.add_argument("--url", default=os.environ.get("FENCEQ_BENCH_PG_URL"),
                        help="server URL (any database; default $FENCEQ_BENCH_PG_URL)")
    parser.add_argument("--db", default="fenceq_bench",
                        help="database to (re)create on that server (default fenceq_bench)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every drain job count by this (default 1.0)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds per throughput figure; the median is reported (default 5)")
    parser.add_argument("--backlogs", default="1000,100000,1000000",
                        help="pending-job counts for the claim latency figures")
    parser.add_argument("--doc", default=str(DEFAULT_DOC),
                        help="where to write the report (default docs/benchmarks.md)")
    parser.add_argument("--no-doc", action="store_true", help="print the report, do not write it")
    parser.add_argument("--keep-db", action="store_true", help="leave the bench database behind")
    parser.add_argument("--command", default="make bench",
                        help="the command line the report names (default 'make bench')")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.url:
        print("bench: set FENCEQ_BENCH_PG_URL (or --url) to a PostgreSQL server URL; "
              "`make bench` starts one and sets it", file=sys.stderr)
        return 2
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    backlogs = tuple(sorted(int(x) for x in args.backlogs.split(",") if x.strip()))
    config = Config(scale=args.scale, rounds=max(1, args.rounds), backlogs=backlogs)
    config.submit_seconds = max(0.5, config.submit_seconds * min(1.0, args.scale))
    if max(backlogs) < config.side_backlog_large:
        config.side_backlog_large = max(backlogs) // 4 or 1
    begun = dt.datetime.now(dt.timezone.utc)

    log(f"creating database {args.db} and installing fenceq (fenceq.migrate.migrate)")
    url = db.create_database(args.url, args.db)
    db.install(url)
    bench = Bench(url, config, log)
    try:
        facts = {"machine": db.machine_facts(), "server": db.server_facts(bench.conn)}
        log(f"server: {facts['server']['version'].split(',')[0]}, fsync={facts['server'].get('fsync')}, "
            f"synchronous_commit={facts['server'].get('synchronous_commit')}, "
            f"shared_buffers={facts['server'].get('shared_buffers')}; nproc={facts['machine']['nproc']}")
        bench.start_pool()
        bench._phase("warm-up", bench.warm_up)
        bench._phase("per-job drain (claim_next + complete)", bench.drains)
        bench._phase("batched drain (claim_batch + complete_batch)", bench.batches)
        bench._phase("diagnostic: claim ledger probe", bench.ledger_probe)
        bench._phase("Python client overhead", bench.client_overhead)
        bench._phase("diagnostic: generic plans", bench.generic_plans)
        bench._phase("submit", bench.submits)
        bench._phase("claim latency", bench.latency)
        bench._phase("diagnostics", bench.diagnostics)
    finally:
        bench.close()
        if not args.keep_db:
            try:
                db.drop_database(args.url, args.db)
            except Exception as exc:  # the report matters more than the cleanup
                log(f"could not drop {args.db}: {type(exc).__name__}")
    elapsed = time.monotonic() - started
    text = write_report(bench.results, config, facts, command=args.command, started=begun,
                        elapsed=elapsed, path=None if args.no_doc else Path(args.doc))
    if args.no_doc:
        print(text)
    else:
        log(f"wrote {args.doc}")
    log(f"done in {elapsed / 60:.1f} min")
    return 0
