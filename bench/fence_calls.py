"""``python -m bench.fence_calls``: what version 9's fence rule, written once
in the inlined helper ``_holds_fence``, costs the fenced writes against
version 8, which spelled the rule out in each of them; two databases on one
server, the versions alternating::

    .venv/bin/python -m bench.fence_calls --url postgresql://postgres@127.0.0.1:54339/postgres
        [--jobs 10000] [--rounds 6] [--size 100]

It creates two databases (dropped at the end): one migrated through step
0008 (version 8), one by ``migrate`` (this tree's version, 9). Each round
fills ``--jobs`` no-op jobs in each and claims them all with ``claim_jobs``
of ``--size`` (not timed), then runs five phases, each phase in both
databases before the next, the first database alternating between phases
and rounds: ``heartbeat`` of every job one at a time, ``progress`` of every
job one at a time, ``heartbeat_batch`` of every job ``--size`` at a time,
then ``complete`` of the first half one at a time and ``complete_batch`` of
the second half ``--size`` at a time. Every call must answer true. A
``VACUUM`` and a ``CHECKPOINT`` come before each phase (so each phase pays
its own full-page writes, as production does after a checkpoint), and
autovacuum is off on fenceq's tables (its WAL would land in the other
database's calls: WAL is server-wide).
Per call: the server time (pg_stat_statements' mean_exec_time of the call's
top-level statement, statistics of the database reset before the phase,
tracking set to ``top`` for the session), or the client's round trip where
the server does not load pg_stat_statements; and the WAL it wrote
(``pg_current_wal_insert_lsn`` before and after each call). The table gives
the medians of the rounds, the min–max across rounds in brackets; v9/v8 is
the median of each round's ratio (the two versions ran seconds apart).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Callable

import psycopg
from psycopg.types.json import Jsonb

from fenceq.backends.migrations import apply_postgres_steps_through, migrate

QUEUE = "fence_calls"
OWNER = "w"
VERSIONS = ("v8", "v9")
V8_STEP = "0008_fenceq_v8"
CALLS = ("heartbeat", "progress", "heartbeat_batch", "complete", "complete_batch")
BATCHED = ("heartbeat_batch", "complete_batch")
PROGRESS = Jsonb({"done": 1})

Fence = tuple[str, int, str]  # job_id, generation, claim_token


def statement(call: str, placeholder: Callable[[int], str] = lambda number: "%s") -> str:
    """The call's statement; with placeholder=lambda n: f"${n}", as the server receives it."""
    arity = 5 if call == "progress" else 4
    return f"SELECT fenceq.{call}({', '.join(placeholder(n) for n in range(1, arity + 1))})"


def arguments(call: str, fences: list[Fence]) -> tuple:
    if call in BATCHED:
        return ([f[0] for f in fences], [OWNER] * len(fences), [f[1] for f in fences], [f[2] for f in fences])
    (job_id, generation, claim_token), = fences
    extra = (PROGRESS,) if call == "progress" else ()
    return (job_id, OWNER, generation, claim_token) + extra


def plan(call: str, claimed: list[Fence], size: int) -> list[list[Fence]]:
    """The fences of each call of a phase."""
    half = len(claimed) // 2
    fences = claimed[:half] if call == "complete" else claimed[half:] if call == "complete_batch" else claimed
    step = size if call in BATCHED else 1
    return [fences[i:i + step] for i in range(0, len(fences), step)]


