"""design-v5.md §1's layout under version 5's own hot functions (the
laboratory bench/v6_claimed_proto.sql) beside version 5, on one server.

    python -m bench.v6_claimed --url postgresql://postgres@127.0.0.1:54339/postgres [--jobs N] [--rounds R]

The server needs pg_stat_statements preloaded (the `make bench` server).
Each round makes one database per system (migration steps through 0005;
for the laboratory, then bench/v6_claimed_proto.sql), submits N jobs,
VACUUMs, takes a CHECKPOINT, resets pg_stat_statements, then drains them on
one connection: one job at a time (claim_next, complete) and in batches of
16 (claim_batch, complete_batch). Reported per job: server time of the
top-level calls (pg_stat_statements), WAL bytes (pg_current_wal_lsn), and
heap inserts, updates, HOT updates and deletes over fenceq's tables
(pg_stat_all_tables). The systems alternate their order between rounds;
figures are medians. design-v5.md §11 has a run.

    python -m bench.v6_claimed --url URL --wal-records [--jobs N]

instead drains N jobs one at a time per system after a CHECKPOINT and
breaks their WAL down by relation and record type with pg_waldump, read
from the server's data directory (so on the same machine, as root or the
server's user).

    python -m bench.v6_claimed --url URL --interleaved [--jobs N] [--rounds R]

instead prepares one database per system and drains them side by side,
call by call, alternating which goes first, so that both meet the same load
on a shared machine: server time per job only (the WAL of the two mixes).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import re
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

from bench.serverstats import find_waldump
from fenceq.backends.migrations import apply_postgres_steps_through

PROTO = Path(__file__).with_name("v6_claimed_proto.sql")
SYSTEMS = {"version 5": False, "§1 layout": True}
BATCHES = (1, 16)
SERVER_MS = ("SELECT sum(total_exec_time) FROM pg_stat_statements"
             " WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
             " AND (query LIKE '%fenceq.claim%' OR query LIKE '%fenceq.complete%')")
TABLE_WRITES = ("SELECT sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_hot_upd), sum(n_tup_del)"
                " FROM pg_stat_all_tables WHERE schemaname = 'fenceq'")


def install(url: str, proto: bool, jobs: int) -> None:
    """Version 5 with `jobs` pending jobs in queue 'q', then the laboratory
    on top when `proto`."""
    apply_postgres_steps_through(url, "0005_fenceq_v5")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT fenceq.create_queue('q')")
        conn.execute("SELECT fenceq.submit_batch('q', (SELECT jsonb_agg(jsonb_build_object("
                     "'task', 't', 'payload', jsonb_build_object('i', i))) FROM generate_series(1, %s) AS i))",
                     (jobs,))
        if proto:
            conn.execute(PROTO.read_text(encoding="utf-8"))


def drain(conn: psycopg.Connection, jobs: int, batch: int) -> int:
    """Claim and complete until `jobs` are done or nothing is claimed."""
    done = 0
    while done < jobs:
        if batch == 1:
            row = conn.execute("SELECT job_id, owner_id, generation, claim_token"
                               " FROM fenceq.claim_next(ARRAY['q'], 'w', %s)", (uuid.uuid4().hex,)).fetchone()
            if row is None:
                break
            conn.execute("SELECT fenceq.complete(%s, %s, %s, %s)", row)
            done += 1
            continue
        rows = conn.execute("SELECT job_id, owner_id, generation, claim_token"
                            " FROM fenceq.claim_batch(ARRAY['q'], 'w', %s)",
                            ([uuid.uuid4().hex for _ in range(batch)],)).fetchall()
        if not rows:
            break
        conn.execute("SELECT fenceq.complete_batch(%s, %s, %s, %s)", [list(col) for col in zip(*rows)])
        done += len(rows)
    return done


@contextlib.contextmanager
def prepared(base: str, proto: bool, jobs: int) -> Iterator[psycopg.Connection]:
    """A connection to a database of its own, installed, vacuumed and
    checkpointed; the database is dropped afterwards."""
    name = "v6claimed_" + uuid.uuid4().hex[:8]
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        install(url, proto, jobs)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
            yield conn
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def measure(base: str, proto: bool, jobs: int, batch: int) -> dict[str, float]:
    with prepared(base, proto, jobs) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_force_next_flush()")
        before = conn.execute(TABLE_WRITES).fetchone()
        conn.execute("SELECT pg_stat_statements_reset()")
        lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        if drain(conn, jobs, batch) != jobs:
            raise RuntimeError("the drain stopped short")
        wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,)).fetchone()[0]
        server_ms = conn.execute(SERVER_MS).fetchone()[0]
        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.6)  # the statistics collector's flush interval
        after = conn.execute(TABLE_WRITES).fetchone()
    inserts, updates, hot, deletes = ((b - a) / jobs for a, b in zip(before, after))
    return {"server_us": server_ms * 1000 / jobs, "wal": float(wal) / jobs,
            "inserts": inserts, "updates": updates, "hot": hot, "deletes": deletes}


def interleaved(base: str, jobs: int, batch: int) -> dict[str, float]:
    """Server µs per job of each system, drained side by side."""
    with contextlib.ExitStack() as stack:
        conns = {system: stack.enter_context(prepared(base, proto, jobs)) for system, proto in SYSTEMS.items()}
        for conn in conns.values():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        next(iter(conns.values())).execute("SELECT pg_stat_statements_reset()")
        done = dict.fromkeys(conns, 0)
        step = 0
        while min(done.values()) < jobs:
            order = list(conns) if step % 2 == 0 else list(reversed(conns))
            for system in order:
                done[system] += drain(conns[system], min(batch, jobs - done[system]), batch)
            step += 1
        return {system: conn.execute(SERVER_MS).fetchone()[0] * 1000 / jobs for system, conn in conns.items()}


def wal_records(base: str, proto: bool, jobs: int) -> list[tuple[str, str, float, float]]:
    """(relation, record type, bytes per job, records per job) of a drain
    one at a time, largest first."""
    with prepared(base, proto, jobs) as conn:
        relations = dict(conn.execute("SELECT relfilenode::text, relname FROM pg_class"
                                      " WHERE relnamespace = 'fenceq'::regnamespace").fetchall())
        waldir = Path(conn.execute("SHOW data_directory").fetchone()[0], "pg_wal")
        start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        drain(conn, jobs, 1)
        end = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        # Before the database is dropped: DROP DATABASE's checkpoint may
        # recycle the segments.
        dump = subprocess.run([find_waldump() or "pg_waldump", "-p", str(waldir),
                               "-s", str(start), "-e", str(end)],
                              capture_output=True, text=True, check=True).stdout
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for line in dump.splitlines():
        record = re.search(r"len \(rec/tot\):\s+\d+/\s*(\d+),.*desc: (\w+)", line)
        if record is None:
            continue
        relation = re.search(r"rel \d+/\d+/(\d+)", line)
        key = (relations.get(relation.group(1), "(other)") if relation else "(none)", record.group(2))
        totals[key][0] += int(record.group(1)) / jobs
        totals[key][1] += 1 / jobs
    return sorted(((rel, kind, b, n) for (rel, kind), (b, n) in totals.items()), key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wal-records", action="store_true")
    parser.add_argument("--interleaved", action="store_true")
    args = parser.parse_args()
    if args.interleaved:
        for batch in BATCHES:
            runs = [interleaved(args.url, args.jobs, batch) for _ in range(args.rounds)]
            cells = " | ".join(f"{statistics.median(r[s] for r in runs):.0f}" for s in SYSTEMS)
            ratios = ", ".join(f"{r['§1 layout'] / r['version 5']:.2f}" for r in runs)
            print(f"batches of {batch}: server µs per job, " + " | ".join(SYSTEMS) + f": {cells}"
                  f" (§1 ÷ version 5 per round: {ratios})")
        return
    if args.wal_records:
        for system, proto in SYSTEMS.items():
            rows = wal_records(args.url, proto, args.jobs)
            own = sum(r[2] for r in rows if r[0] != "(other)")
            print(f"\n{system}: {own:,.0f} WAL bytes per job, one at a time, in fenceq's relations and"
                  f" the commits ({sum(r[2] for r in rows):,.0f} with the rest of the server's)\n")
            print("| relation | record | bytes per job | records per job |\n|---|---|---:|---:|")
            for relation, kind, size, count in rows:
                if size >= 5:
                    print(f"| {relation} | {kind} | {size:,.0f} | {count:.2f} |")
        return
    for batch in BATCHES:
        runs: dict[str, list[dict[str, float]]] = {s: [] for s in SYSTEMS}
        for r in range(args.rounds):
            for system in (list(SYSTEMS) if r % 2 == 0 else list(reversed(SYSTEMS))):
                runs[system].append(measure(args.url, SYSTEMS[system], args.jobs, batch))
        print(f"\n| per job, batches of {batch} | " + " | ".join(SYSTEMS) + " |")
        print("|---|" + "---:|" * len(SYSTEMS))
        for key, label, fmt in (("server_us", "server time (µs, claim + complete calls)", "{:.0f}"),
                                ("wal", "WAL bytes", "{:,.0f}"),
                                ("inserts", "heap inserts", "{:.2f}"), ("updates", "updates", "{:.2f}"),
                                ("hot", "of them HOT", "{:.2f}"), ("deletes", "deletes", "{:.2f}")):
            cells = [fmt.format(statistics.median(x[key] for x in runs[s])) for s in SYSTEMS]
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
