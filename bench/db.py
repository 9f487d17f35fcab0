"""The bench database: created fresh on the given server, fenceq installed
with ``fenceq.migrate.migrate``, the bare baseline table beside it."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from . import statements as sql

QUEUES = {
    "drain": "bench_drain",          # per-job drains
    "batch": "bench_batch",          # batched drains
    "client": "bench_client",        # Python client overhead
    "submit": "bench_submit",        # single submits
    "notify_on": "bench_notify_on",  # submits with the notify flag on
    "notify_off": "bench_notify_off",
    "submit_batch": "bench_submit_batch",
    "lat": "bench_lat",              # claim latency backlog
    "lat_b": "bench_lat_b",          # extra queues for multi-queue claims
    "lat_c": "bench_lat_c",
}
SUBMIT_QUEUES = ["submit", "notify_on", "notify_off", "submit_batch"]


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def create_database(server_url: str, dbname: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", dbname):
        raise SystemExit("bench: --db must be a plain lower-case identifier")
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {dbname}")
    return with_database(server_url, dbname)


def drop_database(server_url: str, dbname: str) -> None:
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")


def install(url: str) -> None:
    from fenceq.migrate import migrate

    migrate(url)
    with connect(url) as conn:
        conn.execute(sql.BARE_SCHEMA)
        for queue in QUEUES.values():
            conn.execute("SELECT fenceq.create_queue(queue => %s::text)", (queue,))
        conn.execute("SELECT fenceq.set_queue_notify(queue => %s::text, notify => false)",
                     (QUEUES["notify_off"],))


def fill_fenceq_api(conn, queue: str, n: int, chunk: int = 1000) -> None:
    """Fill a queue through fenceq.submit_batch (one call per `chunk` jobs)."""
    done = 0
    while done < n:
        size = min(chunk, n - done)
        requests = json.dumps([{"task": "bench", "payload": {"n": done + i}} for i in range(size)])
        conn.execute(sql.FQ_SUBMIT_BATCH, {"queue": queue, "requests": requests})
        done += size


def fill_fenceq_direct(conn, queue: str, n: int, chunk: int = 250_000) -> None:
    """Bulk-insert pending jobs straight into fenceq._jobs (large backlogs)."""
    done = 0
    while done < n:
        size = min(chunk, n - done)
        conn.execute(sql.FQ_FILL_DIRECT, {"queue": queue, "n": size})
        done += size


def fill_bare(conn, queue: str, n: int) -> None:
    if n > 0:
        conn.execute(sql.BARE_FILL, {"queue": queue, "n": n})


def pending_fenceq(conn, queue: str) -> int:
    return conn.execute("SELECT count(*) FROM fenceq._jobs WHERE queue = %s AND status = 'pending'",
                        (queue,)).fetchone()[0]


def pending_bare(conn, queue: str) -> int:
    return conn.execute("SELECT count(*) FROM bare_jobs WHERE queue = %s AND status = 'pending'",
                        (queue,)).fetchone()[0]


def vacuum(conn, checkpoint: bool = True) -> None:
    conn.execute("VACUUM (ANALYZE) fenceq._jobs, fenceq._claims, fenceq._submissions, bare_jobs")
    if checkpoint:
        conn.execute("CHECKPOINT")


def clear_finished(conn) -> None:
    """Between drain runs: drop finished jobs of both systems (fenceq via
    its own purge), then vacuum, so every run starts from the same state."""
    while conn.execute("SELECT fenceq.purge(older_than => interval '0', max_rows => 100000)"
                       ).fetchone()[0] > 0:
        pass
    conn.execute("DELETE FROM bare_jobs WHERE status <> 'pending'")
    vacuum(conn)


def clear_queues(conn, queues: list[str]) -> None:
    """After the submit phase: remove its jobs from both systems (directly,
    setup only) so the latency phase sees only its own backlog."""
    conn.execute("DELETE FROM fenceq._jobs WHERE queue = ANY (%s)", (queues,))
    conn.execute("DELETE FROM fenceq._submissions WHERE queue = ANY (%s)", (queues,))
    conn.execute("DELETE FROM bare_jobs WHERE queue = ANY (%s)", (queues,))
    vacuum(conn)


# --- machine and server facts -------------------------------------------------

SETTINGS = ["server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
            "shared_buffers", "effective_cache_size", "work_mem", "max_connections", "wal_level",
            "max_wal_size", "checkpoint_timeout", "commit_delay", "autovacuum", "jit",
            "plan_cache_mode"]


def server_facts(conn) -> dict[str, str]:
    facts = {"version": conn.execute("SELECT version()").fetchone()[0]}
    rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY (%s)",
                        (SETTINGS,)).fetchall()
    for name, setting, unit in rows:
        facts[name] = _pretty(setting, unit)
    return facts


def _pretty(setting: str, unit: str | None) -> str:
    if unit in ("8kB", "kB", "MB") and setting.lstrip("-").isdigit():
        kib = int(setting) * {"8kB": 8, "kB": 1, "MB": 1024}[unit]
        if kib % (1024 * 1024) == 0:
            return f"{kib // (1024 * 1024)}GB"
        if kib % 1024 == 0:
            return f"{kib // 1024}MB"
        return f"{kib}kB"
    if unit == "s":
        return f"{setting}s"
    return setting


def machine_facts() -> dict[str, str]:
    facts = {"nproc": _run(["nproc"]) or str(os.cpu_count()),
             "python": platform.python_version(),
             "psycopg": psycopg.__version__,
             "kernel": platform.release()}
    cpu = ""
    meminfo = Path("/proc/meminfo")
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    facts["cpu"] = cpu or platform.processor() or "unknown"
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                kib = int(line.split()[1])
                facts["memory"] = f"{kib / 1024 / 1024:.1f} GiB"
                break
    return facts


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