class Database:
    """One version's database, its connection, and what it has claimed."""

    def __init__(self, url: str, statements: bool):
        self.conn = psycopg.connect(url, autocommit=True)
        self.statements = statements
        if statements:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            # Nested statements untracked: their bookkeeping would be timed inside the calls.
            self.conn.execute("SET pg_stat_statements.track = 'top'")
        # Each phase vacuums first; an autovacuum of one database during the
        # other's phase would count its WAL against that phase's calls.
        for (table,) in self.conn.execute("SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
                                          " WHERE schemaname = 'fenceq'").fetchall():
            self.conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        self.version = self.conn.execute("SELECT fenceq.version()").fetchone()[0]
        self.conn.execute("SELECT fenceq.create_queue(%s)", (QUEUE,))
        self.claimed: list[Fence] = []

    def fill_and_claim(self, jobs: int, size: int) -> None:
        for start in range(0, jobs, 1000):
            self.conn.execute("SELECT fenceq.submit_batch(%s, (SELECT jsonb_agg(jsonb_build_object('task', 't'))"
                              " FROM generate_series(1, %s)))", (QUEUE, min(1000, jobs - start)))
        self.conn.execute("VACUUM ANALYZE fenceq._jobs")
        self.claimed = []
        while rows := self.conn.execute(
                "SELECT job_id, generation, claim_token FROM fenceq.claim_jobs(ARRAY[%s], %s, %s, %s,"
                " lease => interval '1 hour', budget => interval '10 hours')",
                (QUEUE, OWNER, uuid.uuid4().hex, size)).fetchall():
            self.claimed += rows
        if len(self.claimed) != jobs:
            raise RuntimeError(f"claimed {len(self.claimed)} of {jobs} jobs")

    def phase(self, call: str, size: int) -> dict[str, float]:
        """One call's phase: server (or client) µs per call, client µs per call, WAL bytes per call."""
        self.conn.execute("VACUUM")
        self.conn.execute("CHECKPOINT")
        if self.statements:
            self.conn.execute("SELECT pg_stat_statements_reset(0, oid, 0) FROM pg_database"
                              " WHERE datname = current_database()")
        text, calls = statement(call), plan(call, self.claimed, size)
        client, wal = 0.0, 0
        for fences in calls:
            before = self.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            started = time.perf_counter()
            answer = self.conn.execute(text, arguments(call, fences)).fetchone()[0]
            client += time.perf_counter() - started
            wal += int(self.conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (before,)).fetchone()[0])
            if not (all(answer) if call in BATCHED else answer):
                raise RuntimeError(f"{self.version}: {call} refused a live claim")
        client_us = client / len(calls) * 1e6
        out = {"us": client_us, "client_us": client_us, "wal": wal / len(calls)}
        if self.statements:
            total_ms, count = self.conn.execute(
                "SELECT sum(total_exec_time), sum(calls) FROM pg_stat_statements WHERE toplevel AND query = %s"
                " AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (statement(call, lambda number: f"${number}"),)).fetchone()
            if count != len(calls):
                raise RuntimeError(f"pg_stat_statements counted {count} {call} calls of {len(calls)}")
            out["us"] = float(total_ms) / float(count) * 1000
        return out

    def purge(self) -> None:
        self.conn.execute("SELECT fenceq.purge(interval '0', 1000000)")


def server_has_statements(url: str) -> bool:
    """pg_stat_statements loaded (its settings exist) and installable."""
    with psycopg.connect(url) as conn:
        return bool(conn.execute(
            "SELECT EXISTS (SELECT FROM pg_settings WHERE name = 'pg_stat_statements.track')"
            " AND EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')").fetchone()[0])


def run(url: str, jobs: int, rounds: int, size: int, log: Callable[[str], None] = print) -> dict:
    """{"server_time": bool, "versions": {v: fenceq.version()}, "results": {v: {call: [per round]}}}"""
    prefix = "fenceq_fence_calls_" + uuid.uuid4().hex[:8]
    server = url.rsplit("/", 1)[0]
    names = {version: f"{prefix}_{version}" for version in VERSIONS}
    statements = server_has_statements(url)
    databases: dict[str, Database] = {}
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            for name in names.values():
                admin.execute(f"CREATE DATABASE {name}")
        apply_postgres_steps_through(f"{server}/{names['v8']}", V8_STEP)
        migrate(f"{server}/{names['v9']}")
        databases = {version: Database(f"{server}/{name}", statements) for version, name in names.items()}
        results: dict[str, dict[str, list]] = {version: {call: [] for call in CALLS} for version in VERSIONS}
        started = time.perf_counter()
        for round_ in range(rounds):
            for database in databases.values():
                database.fill_and_claim(jobs, size)
            for number, call in enumerate(CALLS):
                order = VERSIONS if (round_ + number) % 2 == 0 else tuple(reversed(VERSIONS))
                for version in order:
                    results[version][call].append(databases[version].phase(call, size))
            for database in databases.values():
                database.purge()
            log(f"round {round_ + 1} of {rounds} done ({time.perf_counter() - started:.0f} s)")
        return {"server_time": statements, "results": results,
                "versions": {version: database.version for version, database in databases.items()}}
    finally:
        for database in databases.values():
            database.conn.close()
        with psycopg.connect(url, autocommit=True) as admin:
            for name in names.values():
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def spread(values: list[float], form: str) -> str:
    return f"{form.format(statistics.median(values))} ({form.format(min(values))}–{form.format(max(values))})"


def markdown(measured: dict, size: int) -> str:
    """The table: per call, each version's µs and WAL bytes, and v9/v8, as median (min–max) of the rounds."""
    lines = ["| call | v8 µs | v9 µs | v9/v8 | v8 WAL B | v9 WAL B |", "|---|---:|---:|---:|---:|---:|"]
    for call in CALLS:
        v8, v9 = measured["results"]["v8"][call], measured["results"]["v9"][call]
        cells = [spread([r["us"] for r in v8], "{:.1f}"), spread([r["us"] for r in v9], "{:.1f}"),
                 spread([new["us"] / old["us"] for old, new in zip(v8, v9)], "{:.3f}"),
                 spread([r["wal"] for r in v8], "{:,.0f}"), spread([r["wal"] for r in v9], "{:,.0f}")]
        label = f"{call} ({size})" if call in BATCHED else call
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True,
                        help="the server (fsync on, pg_stat_statements preloaded, for figures that mean something)")
    parser.add_argument("--jobs", type=int, default=10000, help="no-op jobs claimed per database and round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, the versions' order alternating")
    parser.add_argument("--size", type=int, default=100, help="fences per claim_jobs and batch call")
    args = parser.parse_args(argv)
    result = run(args.url, args.jobs, args.rounds, args.size)
    source = "server time (pg_stat_statements)" if result["server_time"] else "client round trip"
    print(f"fenceq.version(): v8 {result['versions']['v8']}, v9 {result['versions']['v9']}; µs per call: {source};"
          f" WAL bytes per call; medians of {args.rounds} rounds (min–max)\n")
    print(markdown(result, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
