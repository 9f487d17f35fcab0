"""How far one primary goes: claim_next + complete with 1 to 64 concurrent
connections, direct and (optionally) through PgBouncer in transaction mode.

Each connection is a thread with its own ``fenceq.connect(url)`` client,
looping claim_next + complete on one pre-filled queue until the run's jobs
are done. Per run: jobs/s, client-side claim_next latency p50/p95, server
CPU (postmaster and its children, from /proc), bench-process CPU (the
client side, GIL included), WAL bytes per job, and a census of
``pg_stat_activity`` wait events sampled every 0.2 s on the run's database.

    .venv/bin/python -m bench.scaling --url postgresql://postgres@127.0.0.1:54339/postgres \\
        [--pgbouncer-port 54334]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import fenceq

from . import cpu
from .db import clear_finished, connect, install, plain_requests, recreate_database, vacuum

QUEUE = "scaling"
CONNECTIONS = (1, 2, 4, 8, 16, 32, 64)
FILL_CHUNK = 1000
WAIT_SAMPLE_SECONDS = 0.2


def fill(url: str, jobs: int) -> None:
    client = fenceq.connect(url)
    try:
        for start in range(0, jobs, FILL_CHUNK):
            client.submit_batch(QUEUE, json.loads(plain_requests(min(FILL_CHUNK, jobs - start), start)))
    finally:
        client.close()


def sample_waits(admin_url: str, dbname: str, stop: threading.Event, waits: Counter) -> None:
    """Counts, per sample, the run's backends by wait event ("running" when
    none) so lock and WAL waits show beside CPU."""
    with connect(admin_url) as conn:
        while not stop.is_set():
            rows = conn.execute(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'running') "
                "FROM pg_stat_activity WHERE datname = %s AND state = 'active' "
                "AND pid <> pg_backend_pid()", (dbname,)).fetchall()
            waits["samples"] += 1
            waits.update(row[0] for row in rows)
            stop.wait(WAIT_SAMPLE_SECONDS)


def pgbouncer_pid(port: int | None) -> int | None:
    """The PgBouncer of scripts/pgbouncer-test-server on this port, from its pid file."""
    if port is None:
        return None
    root = os.environ.get("FENCEQ_PGBOUNCER_ROOT",
                          f"{os.environ.get('TMPDIR', '/tmp')}/fenceq-pgbouncer-{os.getuid()}-{port}")
    try:
        return int(Path(root, "pgbouncer.pid").read_text().split()[0])
    except (OSError, ValueError):
        return None


def work(url: str, remaining: list[int], lock: threading.Lock, latencies: list[float],
         ready: threading.Barrier, done: threading.Barrier, measured: threading.Event) -> None:
    client = fenceq.connect(url)
    owner = f"scaling-{uuid.uuid4().hex[:8]}"
    mine = []
    try:
        ready.wait()
        while True:
            with lock:
                if remaining[0] <= 0:
                    break
                remaining[0] -= 1
            began = time.perf_counter()
            claim = client.claim_next([QUEUE], owner, uuid.uuid4().hex)
            mine.append(time.perf_counter() - began)
            if claim is None:
                break
            client.complete(claim.fence)
        done.wait()
        measured.wait()  # keep the backend alive until the CPU sample, so /proc still counts it
    finally:
        client.close()
        with lock:
            latencies.extend(mine)


def run(url: str, admin_url: str, dbname: str, connections: int, jobs: int,
        bouncer: int | None = None) -> dict:
    fill(url, jobs)
    with connect(admin_url) as admin:
        vacuum(admin)
        admin.execute("CHECKPOINT")
        postmaster = cpu.postmaster_pid(admin)
        lsn_start = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    remaining, lock, latencies = [jobs], threading.Lock(), []
    ready, done = threading.Barrier(connections + 1), threading.Barrier(connections + 1)
    measured = threading.Event()
    threads = [threading.Thread(target=work, args=(url, remaining, lock, latencies, ready, done, measured))
               for _ in range(connections)]
    for thread in threads:
        thread.start()
    waits, stop = Counter(), threading.Event()
    sampler = threading.Thread(target=sample_waits, args=(admin_url, dbname, stop, waits))
    ready.wait()  # every client connected: time the work only
    before, began = cpu.sample(postmaster, dbname=dbname), time.perf_counter()
    bouncer_before = cpu._proc_times(bouncer, children=False) if bouncer else 0.0
    sampler.start()
    done.wait()
    elapsed = time.perf_counter() - began
    after = cpu.sample(postmaster, dbname=dbname)
    bouncer_cpu = cpu._proc_times(bouncer, children=False) - bouncer_before if bouncer else 0.0
    measured.set()
    for thread in threads:
        thread.join()
    stop.set()
    sampler.join()
    with connect(admin_url) as admin:
        wal = admin.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (lsn_start,)).fetchone()[0]
        left = admin.execute("SELECT count(*) FROM fenceq._jobs WHERE status <> 'completed'").fetchone()[0]
        admin.execute("TRUNCATE fenceq._jobs CASCADE")
    load = cpu.other_load(before, after)
    latencies.sort()
    samples = waits.pop("samples", 0) or 1
    return {
        "connections": connections, "jobs": jobs, "seconds": round(elapsed, 2),
        "jobs_per_s": round(jobs / elapsed, 1),
        "claim_p50_ms": round(1000 * statistics.median(latencies), 2),
        "claim_p95_ms": round(1000 * latencies[int(0.95 * (len(latencies) - 1))], 2),
        "server_cpu_cores": round(load["server"] / elapsed, 2) if load else None,
        "client_cpu_cores": round(load["bench"] / elapsed, 2) if load else None,
        "pgbouncer_cpu_cores": round(bouncer_cpu / elapsed, 2),
        "other_cpu_cores": round((load["other"] - bouncer_cpu) / elapsed, 2) if load else None,
        "wal_bytes_per_job": round(float(wal) / jobs),
        "not_completed": left,
        "mean_backends_by_wait": {k: round(v / samples, 2) for k, v in waits.most_common(6)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a server URL (any database; the bench makes its own)")
    parser.add_argument("--dbname", default="fenceq_scaling")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per run")
    parser.add_argument("--pgbouncer-port", type=int, help="also run through PgBouncer on this port")
    parser.add_argument("--connections", default=",".join(map(str, CONNECTIONS)))
    args = parser.parse_args()
    url = recreate_database(args.url, args.dbname)
    install(url, [QUEUE])
    targets = [("direct", url, None)]
    if args.pgbouncer_port:
        host = url.split("@", 1)[1].split(":", 1)[0]
        targets.append(("pgbouncer", f"postgresql://postgres@{host}:{args.pgbouncer_port}/{args.dbname}",
                        pgbouncer_pid(args.pgbouncer_port)))
    print(json.dumps({"load_average_start": os.getloadavg(), "cores": os.cpu_count()}))
    for label, target, bouncer in targets:
        for connections in (int(n) for n in args.connections.split(",")):
            result = run(target, url, args.dbname, connections, args.jobs, bouncer)
            print(json.dumps({"path": label, **result}), flush=True)
    print(json.dumps({"load_average_end": os.getloadavg()}))


if __name__ == "__main__":
    main()
