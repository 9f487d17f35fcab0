"""The bench database: created fresh on the given server, fenceq installed
with ``fenceq.migrate.migrate``, the bare baseline table beside it; fills,
clean-up between runs, and facts about the machine and the server."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from . import statements as sql

FILL_CHUNK = 1000  # jobs per submit_batch call when filling (and per bare batch insert)


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def recreate_database(server_url: str, dbname: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", dbname):
        raise SystemExit("bench: a database name must be a plain lower-case identifier")
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {dbname}")
    return with_database(server_url, dbname)


def drop_database(server_url: str, dbname: str) -> None:
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")


def install(url: str, queues: list[str]) -> None:
    from fenceq.migrate import migrate

    migrate(url)
    with connect(url) as conn:
        # Where it is installed: the pgserver wheel's PostgreSQL 16 lacks it.
        conn.execute("DO $$ BEGIN IF EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements')"
                     " THEN CREATE EXTENSION IF NOT EXISTS pg_stat_statements; END IF; END $$")
        conn.execute(sql.BARE_SCHEMA)
        for queue in queues:
            conn.execute(sql.FQ_CREATE_QUEUE, {"queue": queue})


def plain_requests(count: int, start: int = 0) -> str:
    """A submit_batch request array of plain jobs (task and payload only)."""
    return json.dumps([{"task": "bench", "payload": {"n": start + i}} for i in range(count)])


def owned_requests(count: int, tag: str) -> str:
    """The same array with a unique submission_id per element."""
    return json.dumps([{"task": "bench", "payload": {"n": i}, "submission_id": f"{tag}-{i}"}
                       for i in range(count)])


def fill(conn, system: str, queue: str, count: int) -> None:
    """Add `count` pending jobs: fenceq through submit_batch (the public
    API, never its private tables), bare through its batch insert."""
    statement = sql.FQ_SUBMIT_BATCH if system == "fenceq" else sql.BARE_INSERT_BATCH
    done = 0
    while done < count:
        size = min(FILL_CHUNK, count - done)
        conn.execute(statement, {"queue": queue, "requests": plain_requests(size, done)})
        done += size


def clear_finished(conn) -> None:
    """Drop finished jobs of both systems (fenceq through its own purge,
    which also drops their ledger rows) so every run starts alike."""
    while conn.execute(sql.FQ_PURGE).fetchone()[0] > 0:
        pass
    conn.execute(sql.BARE_CLEAR_FINISHED)


def vacuum(conn) -> None:
    conn.execute("VACUUM (ANALYZE) fenceq._jobs, fenceq._claims, fenceq._submissions, bare_jobs")


def checkpoint(conn) -> None:
    """Before every timed run: production claims pages written before the
    last checkpoint, so the first change to each page pays a full-page image."""
    conn.execute("CHECKPOINT")


def commit_latency(conn, commits: int = 20) -> float:
    """Median seconds per durable one-row commit just before a timed run:
    the disk's fsync latency, which other load on the machine moves."""
    conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (n integer)")
    times = []
    for i in range(commits):
        started = time.perf_counter()
        conn.execute("INSERT INTO bench_commit_probe VALUES (%s)", (i,))
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fenceq_version(conn) -> str:
    return conn.execute("SELECT fenceq.version()").fetchone()[0]


def record_main(args, run, markdown) -> int:
    """A recording bench's main: ``--markdown`` prints the tables of
    ``--out``; otherwise ``run(args)`` makes the record, written to ``--out``
    as JSON with its tables beside it (.md), so that the record and its
    reading never disagree, and printed."""
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8"))))
        return 0
    record = run(args)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(record) + "\n", encoding="utf-8")
    print(markdown(record))
    return 0


# --- machine and server facts -------------------------------------------------

SETTINGS = ["server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
            "shared_buffers", "max_wal_size", "checkpoint_timeout", "autovacuum", "jit",
            "shared_preload_libraries", "pg_stat_statements.track"]


def server_facts(conn) -> dict[str, str]:
    facts = {"version": conn.execute("SELECT version()").fetchone()[0].split(" on ")[0]}
    rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY (%s)",
                        (SETTINGS,)).fetchall()
    for name, setting, unit in rows:
        facts[name] = _pretty(setting, unit)
    return facts


def _pretty(setting: str, unit: str | None) -> str:
    if unit in ("8kB", "kB", "MB") and setting.lstrip("-").isdigit():
        kib = int(setting) * {"8kB": 8, "kB": 1, "MB": 1024}[unit]
        return f"{kib // 1024}MB" if kib % 1024 == 0 else f"{kib}kB"
    return f"{setting}s" if unit == "s" else setting


def machine_facts() -> dict[str, str]:
    facts = {"nproc": _run(["nproc"]) or str(os.cpu_count()),
             "python": platform.python_version(),
             "psycopg": psycopg.__version__}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    return facts


MEASURED_CODE = ["sql", "python_client", "migrations"]


def git_commit(repo: Path) -> str:
    """The last commit that changed the measured code (not the harness or
    the figures), marked when the working tree changes it further."""
    commit = _run(["git", "-C", str(repo), "log", "-1", "--format=%h", "--", *MEASURED_CODE]) or "unknown"
    dirty = _run(["git", "-C", str(repo), "status", "--porcelain", "--", *MEASURED_CODE])
    return commit + ("+changes" if dirty else "")


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
