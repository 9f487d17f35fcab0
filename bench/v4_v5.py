"""``python -m bench.v4_v5``: the released version 4 beside version 5 and
the bare loop, on one server in one run.

Two databases: one migrated by the released steps 0001-0004 only, one by
0001-0005 (the bare loop's table lives in that one); later steps that
change only function bodies are measured by ``python -m bench.plprofile
--compare-step``. Measured (as the storage laboratory bench/v5_layout.py
measured, whose helpers moved here when it left the tree; it lives at
commit ea2c8a9):

1. per job, claimed and completed one at a time and 10 at a time, one
   connection with statement tracking on, a CHECKPOINT before each window,
   medians of ``--diag-rounds`` windows per system, orders alternating:
   server µs (top-level statements), statements, WAL bytes, index entries
   and heap writes by kind per job;
2. with ``--later`` jobs due later and none due: server µs of an empty
   claim_next and of next_due;
3. submit_batch of 1,000 plain and of 1,000 owned requests, and the bare
   batch INSERT: server ms per batch;
4. per-job drains at 1 and 4 workers, medians of ``--rounds`` rounds,
   systems alternating, a CHECKPOINT before each, as ratios to bare;
5. the upgrade step 0005 on a version 4 database holding N jobs (half
   pending due later, a quarter pending due now, a quarter completed):
   the time the step takes (applied alone with yoyo, as ``fenceq migrate``
   would) and its statements' times, and what a claim, a submit and a
   read issued while the step holds its lock on _jobs do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from fenceq.backends.migrations import apply_postgres_steps_through as apply_through

from . import db, drivers
from . import statements as sql
from .serverstats import ServerStats

SYSTEMS = ("bare", "v4", "v5")
TITLES = {"bare": "bare", "v4": "version 4", "v5": "version 5"}
SUBMIT_QUEUE = "submits"
V4_LAST_STEP = "0004_fenceq_v4"
V5_STEP = "0005_fenceq_v5"
CLAIM_BATCH_SIZE = 100  # jobs completed per claim_batch/complete_batch pair when filling
QUEUE = "v5lab"  # the queue every measured call uses (named after the laboratory it came from)

# ``n`` jobs due later, every priority distinct, in one statement.
LATER_FILL = {
    "bare": ("INSERT INTO bare_jobs (queue, task, payload, run_at) "
             "SELECT %(queue)s, 'bench', '{}', now() + interval '1 day' + n * interval '1 second' "
             "FROM generate_series(1, %(n)s) AS n"),
    "fenceq": ("SELECT count(*) FROM fenceq.submit_batch(queue => %(queue)s::text, requests => "
               "(SELECT jsonb_agg(jsonb_build_object('task', 'bench', 'priority', n, 'run_at', "
               "now() + interval '1 day' + n * interval '1 second')) "
               "FROM generate_series(1, %(n)s) AS n))"),
}
NEXT_DUE = {"fenceq": "SELECT fenceq.next_due(queues => ARRAY[%(queue)s]::text[])"}

# The per-job table's rows: label, key(s) of per_job()'s result, format.
ROWS = (("server time per job (µs, top-level statements)", "server_us", "{:,.0f}"),
        ("statements per job (top-level and nested)", "statements", "{:.0f}"),
        ("WAL bytes per job", "wal_bytes", "{:,.0f}"),
        ("index entries per job", "index entries", "{:.2f}"),
        ("heap inserts / non-HOT updates / HOT updates / deletes per job",
         ("heap inserts", "heap updates (non-HOT)", "HOT updates", "heap deletes"), "{:.2f}"),
        ("row locks per job", "row locks", "{:.2f}"),
        ("full-page images per job", "full-page images", "{:.2f}"))


def per_job(window: dict, jobs: int) -> dict:
    """A window's figures per job: server µs and statements (top-level and
    nested), WAL, and the WAL census summed over every relation."""
    top = [s for s in window["statements"] if s["toplevel"]]
    census: dict[str, float] = {}
    for counts in (window["relations"] or {}).values():
        for kind, n in counts.items():
            census[kind] = census.get(kind, 0) + n / jobs
    return {"server_us": sum(s["total_ms"] for s in top) * 1000 / jobs,
            "statements": sum(s["calls"] for s in window["statements"]) / jobs,
            "wal_bytes": window["wal"]["bytes"] / jobs,
            **{kind: round(n, 2) for kind, n in sorted(census.items())}}


@dataclass
class Target:
    """One measured system: the driver's name for its calls (bench/drivers.py),
    its database, an admin connection there and its statistics window."""
    driver: str
    url: str
    admin: psycopg.Connection
    stats: ServerStats


def install_at(url: str, last_step: str) -> None:
    """db.install's setup on a database that stops at ``last_step``
    (migrate() would apply every step this tree holds)."""
    apply_through(url, last_step)
    with db.connect(url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(sql.BARE_SCHEMA)
        for queue in (QUEUE, SUBMIT_QUEUE):
            conn.execute(sql.FQ_CREATE_QUEUE, {"queue": queue})


def clear(target: Target) -> None:
    db.clear_finished(target.admin)


def checkpoint(targets: dict[str, Target]) -> None:
    db.checkpoint(targets["v5"].admin)


# --- 1. per job ------------------------------------------------------------------

async def diagnostics(targets: dict[str, Target], jobs: int, rounds: int, size: int | None = None) -> dict:
    """Per job, claimed and completed one by one, or ``size`` at a time; each
    system's window ``rounds`` times, the systems' order alternating, and
    every figure the median of its rounds (the last round's by_relation)."""
    windows: dict[str, list[dict]] = {system: [] for system in SYSTEMS}
    for r in range(rounds):
        for system in SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]:
            windows[system].append(await _diagnostic_window(targets, targets[system], jobs, size))
    out = {}
    for system, runs in windows.items():
        figures = {key: statistics.median(run.get(key, 0) for run in runs)
                   for key in runs[0] if key not in ("by_relation", "statements_us")}
        queries = runs[-1]["statements_us"]
        out[system] = {**figures, "server_us_rounds": [run["server_us"] for run in runs],
                       "by_relation": runs[-1]["by_relation"],
                       "statements_us": {q: statistics.median(run["statements_us"].get(q, 0) for run in runs)
                                         for q in queries}}
    return out


