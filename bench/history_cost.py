"""``python -m bench.history_cost``: what version 6's job history costs per
job, and what version 6 costs with it off, against version 5, on one server
in one run (issue 26).

Three databases: ``v5`` migrated by the released steps 0001-0005 only,
``off`` by every step (history off, the default), ``on`` by every step with
``set_queue_history(queue, true)``. Two paths of a worker, one connection:

- ``batch``: ``--jobs`` no-op jobs submitted by ``submit_batch`` of 1,000
  (the fill, a window of its own), then drained by fenceq's raw loop:
  ``claim_batch`` of 100 tokens and one ``complete_batch`` of those 100,
  until the queue is empty;
- ``single``: ``--single-jobs`` times ``submit`` + ``claim_next`` +
  ``complete`` of one job.

Each round measures every (path, tracking) with the three systems back to
back, their order rotating round by round, so that they share the machine's
noise; a CHECKPOINT before every window. Every window twice: ``top`` (the
session's ``pg_stat_statements.track = top``: jobs/s and server time of the
calls the client sent, nothing nested recorded) and ``all`` (track = all,
as the project's diagnostic windows: server time with the nested
bookkeeping, statements per job, time per statement, and the WAL census by
relation read with pg_waldump). WAL bytes per job from the insert position.
On a server without pg_stat_statements the server figures are absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
from pathlib import Path

import psycopg

from fenceq.backends.migrations import apply_postgres_steps_through as apply_through

from . import db, drivers
from . import statements as sql
from .serverstats import ServerStats

SYSTEMS = ("v5", "off", "on")
TITLES = {"v5": "version 5", "off": "v6, history off", "on": "v6, history on"}
LAST_STEP = {"v5": "0005_fenceq_v5", "off": "0006_fenceq_v6", "on": "0006_fenceq_v6"}
VERSION = {"v5": "5", "off": "6", "on": "6"}
QUEUE = "history_cost"
BATCH = 100  # tokens per claim_batch, fences per complete_batch
FILL = 1000  # requests per submit_batch
TRACKS = ("top", "all")
EVENTS = "fenceq._events"  # its heap and, by name prefix, its two indexes
DB_PREFIX = "fenceq_history_cost"


def install(url: str, system: str) -> None:
    apply_through(url, LAST_STEP[system])
    with db.connect(url) as conn:
        if _has_statements(conn):
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(sql.FQ_CREATE_QUEUE, {"queue": QUEUE})
        if system == "on":
            conn.execute("SELECT fenceq.set_queue_history(queue => %s::text, enabled => true)", (QUEUE,))


def _has_statements(conn) -> bool:
    return conn.execute("SELECT current_setting('shared_preload_libraries') ~ 'pg_stat_statements'"
                        ).fetchone()[0]


class _WalOnly(ServerStats):
    """A server without pg_stat_statements: WAL figures only."""

    def begin(self) -> None:
        self._start = self._wal()

    def _statements(self) -> list[dict]:
        return []


class System:
    """One database: its admin connection, a statistics window with and
    one without the WAL census, and a measured connection per tracking."""

    def __init__(self, name: str, url: str, statements: bool):
        self.name, self.url = name, url
        self.admin = db.connect(url)
        if statements:  # the admin's own statements (probes, purge, VACUUM) stay out of the windows
            self.admin.execute("SET pg_stat_statements.track = 'none'")
        kind = ServerStats if statements else _WalOnly
        self.stats = kind(self.admin)
        self.stats_no_census = kind(self.admin)
        self.stats_no_census.waldump = None
        self.has_events = name != "v5"
        self.conns: dict[str, psycopg.AsyncConnection] = {}

    def vacuum(self) -> None:
        tables = "fenceq._jobs, fenceq._claims, fenceq._submissions" + (f", {EVENTS}" if self.has_events else "")
        self.admin.execute(f"VACUUM (ANALYZE) {tables}")

    def events(self) -> int | None:
        return self.admin.execute(f"SELECT count(*) FROM {EVENTS}").fetchone()[0] if self.has_events else None

    def clear(self) -> None:
        while self.admin.execute(sql.FQ_PURGE).fetchone()[0] > 0:  # the finished jobs and their events
            pass
        if self.has_events and self.events():
            raise RuntimeError(f"{self.name}: purge left events behind")


# --- the windows ------------------------------------------------------------------

def _name(query: str) -> str:
    found = re.search(r"fenceq\.(\w+)\(", query)
    return found.group(1) if found else " ".join(query.split())[:60]


def figures(system: System, window: dict, jobs: int, seconds: float, events: int | None) -> dict:
    top = [s for s in window["statements"] if s["toplevel"]]
    out = {"jobs": jobs, "seconds": seconds, "jobs_s": jobs / seconds,
           "wal_bytes": window["wal"]["bytes"] / jobs, "wal_records": window["wal"]["records"] / jobs,
           "full_page_images": window["wal"]["fpi"] / jobs,
           "events": None if events is None else events / jobs}
    if window["statements"]:
        out["server_us"] = sum(s["total_ms"] for s in top) * 1000 / jobs
        out["statements"] = sum(s["calls"] for s in window["statements"]) / jobs
        out["calls_us"] = {_name(s["query"]): s["total_ms"] * 1000 / s["calls"] for s in top}
        out["statements_us"] = {" ".join(s["query"].split())[:100]: round(s["total_ms"] * 1000 / s["calls"], 2)
                                for s in window["statements"][:25]}
    if window["relations"] is not None:
        census: dict[str, float] = {}
        for relation, counts in window["relations"].items():
            for kind, n in counts.items():
                census[kind] = census.get(kind, 0) + n / jobs
                if relation.startswith(EVENTS):
                    census[f"events {kind}"] = census.get(f"events {kind}", 0) + n / jobs
        out["census"] = {kind: round(n, 3) for kind, n in sorted(census.items())}
        out["by_relation"] = window["relations"]
    return out


async def batch_windows(system: System, track: str, jobs: int) -> dict:
    """The fill by submit_batch, then the drain by claim_batch and
    complete_batch: one window each."""
    conn = system.conns[track]
    stats = system.stats if track == "all" else system.stats_no_census
    arrays = [db.plain_requests(min(FILL, jobs - start), start) for start in range(0, jobs, FILL)]
    out = {}
    for part in ("submit_batch", "drain"):
        before = system.events()
        db.checkpoint(system.admin)
        stats.begin()
        started = time.perf_counter()
        if part == "submit_batch":
            done = await drivers.submit_batches(conn, "fill", sql.FQ_SUBMIT_BATCH, QUEUE, arrays)
        else:
            done = await drivers.drain_batched(conn, owner="bench", system="fenceq", queue=QUEUE, size=BATCH)
        seconds = time.perf_counter() - started
        calls = len(arrays) if part == "submit_batch" else 2 * -(-jobs // BATCH) + 1
        window = stats.end(calls, jobs)
        if done != jobs:
            raise RuntimeError(f"{system.name} {part}: {done} of {jobs} jobs")
        after = system.events()
        out[part] = figures(system, window, jobs, seconds, None if before is None else after - before)
        if part == "submit_batch":
            system.vacuum()
    system.clear()
    system.vacuum()  # no autovacuum of the purged rows in a later window
    return out


async def single_window(system: System, track: str, jobs: int) -> dict:
    """submit, claim_next, complete of one job, ``jobs`` times."""
    conn = system.conns[track]
    stats = system.stats if track == "all" else system.stats_no_census
    before = system.events()
    db.checkpoint(system.admin)
    stats.begin()
    started = time.perf_counter()
    for i in range(jobs):
        await (await conn.execute(sql.FQ_SUBMIT, {"queue": QUEUE, "task": "bench",
                                                  "payload": '{"n": %d}' % i})).fetchone()
        row = await drivers.fenceq_claim(conn, QUEUE, "bench")
        if row is None:
            raise RuntimeError(f"{system.name}: the job just submitted was not claimed")
        await drivers.fenceq_complete(conn, row, "bench")
    seconds = time.perf_counter() - started
    window = stats.end(3 * jobs, jobs)
    after = system.events()
    out = {"single": figures(system, window, jobs, seconds, None if before is None else after - before)}
    system.clear()
    system.vacuum()
    return out


async def warm(system: System) -> None:
    """Plans cached on every measured connection before the first window."""
    for conn in system.conns.values():
        db.fill(system.admin, "fenceq", QUEUE, 3 * BATCH)
        await drivers.drain_batched(conn, owner="warm", system="fenceq", queue=QUEUE, size=BATCH)
        await drivers.submit_batches(conn, "warm", sql.FQ_SUBMIT_BATCH, QUEUE, [db.plain_requests(10)])
        await drivers.drain_per_job(conn, owner="warm", system="fenceq", queue=QUEUE)
    system.clear()
    system.vacuum()


async def measure(systems: dict[str, System], rounds: int, jobs: int, single_jobs: int,
                  log=lambda message: print(message, flush=True)) -> list[dict]:
    """Every round: each (path, tracking), the three systems back to back,
    their order rotated by the round."""
    for system in systems.values():
        for track in TRACKS:
            system.conns[track] = (await drivers.open_connections(system.url, 1, track=track))[0]
        await warm(system)
    out = []
    try:
        for r in range(rounds):
            order = SYSTEMS[r % 3:] + SYSTEMS[:r % 3]
            record: dict = {"order": list(order), "load_average": os.getloadavg()[0]}
            for path, size in (("batch", jobs), ("single", single_jobs)):
                for track in TRACKS:
                    for name in order:
                        window = (await batch_windows(systems[name], track, size) if path == "batch"
                                  else await single_window(systems[name], track, size))
                        for part, values in window.items():
                            record.setdefault(part, {}).setdefault(track, {})[name] = values
            out.append(record)
            log(f"round {r + 1}/{rounds}: " + json.dumps(
                {part: {name: round(v.get("server_us", v["jobs_s"]), 1) for name, v in record[part]["top"].items()}
                 for part in ("submit_batch", "drain", "single")}))
    finally:
        for system in systems.values():
            await drivers.close_connections(list(system.conns.values()))
    return out


# --- the summary ----------------------------------------------------------------

PARTS = ("drain", "submit_batch", "single")
KEYS = ("jobs_s", "server_us", "statements", "wal_bytes", "wal_records", "full_page_images", "events")


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def summarize(rounds: list[dict]) -> dict:
    """Medians and spreads per (part, tracking, system, figure); ratios
    on/off and off/v5 taken round by round (the same round's noise), then
    their median and spread; the census of the tracked windows."""
    out: dict = {}
    for part in PARTS:
        for track in TRACKS:
            for name in SYSTEMS:
                runs = [r[part][track][name] for r in rounds]
                cell = out.setdefault(part, {}).setdefault(track, {}).setdefault(name, {})
                for key in KEYS:
                    values = [run[key] for run in runs if run.get(key) is not None]
                    if values:
                        cell[key] = _spread(values)
                calls = {call for run in runs for call in run.get("calls_us", {})}
                cell["calls_us"] = {call: _spread([run["calls_us"][call] for run in runs
                                                   if call in run.get("calls_us", {})]) for call in sorted(calls)}
                if "census" in runs[0]:
                    cell["census"] = {kind: statistics.median(run["census"].get(kind, 0) for run in runs)
                                      for kind in runs[-1]["census"]}
            for label, (a, b) in {"off/v5": ("off", "v5"), "on/off": ("on", "off"), "on/v5": ("on", "v5")}.items():
                ratios = {}
                for key in ("jobs_s", "server_us", "wal_bytes"):
                    pairs = [(r[part][track][a].get(key), r[part][track][b].get(key)) for r in rounds]
                    if all(x is not None and y for x, y in pairs):
                        ratios[key] = _spread([x / y for x, y in pairs])
                out[part][track][label] = ratios
    return out


# --- the tables ---------------------------------------------------------------------

PART_TITLES = {"drain": f"drain: claim_batch of {BATCH} + complete_batch of those {BATCH}",
               "submit_batch": f"fill: submit_batch of {FILL:,}",
               "single": "one job: submit + claim_next + complete"}


def _cell(spread: dict | None, fmt: str) -> str:
    if not spread:
        return "—"
    return f"{fmt.format(spread['median'])} ({fmt.format(spread['min'])}–{fmt.format(spread['max'])})"


def _ratio(spread: dict | None) -> str:
    if not spread:
        return "—"
    return f"{spread['median']:.3f} ({spread['min']:.3f}–{spread['max']:.3f})"


def markdown(record: dict) -> str:
    summary, args, server = record["summary"], record["args"], record["server"]
    lines = [f"{record['started']}, {server['version']} (fsync {server['fsync']}, "
             f"pg_stat_statements.track {server.get('pg_stat_statements.track', 'not loaded')}, "
             f"jit {server['jit']}), {record['machine']['nproc']} cores, load average "
             f"{record['load_average'][0]:.1f} at the start, {record['load_average_end'][0]:.1f} at the end; "
             f"measured code {record['measured_code']}; --jobs {args['jobs']} --single-jobs "
             f"{args['single_jobs']} --rounds {args['rounds']} ({record['seconds']:.0f} s).", "",
             "Medians of the rounds, (min–max) across rounds; ratios taken round by round. "
             "`top`: windows with the session's pg_stat_statements.track = top; "
             "`all`: track = all (statements and the WAL census).", ""]
    rows = (("jobs/s (top)", "top", "jobs_s", "{:,.0f}"),
            ("server µs per job (top)", "top", "server_us", "{:,.1f}"),
            ("server µs per job (all)", "all", "server_us", "{:,.1f}"),
            ("statements per job (all)", "all", "statements", "{:.2f}"),
            ("WAL bytes per job", "top", "wal_bytes", "{:,.0f}"),
            ("events rows per job", "top", "events", "{:.2f}"))
    for part in PARTS:
        lines += [f"| {PART_TITLES[part]}, per job | {' | '.join(TITLES[s] for s in SYSTEMS)} "
                  "| off / v5 | on / off |", "|---|" + "---:|" * 5]
        for label, track, key, fmt in rows:
            cells = [_cell(summary[part][track][s].get(key), fmt) for s in SYSTEMS]
            ratios = [_ratio(summary[part][track][pair].get(key)) for pair in ("off/v5", "on/off")]
            lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
        census = [summary[part]["all"][s].get("census", {}) for s in SYSTEMS]
        for label, kind in (("index entries per job (all relations)", "index entries"),
                            ("of which on _events' two indexes", "events index entries"),
                            ("heap inserts on _events per job", "events heap inserts")):
            if any(census):
                lines.append(f"| {label} | " + " | ".join(f"{c.get(kind, 0):.2f}" for c in census) + " | | |")
        lines.append("")
    lines += ["| server µs per call (top), median (min–max) | " + " | ".join(TITLES[s] for s in SYSTEMS) + " |",
              "|---|" + "---:|" * 3]
    for part in PARTS:
        calls = sorted({c for s in SYSTEMS for c in summary[part]["top"][s].get("calls_us", {})})
        for call in calls:
            lines.append(f"| {call} ({part}) | " + " | ".join(
                _cell(summary[part]["top"][s]["calls_us"].get(call), "{:,.1f}") for s in SYSTEMS) + " |")
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------

def run(args: argparse.Namespace, log=lambda message: print(message, flush=True)) -> dict:
    urls = {name: db.recreate_database(args.url, f"{args.db_prefix}_{name}") for name in SYSTEMS}
    for name, url in urls.items():
        install(url, name)
    started_at = time.perf_counter()
    systems: dict[str, System] = {}
    try:
        with db.connect(args.url) as admin:
            statements = _has_statements(admin)
            server = db.server_facts(admin)
        systems = {name: System(name, url, statements) for name, url in urls.items()}
        versions = {name: db.fenceq_version(s.admin) for name, s in systems.items()}
        if versions != VERSION:
            raise SystemExit(f"bench.history_cost: expected versions {VERSION}, found {versions}")
        record = {"server": server, "machine": db.machine_facts(),
                  "measured_code": db.git_commit(Path(__file__).resolve().parents[1]),
                  "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "load_average": list(os.getloadavg()), "versions": versions,
                  "args": {k: str(v) for k, v in vars(args).items()}}
        record["rounds"] = asyncio.run(measure(systems, args.rounds, args.jobs, args.single_jobs, log))
    finally:
        for system in systems.values():
            system.admin.close()
        for name in SYSTEMS:
            db.drop_database(args.url, f"{args.db_prefix}_{name}")
    record["load_average_end"] = list(os.getloadavg())
    record["seconds"] = time.perf_counter() - started_at
    record["summary"] = summarize(record["rounds"])
    return record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.history_cost", description=__doc__)
    parser.add_argument("--url", required=True, help="a server (preloading pg_stat_statements for server time)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per batch drain")
    parser.add_argument("--single-jobs", type=int, default=2_000, help="jobs per one-job window")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the systems' order rotates each round")
    parser.add_argument("--db-prefix", default=DB_PREFIX)
    parser.add_argument("--out", type=Path, default=Path("bench/runs/history-cost.json"),
                        help="the JSON record; its tables are written beside it (.md)")
    parser.add_argument("--markdown", action="store_true", help="print the tables of --out and stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return db.record_main(parse_args(argv), run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