async def _diagnostic_window(targets: dict[str, Target], target: Target, jobs: int, size: int | None) -> dict:
    conn = (await drivers.open_connections(target.url, 1, track="all"))[0]
    try:
        claim, complete = (drivers.PER_JOB if size is None else drivers.BATCHED)[target.driver]
        db.fill(target.admin, target.driver, QUEUE, jobs)
        db.vacuum(target.admin)
        checkpoint(targets)
        target.stats.begin()
        for _ in range(jobs // (size or 1)):
            row = await claim(conn, QUEUE, "diag", *((size,) if size else ()))
            await complete(conn, row, "diag")
        window = target.stats.end(jobs * 2 // (size or 1), jobs)
    finally:
        await conn.close()
    clear(target)
    return {**per_job(window, jobs), "by_relation": window["relations"],
            "statements_us": {s["query"][:90]: round(s["total_ms"] * 1000 / s["calls"], 1)
                              for s in window["statements"]}}


# --- 2. jobs due later -------------------------------------------------------------

async def later_probes(targets: dict[str, Target], later: int, calls: int = 200) -> dict:
    """With ``later`` jobs due later (LATER_FILL) and none due: server
    µs of an empty claim and of next_due. Leaves those jobs behind."""
    out = {}
    for system in SYSTEMS:
        target = targets[system]
        for chunk in range(0, later, 10_000):
            target.admin.execute(LATER_FILL[target.driver], {"queue": QUEUE, "n": min(10_000, later - chunk)})
        db.vacuum(target.admin)
        conn = (await drivers.open_connections(target.url, 1, track="all"))[0]
        try:
            claim, _ = drivers.PER_JOB[target.driver]

            async def empty_claim():
                if await claim(conn, QUEUE, "probe") is not None:
                    raise RuntimeError(f"{system}: a job due later was claimed")

            probes = {"empty claim": empty_claim}
            if target.driver in NEXT_DUE:
                probes["next_due"] = lambda: conn.execute(NEXT_DUE[target.driver], {"queue": QUEUE})
            for name, probe in probes.items():
                for _ in range(20):  # plans cached before the window
                    await probe()
                target.stats.begin()
                for _ in range(calls):
                    await probe()
                window = target.stats.end(calls, calls)
                top = [s for s in window["statements"] if s["toplevel"]]
                out.setdefault(system, {})[name] = sum(s["total_ms"] for s in top) * 1000 / calls
        finally:
            await conn.close()
    return out


# --- 3. submit_batch -----------------------------------------------------------------

SUBMIT_VARIANTS = (("plain", ("bare", "v4", "v5")), ("owned", ("v4", "v5")))


def submit_batches(targets: dict[str, Target], batches: int, size: int = 1000) -> dict:
    """Server ms per batch of ``size`` requests (one statement each), WAL
    bytes per job, statements per job; into a queue of their own."""
    out: dict[str, dict] = {}
    for variant, systems in SUBMIT_VARIANTS:
        for system in systems:
            target = targets[system]
            statement = sql.BARE_INSERT_BATCH if target.driver == "bare" else sql.FQ_SUBMIT_BATCH
            arrays = [db.plain_requests(size, i * size) if variant == "plain"
                      else db.owned_requests(size, f"{system}-{i}") for i in range(batches + 1)]
            with target.admin.cursor() as cur:
                cur.execute(statement, {"queue": SUBMIT_QUEUE, "requests": arrays[0]})  # plan cached
                db.vacuum(target.admin)
                checkpoint(targets)
                target.stats.begin()
                for requests in arrays[1:]:
                    if cur.execute(statement, {"queue": SUBMIT_QUEUE, "requests": requests}
                                   ).fetchone()[0] != size:
                        raise RuntimeError(f"{system}: a {variant} batch did not submit {size} jobs")
                window = target.stats.end(batches, batches * size)
            top = [s for s in window["statements"] if s["toplevel"]]
            out.setdefault(variant, {})[system] = {
                "server_ms_per_batch": sum(s["total_ms"] for s in top) / batches,
                "statements_per_job": sum(s["calls"] for s in window["statements"]) / (batches * size),
                "wal_bytes_per_job": window["wal"]["bytes"] / (batches * size),
                "statements_ms": {s["query"][:90]: round(s["total_ms"] / s["calls"], 3)
                                  for s in window["statements"][:12]}}
    return out


# --- 4. drains -------------------------------------------------------------------------

async def drains(targets: dict[str, Target], rounds: int, jobs: int, workers: tuple[int, ...]) -> dict:
    conns = {system: await drivers.open_connections(targets[system].url, max(workers)) for system in SYSTEMS}
    rates: dict[str, dict[str, list[float]]] = {}
    try:
        for system in SYSTEMS:  # warm every connection's plans
            target = targets[system]
            db.fill(target.admin, target.driver, QUEUE, 20 * len(conns[system]))
            await drivers.run_workers(conns[system], drivers.drain_per_job, system=target.driver, queue=QUEUE)
            clear(target)
        for n in workers:
            for r in range(rounds):
                order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
                for system in order:
                    db.fill(targets[system].admin, targets[system].driver, QUEUE, jobs)
                for system in order:
                    db.vacuum(targets[system].admin)
                for system in order:
                    checkpoint(targets)
                    timed = await drivers.run_workers(conns[system][:n], drivers.drain_per_job,
                                                      system=targets[system].driver, queue=QUEUE)
                    if timed.jobs != jobs:
                        raise RuntimeError(f"{system}: {timed.jobs} of {jobs} jobs")
                    rates.setdefault(f"{n}", {}).setdefault(system, []).append(timed.rate)
                for system in order:
                    clear(targets[system])
    finally:
        for system_conns in conns.values():
            await drivers.close_connections(system_conns)
    return {n: {system: {"median_jobs_s": statistics.median(v), "rounds_jobs_s": v,
                         "ratio_to_bare": statistics.median([x / b for x, b in zip(v, by_system["bare"])])}
                for system, v in by_system.items()}
            for n, by_system in rates.items()}


# --- 5. the upgrade step ---------------------------------------------------------------

COMPLETE_FILLED = ("SELECT fenceq.complete_batch(job_ids => %(job_ids)s::text[], owner_ids => %(owners)s::text[], "
                   "generations => %(generations)s::bigint[], claim_tokens => %(tokens)s::text[])")


def fill_for_upgrade(conn, jobs: int) -> None:
    """Half the jobs pending due later, a quarter pending due now, a quarter
    completed; all through the public API."""
    for chunk in range(0, jobs // 2, 10_000):
        conn.execute(LATER_FILL["fenceq"], {"queue": QUEUE, "n": min(10_000, jobs // 2 - chunk)})
    db.fill(conn, "fenceq", QUEUE, jobs - jobs // 2)
    done = 0
    while done < jobs // 4:
        size = min(CLAIM_BATCH_SIZE, jobs // 4 - done)
        rows = conn.execute(sql.FQ_CLAIM_BATCH, {"queues": [QUEUE], "owner": "fill",
                                                 "tokens": [drivers.new_token() for _ in range(size)]}).fetchall()
        conn.execute(COMPLETE_FILLED, {
            "job_ids": [r[drivers.CLAIM_JOB_ID] for r in rows], "owners": ["fill"] * len(rows),
            "generations": [r[drivers.CLAIM_GENERATION] for r in rows],
            "tokens": [r[drivers.CLAIM_TOKEN] for r in rows]})
        done += len(rows)


STEP_LOCK = ("SELECT l.pid, l.mode FROM pg_locks AS l "
             "WHERE l.relation = 'fenceq._jobs'::regclass AND l.granted AND l.pid <> pg_backend_pid() "
             "AND l.mode IN ('AccessExclusiveLock', 'ShareLock')")


DURING_STEP = {  # label: statement, session options
    "claim_next": (sql.FQ_CLAIM_NEXT, ""),
    # A claim whose version 4 plan is rebuilt after the index swap can cost
    # enough, under enable_seqscan = off, to be JIT-compiled: the same, without.
    "claim_next, jit off": (sql.FQ_CLAIM_NEXT, "-c jit=off"),
    "submit": (sql.FQ_SUBMIT, ""),
    "get_job (a read)": ("SELECT * FROM fenceq.get_job(job_id => %(job_id)s::text)", ""),
}
_NOT_THE_STEP = ("pg_stat_activity", "pg_locks", "pg_stat_statements", "yoyo", "fenceq.claim_next(queues =>",
                 "fenceq.submit(queue =>", "fenceq.get_job(job_id =>", "fenceq.version()", "fenceq_migrations")


def upgrade_step(server_url: str, jobs: int) -> dict:
    """On a fresh version 4 database holding ``jobs`` jobs: the time step
    0005 takes, applied alone with yoyo, and its statements' times; and
    calls issued once the step holds its lock on _jobs, watched in
    pg_stat_activity, with what they answered after it."""
    dbname = f"fenceq_v4_v5_upgrade_{jobs}"
    url = db.recreate_database(server_url, dbname)
    try:
        install_at(url, V4_LAST_STEP)
        with db.connect(url) as admin:
            filled = time.perf_counter()
            fill_for_upgrade(admin, jobs)
            filled = time.perf_counter() - filled
            db.vacuum(admin)
            counts = dict(admin.execute(
                "SELECT status || CASE WHEN status = 'pending' AND run_at > now() THEN ' due later' "
                "WHEN status = 'pending' THEN ' due now' ELSE '' END, count(*) FROM fenceq._jobs GROUP BY 1"
            ).fetchall())
            table_mb = admin.execute("SELECT pg_total_relation_size('fenceq._jobs') / 1048576.0").fetchone()[0]
            params = {"queue": QUEUE, "queues": [QUEUE], "owner": "during-step", "task": "during-step",
                      "payload": "{}", "job_id": admin.execute(
                          "SELECT job_id FROM fenceq._jobs WHERE status = 'pending' LIMIT 1").fetchone()[0]}
            db.checkpoint(admin)
            admin.execute("SELECT pg_stat_statements_reset()")
            step: dict = {}

            def apply_step() -> None:
                step["started"] = time.perf_counter()
                try:
                    apply_through(url, V5_STEP)
                except Exception as error:  # reported, not raised: the run goes on
                    step["error"] = repr(error)
                step["ended"] = time.perf_counter()

            stepping = threading.Thread(target=apply_step)
            stepping.start()
            held = _wait_for_rows(admin, STEP_LOCK, stepping)
            held_at = time.perf_counter()
            calls = {label: _call_during_step(url, admin, stepping, statement, params, options)
                     if held else ({"issued": False}, None)
                     for label, (statement, options) in DURING_STEP.items()}
            stepping.join()
            for call, thread in calls.values():
                if thread:
                    thread.join(300)
                for key in ("issued_at", "answered_at"):
                    if key in call:
                        call[key] -= step["started"]
            statements = [(query, ms) for query, ms in admin.execute(
                "SELECT query, total_exec_time FROM pg_stat_statements WHERE toplevel AND dbid = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC"
            ).fetchall() if not any(probe in query for probe in _NOT_THE_STEP)]
            version = admin.execute("SELECT fenceq.version()").fetchone()[0]
            scheduled = admin.execute("SELECT count(*) FROM fenceq._jobs WHERE status = 'pending' AND scheduled"
                                      ).fetchone()[0]
        return {"jobs": jobs, "by_status": counts, "jobs_table_mb": float(table_mb), "fill_seconds": filled,
                "step_seconds": step["ended"] - step["started"], "step_error": step.get("error"),
                "step_statements_ms": [[" ".join(re.sub(r"--[^\n]*", "", query).split())[:100], ms]
                                       for query, ms in statements[:8]],
                "step_lock_seen": [list(row) for row in held],
                "step_lock_seen_at": held_at - step["started"] if held else None,
                "during_step": {label: call for label, (call, _) in calls.items()},
                "version_after": version, "marked_scheduled": scheduled}
    finally:
        db.drop_database(server_url, dbname)


def _call_during_step(url: str, admin, stepping: threading.Thread, statement: str, params: dict,
                      options: str) -> tuple:
    """Issue ``statement`` on its own session while the step holds its lock;
    record how it waits (pg_stat_activity). Its thread records what it
    answered after the commit."""
    result: dict = {"issued": True}
    session = psycopg.connect(url, autocommit=True, options=options)
    pid = session.info.backend_pid

    def call() -> None:
        result["issued_at"] = time.perf_counter()
        try:
            row = session.execute(statement, {**params, "token": drivers.new_token()}).fetchone()
            result["answer"] = "answered a row" if row else "answered no row"
        except psycopg.Error as error:
            result["answer"] = f"error {error.sqlstate}"
        result["answered_at"] = time.perf_counter()
        session.close()

    thread = threading.Thread(target=call)
    thread.start()
    seen = _wait_for_rows(admin, "SELECT state, wait_event_type, wait_event, pg_blocking_pids(pid) "
                                 f"FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock'",
                          stepping)
    result["waited"] = bool(seen)
    if seen:
        state, event_type, event, blockers = seen[0]
        result.update({"state": state, "wait_event_type": event_type, "wait_event": event,
                       "blocked_by_step": bool(blockers)})
    return result, thread


def _wait_for_rows(admin, query: str, stepping: threading.Thread) -> list:
    """Poll ``query`` every 2 ms until it returns rows or the step ends."""
    while stepping.is_alive():
        rows = admin.execute(query).fetchall()
        if rows:
            return rows
        time.sleep(0.002)
    return []


# --- the tables ----------------------------------------------------------------------

def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "—"


def _change(v4: float, v5: float) -> str:
    return f"{(v5 - v4) / v4:+.0%}" if v4 else "—"


def _per_job_table(title: str, per: dict) -> list[str]:
    lines = [f"| per job, {title} | bare | version 4 | version 5 | v5 vs v4 |", "|---|---:|---:|---:|---:|"]
    for label, keys, fmt in ROWS:
        if isinstance(keys, tuple):
            cells = [" / ".join(fmt.format(per[s].get(k, 0)) for k in keys) for s in SYSTEMS]
            change = ""
        else:
            cells = [fmt.format(per[s].get(keys, 0)) for s in SYSTEMS]
            if keys in ("server_us", "wal_bytes"):
                cells[1:] = [f"{c} ({_ratio(per[s][keys], per['bare'][keys])})"
                             for c, s in zip(cells[1:], SYSTEMS[1:])]
            change = _change(per["v4"].get(keys, 0), per["v5"].get(keys, 0))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {change} |")
    return lines + [""]


def markdown(figures: dict) -> str:
    """The run's tables, in docs/performance.md's style."""
    server, args = figures["server"], figures["args"]
    lines = [f"{figures['started']}, {server['version']} (fsync {server['fsync']}, "
             f"pg_stat_statements.track {server.get('pg_stat_statements.track', '?')}, jit {server['jit']}), "
             f"{figures['machine']['nproc']} cores, load average {figures['load_average'][0]:.1f} at the start; "
             f"measured code {figures['measured_code']}; --diag-jobs {args['diag_jobs']} --diag-rounds "
             f"{args.get('diag_rounds', 1)} --drain-jobs "
             f"{args['drain_jobs']} --rounds {args['rounds']} --later {args['later']} --submit-batches "
             f"{args['submit_batches']} --upgrade-sizes {args['upgrade_sizes']}.", "",
             "Per job: medians of the rounds' windows (one connection, a CHECKPOINT before each window); "
             "ratios in brackets are to bare.", ""]
    lines += _per_job_table("one job at a time", figures["per_job"])
    lines += _per_job_table("batches of 10", figures["per_job_batch_10"])

    later = figures["later"]
    lines += [f"| with {figures['later_jobs']:,} jobs due later, server µs per call | bare | version 4 | "
              "version 5 | v5 vs v4 |", "|---|---:|---:|---:|---:|"]
    for probe in ("empty claim", "next_due"):
        cells = [f"{later[s][probe]:,.0f}" if probe in later[s] else "—" for s in SYSTEMS]
        lines.append(f"| {probe} | " + " | ".join(cells)
                     + f" | {_change(later['v4'][probe], later['v5'][probe])} |")

    submits = figures["submit_batch"]
    lines += ["", f"| submit_batch of {figures['submit_size']:,}, server ms per batch (ratio to bare) | "
              "bare INSERT | version 4 | version 5 | v5 vs v4 |", "|---|---:|---:|---:|---:|"]
    bare_ms = submits["plain"]["bare"]["server_ms_per_batch"]
    for variant, label in (("plain", "plain requests"), ("owned", "owned requests (submission_id)")):
        row = submits[variant]
        cells = ([f"{bare_ms:,.1f}" if variant == "plain" else "—"]
                 + [f"{row[s]['server_ms_per_batch']:,.1f} ({_ratio(row[s]['server_ms_per_batch'], bare_ms)})"
                    for s in ("v4", "v5")])
        lines.append(f"| {label} | " + " | ".join(cells) + " | "
                     + _change(row["v4"]["server_ms_per_batch"], row["v5"]["server_ms_per_batch"]) + " |")

    lines += ["", "| drain, one job at a time (median of rounds; ratio to bare) | bare | version 4 | version 5 "
              "| v5 vs v4 |", "|---|---:|---:|---:|---:|"]
    for workers, by_system in sorted(figures["drains"].items(), key=lambda item: int(item[0])):
        cells = [f"{by_system[s]['median_jobs_s']:,.0f} jobs/s ({by_system[s]['ratio_to_bare']:.2f}×)"
                 for s in SYSTEMS]
        lines.append(f"| {workers} worker{'s' if workers != '1' else ''} | " + " | ".join(cells) + " | "
                     + _change(by_system["v4"]["median_jobs_s"], by_system["v5"]["median_jobs_s"]) + " |")

    lines += ["", "| upgrade step 0005 (yoyo) on a version 4 database | pending due later / pending due now "
              "/ completed | _jobs with its indexes | step (s) |", "|---|---:|---:|---:|"]
    for run in figures["upgrade"]:
        counts = run["by_status"]
        lines.append(f"| {run['jobs']:,} jobs | {counts.get('pending due later', 0):,} / "
                     f"{counts.get('pending due now', 0):,} / {counts.get('completed', 0):,} | "
                     f"{run['jobs_table_mb']:,.0f} MB | {run['step_seconds']:.2f}"
                     f"{' (failed: ' + run['step_error'] + ')' if run['step_error'] else ''} |")
    largest = max(figures["upgrade"], key=lambda run: run["jobs"])
    lines += ["", f"| the step's statements on {largest['jobs']:,} jobs | ms |", "|---|---:|"]
    lines += [f"| `{query[:70]}` | {ms:,.0f} |" for query, ms in largest["step_statements_ms"][:5]]
    lines += ["", "| issued while the step holds its lock (s from the step's start) | jobs | waited on "
              "| issued at | answered at | answer | step returned at |", "|---|---:|---|---:|---:|---|---:|"]
    for run in figures["upgrade"]:
        for label, call in run["during_step"].items():
            if not call.get("issued"):
                lines.append(f"| {label} | {run['jobs']:,} | not issued (the step's lock was not seen) | | | | |")
                continue
            waited = (f"{call['wait_event_type']}: {call['wait_event']}"
                      f"{' (the step)' if call.get('blocked_by_step') else ''}" if call["waited"] else "no wait")
            lines.append(f"| {label} | {run['jobs']:,} | {waited} | {call['issued_at']:.2f} | "
                         f"{call['answered_at']:.2f} | {call['answer']} | {run['step_seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.v4_v5", description=__doc__)
    parser.add_argument("--url", required=True, help="a server preloading pg_stat_statements")
    parser.add_argument("--diag-jobs", type=int, default=3000)
    parser.add_argument("--diag-rounds", type=int, default=3, help="windows per system (medians)")
    parser.add_argument("--drain-jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--later", type=int, default=100_000, help="jobs due later for the probes")
    parser.add_argument("--submit-batches", type=int, default=10, help="timed submit_batch calls per system")
    parser.add_argument("--upgrade-sizes", default="100000",
                        help="comma-separated job counts of the version 4 databases the step upgrades")
    parser.add_argument("--out", type=Path, default=Path("bench/runs/v4-v5.json"),
                        help="the JSON record; its tables are written beside it (.md)")
    parser.add_argument("--markdown", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8"))))
        return 0

    urls = {"v4": db.recreate_database(args.url, "fenceq_v4_v5_v4"),
            "v5": db.recreate_database(args.url, "fenceq_v4_v5_v5")}
    install_at(urls["v4"], V4_LAST_STEP)
    install_at(urls["v5"], V5_STEP)
    admins = {name: db.connect(url) for name, url in urls.items()}
    try:
        stats = {name: ServerStats(conn) for name, conn in admins.items()}
        targets = {"bare": Target("bare", urls["v5"], admins["v5"], stats["v5"]),
                   "v4": Target("fenceq", urls["v4"], admins["v4"], stats["v4"]),
                   "v5": Target("fenceq", urls["v5"], admins["v5"], stats["v5"])}
        figures = {"server": db.server_facts(admins["v5"]), "machine": db.machine_facts(),
                   "measured_code": db.git_commit(Path(__file__).resolve().parents[1]),
                   "versions": {name: db.fenceq_version(conn) for name, conn in admins.items()},
                   "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "load_average": list(os.getloadavg()),
                   "args": {k: str(v) for k, v in vars(args).items()}}
        if figures["versions"] != {"v4": "4", "v5": "5"}:
            raise SystemExit(f"bench: expected versions 4 and 5, found {figures['versions']}")
        figures["per_job"] = asyncio.run(diagnostics(targets, args.diag_jobs, args.diag_rounds))
        figures["per_job_batch_10"] = asyncio.run(diagnostics(targets, args.diag_jobs, args.diag_rounds, 10))
        for key in ("per_job", "per_job_batch_10"):
            for system, row in figures[key].items():
                print(key, system, json.dumps({k: v for k, v in row.items()
                                               if k not in ("by_relation", "statements_us")}), flush=True)
        figures["drains"] = asyncio.run(drains(targets, args.rounds, args.drain_jobs, (1, 4)))
        print("drains:", json.dumps(figures["drains"]), flush=True)
        figures["submit_batch"] = submit_batches(targets, args.submit_batches)
        figures["submit_size"] = 1000
        print("submit_batch:", json.dumps({v: {s: r["server_ms_per_batch"] for s, r in by.items()}
                                           for v, by in figures["submit_batch"].items()}), flush=True)
        # Last on these databases: the jobs due later stay behind.
        figures["later"] = asyncio.run(later_probes(targets, args.later))
        figures["later_jobs"] = args.later
        print("with jobs due later, server µs:", json.dumps(figures["later"]), flush=True)
    finally:
        for conn in admins.values():
            conn.close()
    for name in ("fenceq_v4_v5_v4", "fenceq_v4_v5_v5"):
        db.drop_database(args.url, name)
    figures["upgrade"] = []
    for jobs in (int(n) for n in args.upgrade_sizes.split(",") if n):
        figures["upgrade"].append(upgrade_step(args.url, jobs))
        print("upgrade:", json.dumps(figures["upgrade"][-1]), flush=True)
    args.out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    # Its tables beside it, so that the record and its reading never disagree.
    args.out.with_suffix(".md").write_text(markdown(figures) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
