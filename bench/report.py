"""docs/benchmarks.md, rendered from the recorded runs in bench/runs/*.json:
the targets of issue 8 for every run side by side (the oldest fenceq version
is "before", later ones "after"), then each run in full."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from . import statements as sql

TARGET_ROWS = [  # figure key, workload, target, how the target reads
    ("drain/1", "per-job drain, 1 worker (jobs/s)", 0.9),
    ("drain/4", "per-job drain, 4 workers", 0.9),
    ("drain/16", "per-job drain, 16 workers", 0.9),
    ("batch/10", "claim_batch 10 + complete_batch, 4 workers", 0.8),
    ("submit", "submit, one at a time", 0.9),
    ("submit_owned", "submit with submission_id (vs bare insert)", 0.8),
    ("submit_batch", "submit_batch of 1,000 (vs bare batch insert)", 0.8),
    ("submit_batch_owned", "owned submit_batch of 1,000 (vs plain submit_batch)", 0.5),
    ("latency", "claim+complete p50, 1k → large backlog (filled with submit_batch)", 1.3),
    ("sqlite/drain", "SQLite per-job drain (client, vs bare sqlite3)", 0.9),
    ("sqlite/submit", "SQLite submit (client, vs bare sqlite3)", 0.9),
    ("worker", "fenceq.Worker, 16 async no-op (vs PgQueuer 1.6 QueueManager, batch 10)", 1.0),
]
AT_MOST = {"latency"}  # lower is better

# Diagnostic rows: label, fenceq windows, bare windows (summed per job).
DIAG_ROWS = [
    ("claim_next", ["fenceq/claim"], ["bare/claim"]),
    ("complete", ["fenceq/complete"], ["bare/complete"]),
    ("**per job: claim_next + complete**", ["fenceq/claim", "fenceq/complete"],
     ["bare/claim", "bare/complete"]),
    ("claim_batch of 10", ["fenceq/claim_batch"], ["bare/claim_batch"]),
    ("complete_batch of 10", ["fenceq/complete_batch"], ["bare/complete_batch"]),
    ("submit", ["fenceq/submit"], ["bare/submit"]),
    ("submit with submission_id", ["fenceq_owned/submit"], ["bare/submit"]),
    ("submit_batch of 1,000", ["fenceq/submit_batch"], ["bare/submit_batch"]),
    ("owned submit_batch of 1,000", ["fenceq_owned/submit_batch"], ["bare/submit_batch"]),
]
NESTED_WINDOWS = [("claim_next", "fenceq/claim"), ("complete", "fenceq/complete"),
                  ("claim_batch of 10", "fenceq/claim_batch"),
                  ("complete_batch of 10", "fenceq/complete_batch"), ("submit", "fenceq/submit"),
                  ("submit with submission_id", "fenceq_owned/submit"),
                  ("owned submit_batch of 1,000", "fenceq_owned/submit_batch")]
WRITE_GROUPS = [("per-job drain (claim_next + complete)", ["fenceq/claim", "fenceq/complete"],
                 ["bare/claim", "bare/complete"]),
                ("submit", ["fenceq/submit"], ["bare/submit"]),
                ("submit with submission_id", ["fenceq_owned/submit"], ["bare/submit"])]
WRITE_KINDS = ["index entries", "full-page images", "heap inserts", "heap updates (non-HOT)",
               "HOT updates", "row locks"]


def _n(value: float, digits: int = 0) -> str:
    return "—" if value is None or value != value else f"{value:,.{digits}f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _label(backlog: int) -> str:
    return f"{backlog // 1_000_000}M" if backlog >= 1_000_000 else f"{backlog // 1000}k"


# --- the target rows of one run -----------------------------------------------

def target_rows(run: dict) -> dict[str, dict[str, Any]]:
    """key -> bare, fenceq (text), ratio (float) for every target."""
    f = run["figures"]
    rows: dict[str, dict[str, Any]] = {}

    def rate_row(key: str, fenceq: str, base: str, ratio_field: str = "ratio") -> None:
        if fenceq in f and base in f:
            rows[key] = {"bare": _n(f[base]["rate"]), "fenceq": _n(f[fenceq]["rate"]),
                         "ratio": f[fenceq].get(ratio_field)}

    for workers in (1, 4, 16):
        rate_row(f"drain/{workers}", f"drain/{workers}/fenceq", f"drain/{workers}/bare")
    rate_row("batch/10", "batch/10/fenceq", "batch/10/bare")
    rate_row("submit", "submit/fenceq", "submit/bare")
    rate_row("submit_owned", "submit/fenceq_owned", "submit/bare")
    rate_row("submit_batch", "submit_batch/fenceq", "submit_batch/bare")
    rate_row("submit_batch_owned", "submit_batch/fenceq_owned", "submit_batch/fenceq", "ratio_to_plain")
    rate_row("worker", "worker/fenceq", "worker/pgqueuer")
    latency = run.get("latency", {})
    small, large = run["meta"]["config"]["backlogs"]
    p50 = {k: v["p50"] * 1e3 for k, v in latency.items()}
    if f"fenceq/{large}" in p50 and f"bare/{large}" in p50:
        bare_growth = p50[f"bare/{large}"] / p50[f"bare/{small}"]
        rows["latency"] = {
            "bare": f"{p50[f'bare/{small}']:.2f} → {p50[f'bare/{large}']:.2f} ms",
            "fenceq": f"{p50[f'fenceq/{small}']:.2f} → {p50[f'fenceq/{large}']:.2f} ms",
            "ratio": p50[f"fenceq/{large}"] / p50[f"fenceq/{small}"],
            "note": f"growth to {_label(large)} (bare {bare_growth:.2f}×; fenceq ÷ bare growth "
                    f"{p50[f'fenceq/{large}'] / p50[f'fenceq/{small}'] / bare_growth:.2f}×)"}
    sqlite = run.get("sqlite", {}).get("FULL")
    if sqlite:
        for op in ("drain", "submit"):
            rows[f"sqlite/{op}"] = {"bare": _n(sqlite[f"{op}_bare_jobs_per_s"]),
                                    "fenceq": _n(sqlite[f"{op}_fenceq_jobs_per_s"]),
                                    "ratio": sqlite[f"{op}_ratio"]}
    return rows


def _met(key: str, ratio: float | None, target: float) -> str:
    if ratio is None:
        return "—"
    if key in AT_MOST:
        return "yes" if ratio <= target else f"**no** ({ratio / target - 1:.0%} over)"
    return "yes" if ratio >= target else f"**no** ({1 - ratio / target:.0%} short)"


def _target_text(key: str, target: float) -> str:
    return f"≤ {target:.2f}×" if key in AT_MOST else f"≥ {target:.2f}×"


def _targets_table(run: dict) -> list[str]:
    rows = target_rows(run)
    out = ["| workload | bare (baseline) | fenceq | ratio | target | met? |",
           "|---|---:|---:|---:|---:|---|"]
    for key, workload, target in TARGET_ROWS:
        row = rows.get(key)
        if not row:
            continue
        ratio = row["ratio"]
        ratio_text = f"{ratio:.2f}×" + (f" {row['note']}" if row.get("note") else "")
        out.append(f"| {workload} | {row['bare']} | {row['fenceq']} | {ratio_text} | "
                   f"{_target_text(key, target)} | {_met(key, ratio, target)} |")
    return out


# --- diagnostics ------------------------------------------------------------------

def _top(window: dict) -> dict | None:
    return max((s for s in window["statements"] if s["toplevel"]), key=lambda s: s["total_ms"],
               default=None)


def window_facts(windows: dict, keys: list[str]) -> dict[str, float] | None:
    """Summed over the windows: server µs per call of the top-level
    statement, statements per call, and WAL, FPI and index entries per job."""
    if not all(k in windows for k in keys):
        return None
    facts = {"us": 0.0, "statements": 0.0, "wal": 0.0, "fpi": 0.0, "index": 0.0}
    for key in keys:
        w = windows[key]
        top = _top(w)
        nested = sum(s["calls"] for s in w["statements"] if not s["toplevel"])
        facts["us"] += (top["total_ms"] * 1000 / w["calls"]) if top else float("nan")
        facts["statements"] += 1 + nested / w["calls"]
        facts["wal"] += w["wal"]["bytes"] / w["jobs"]
        facts["fpi"] += w["wal"]["fpi"] / w["jobs"]
        relations = w.get("relations")
        facts["index"] += (sum(c.get("index entries", 0) for c in relations.values()) / w["jobs"]
                           if relations is not None else float("nan"))
    return facts


def _diagnostics_table(run: dict) -> list[str]:
    windows = run.get("windows", {})
    out = ["| call | server µs per call: fenceq / bare | statements per call: fenceq / bare "
           "| WAL bytes per job | full-page images per job | index entries per job |",
           "|---|---:|---:|---:|---:|---:|"]
    for label, fq_keys, bare_keys in DIAG_ROWS:
        fq, bare = window_facts(windows, fq_keys), window_facts(windows, bare_keys)
        if not fq or not bare:
            continue
        out.append(f"| {label} | {_n(fq['us'], 1)} / {_n(bare['us'], 1)} | "
                   f"{_n(fq['statements'], 1)} / {_n(bare['statements'], 1)} | "
                   f"{_n(fq['wal'])} / {_n(bare['wal'])} | {_n(fq['fpi'], 2)} / {_n(bare['fpi'], 2)} | "
                   f"{_n(fq['index'], 1)} / {_n(bare['index'], 1)} |")
    return out


def _nested_tables(run: dict, limit: int = 10) -> list[str]:
    windows = run.get("windows", {})
    out = []
    for label, key in NESTED_WINDOWS:
        w = windows.get(key)
        if not w:
            continue
        top = _top(w)
        # Planning and execution are counted apart: a row may be planned and never
        # run (PL/pgSQL prepares its simple expressions too); keep it if that cost.
        nested = sorted((s for s in w["statements"] if not s["toplevel"]
                         and (s["calls"] or s.get("plan_ms", 0) * 1000 / w["calls"] >= 0.05)),
                        key=lambda s: -(s["total_ms"] + s.get("plan_ms", 0)))
        per_call = w["calls"]
        out += ["", f"**{label}**: {top['total_ms'] * 1000 / per_call:,.1f} µs per call at top level, "
                f"{sum(s['calls'] for s in nested) / per_call:.1f} nested statements per call "
                f"({w['calls']:,} calls). A nested row's time includes the statements it runs in turn; "
                "execution time leaves out executor start-up and shutdown (opening indexes, building "
                "constraint expressions), which is part of the time a function spends outside its "
                "statements.", "",
                "| nested statement | runs per call | mean µs | µs per call | plans per call | "
                "planning µs per call |", "|---|---:|---:|---:|---:|---:|"]
        for s in nested[:limit]:
            text = s["query"] if len(s["query"]) <= 110 else s["query"][:107] + "..."
            out.append(f"| `{_cell(text)}` | {s['calls'] / per_call:.2f} | "
                       f"{_n(s['total_ms'] * 1000 / s['calls'] if s['calls'] else None, 1)} | "
                       f"{s['total_ms'] * 1000 / per_call:,.1f} | "
                       f"{s.get('plans', 0) / per_call:.2f} | {s.get('plan_ms', 0) * 1000 / per_call:,.1f} |")
        if len(nested) > limit:
            rest = nested[limit:]
            out.append(f"| *{len(rest)} more* | | | {sum(s['total_ms'] for s in rest) * 1000 / per_call:,.1f} "
                       f"| | {sum(s.get('plan_ms', 0) for s in rest) * 1000 / per_call:,.1f} |")
    return out


def _writes_tables(run: dict) -> list[str]:
    windows = run.get("windows", {})
    out = []
    for label, *sides in WRITE_GROUPS:
        counts: dict[str, dict[str, float]] = {}
        for keys in sides:
            for key in keys:
                w = windows.get(key)
                if not w or w.get("relations") is None:
                    return ["(pg_waldump was not available: no census by relation)"]
                for relation, kinds in w["relations"].items():
                    entry = counts.setdefault(relation, {})
                    for kind, value in kinds.items():
                        entry[kind] = entry.get(kind, 0.0) + value / w["jobs"]
        ours = {r: c for r, c in counts.items() if r.startswith(("fenceq.", "bare_jobs"))
                and any(c.get(k, 0) >= 0.005 for k in WRITE_KINDS)}
        out += ["", f"**{label}**, per job:", "",
                "| relation | " + " | ".join(WRITE_KINDS) + " |", "|---|" + "---:|" * len(WRITE_KINDS)]
        for relation in sorted(ours):
            out.append(f"| `{relation}` | " + " | ".join(
                _n(ours[relation].get(kind, 0.0), 2) for kind in WRITE_KINDS) + " |")
    return out


# --- worker, SQLite, latency --------------------------------------------------------

def _worker_section(run: dict) -> list[str]:
    f, w = run["figures"], run.get("worker", {})
    if "worker/fenceq" not in f:
        return []
    out = ["| system | jobs/s (median) | rounds | client process CPU per job |", "|---|---:|---|---:|"]
    for system, name in (("pgqueuer", "PgQueuer 1.6 QueueManager, batch 10, asyncpg"),
                         ("fenceq", "fenceq.Worker, concurrency 16, async no-op handler")):
        entry = f.get(f"worker/{system}")
        cpu_per_job = w.get(f"{system}/cpu_per_job", [])
        out.append(f"| {name} | {_n(entry['rate'])} | {', '.join(_n(x) for x in entry['rounds'])} | "
                   f"{_n(statistics.median(cpu_per_job) * 1e6) if cpu_per_job else '—'} µs |")
    jobs = run["meta"]["config"]["worker_jobs"]
    for system in ("fenceq", "pgqueuer"):
        statements = [s for s in w.get(f"{system}/statements", []) if s["calls"] >= 10]
        if statements:
            out += ["", f"Statements {system} sends per job (untimed run, pg_stat_statements, top level):", "",
                    "| statement | per job | server µs per call |", "|---|---:|---:|"]
            for s in sorted(statements, key=lambda s: -s["calls"])[:8]:
                text = s["query"] if len(s["query"]) <= 90 else s["query"][:87] + "..."
                out.append(f"| `{_cell(text)}` | {s['calls'] / jobs:.3f} | "
                           f"{s['total_ms'] * 1000 / s['calls']:,.1f} |")
    wake = w.get("wake")
    if wake:
        out += ["", f"Wake-up latency of an idle fenceq worker (polling every 30 s, so only LISTEN/NOTIFY "
                f"wakes it), from just before `submit` on another connection to the handler's first line, "
                f"{wake['n']} samples: **p50 {wake['p50'] * 1e3:.2f} ms**, p90 "
                f"{wake['p90'] * 1e3:.2f} ms, p99 {wake['p99'] * 1e3:.2f} ms (earlier target: "
                "p50 ≤ 10 ms)."]
    profile = w.get("profile")
    if profile:
        out += ["", f"Where the fenceq worker process's time goes (cProfile, untimed run of "
                f"{profile['jobs']:,} jobs in {profile['wall']:.1f} s under the profiler; self time):", "",
                "| part | seconds | share |", "|---|---:|---:|"]
        out += [f"| {group} | {seconds:.2f} | {share:.0%} |" for group, seconds, share in profile["groups"]]
        out += ["", "| function (most self time) | calls | seconds |", "|---|---:|---:|"]
        out += [f"| `{_cell(name)}` | {calls:,} | {seconds:.2f} |" for name, calls, seconds in profile["top"][:10]]
    return out


def _sqlite_section(run: dict) -> list[str]:
    s = run.get("sqlite")
    if not s:
        return []
    full, off = s["FULL"], s["OFF"]
    out = [f"SQLite {full['sqlite']}, WAL, `BEGIN IMMEDIATE` per call, {full['jobs']:,} jobs per round, "
           f"median of {full['rounds']} rounds alternating which side goes first; both sides on files in "
           "the same directory. Bare: `INSERT` per submit; `UPDATE … WHERE id = (SELECT … LIMIT 1) "
           "RETURNING` then the completing `UPDATE`, each its own transaction. fenceq: the client's "
           "`submit`, `claim_next`, `complete`.", "",
           "| figure (jobs/s) | bare sqlite3 | fenceq | ratio |", "|---|---:|---:|---:|"]
    for label, figures in (("synchronous=FULL", full), ("synchronous=OFF (CPU cost alone)", off)):
        for op in ("submit", "drain"):
            out.append(f"| {op}, {label} | {_n(figures[f'{op}_bare_jobs_per_s'])} | "
                       f"{_n(figures[f'{op}_fenceq_jobs_per_s'])} | {figures[f'{op}_ratio']:.2f}× |")
    return out


def _commit_probe_text(run: dict) -> str:
    probe = run.get("commit_probe")
    if not probe:
        return ""
    return (f" A durable one-row commit took {statistics.median(probe) * 1e3:.2f} ms (median; "
            f"{min(probe) * 1e3:.2f}–{max(probe) * 1e3:.2f} ms) just before the timed runs: the fsync "
            "latency other load on the machine moves, which bounds the 1-worker figures.")


def percentiles(samples: list[float]) -> dict[str, float]:
    """What the report shows of a latency sample (the run keeps only this)."""
    ordered = sorted(samples)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"p50": statistics.median(ordered), "p90": at(0.9), "p95": at(0.95), "p99": at(0.99),
            "n": len(ordered)}


def _latency_table(run: dict) -> list[str]:
    out = ["| pending | system | p50 ms | p95 ms | p99 ms | samples |", "|---:|---|---:|---:|---:|---:|"]
    for backlog in run["meta"]["config"]["backlogs"]:
        for system in ("bare", "fenceq"):
            got = run.get("latency", {}).get(f"{system}/{backlog}")
            if got:
                out.append(f"| {_label(backlog)} | {system} | {got['p50'] * 1e3:.3f} | "
                           f"{got['p95'] * 1e3:.3f} | {got['p99'] * 1e3:.3f} | {got['n']} |")
    return out


# --- a run, and the document ----------------------------------------------------------

def render_run(run: dict, title: str | None = None) -> str:
    m = run["meta"]
    c = m["config"]
    s = m["server"]
    title = title or f"{m['label']} at commit {m['commit']}"
    drains = ", ".join(f"{jobs:,} at {w} worker{'s' if int(w) > 1 else ''}" for w, jobs in c["drain_jobs"].items())
    phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in run.get("phases", {}).items())
    busiest = max(run.get("load", {}).items(), key=lambda kv: kv[1], default=None)
    lines = [
        f"## {title}", "",
        f"`{m['command']}` on {m['date']}, {m['minutes']:.1f} min. {s['version']}, fsync {s.get('fsync')}, "
        f"synchronous_commit {s.get('synchronous_commit')}, full_page_writes {s.get('full_page_writes')}, "
        f"shared_buffers {s.get('shared_buffers')}; {m['machine'].get('nproc')} CPUs "
        f"({m['machine'].get('cpu', '?')}); Python {m['machine']['python']}, psycopg {m['machine']['psycopg']}.",
        "", "### Targets", "",
        *_targets_table(run), "",
        f"Throughput: median of {c['rounds']} rounds (worker: {c['worker_rounds']}); each ratio is the median "
        f"of the per-round ratios, and a `CHECKPOINT` precedes every timed run. Jobs per drain: {drains}; "
        f"batched drain {c['batch_jobs']:,}; submit {c['submit_calls']:,} calls; submit_batch "
        f"{c['submit_batch_calls']} calls of {c['submit_batch_size']:,} (owned: {c['owned_batch_calls']}); "
        f"worker {c['worker_jobs']:,} jobs.{_commit_probe_text(run)}", "",
        "### Per call on the server", "",
        f"One connection, {c['diag_jobs']:,} jobs per window, `CHECKPOINT` before each claim and submit "
        "window (not between a claim window and its completions). Server time: pg_stat_statements "
        "(`track = all`) mean execution time of the top-level statement. Statements per call: the call "
        "plus every statement run inside it at any depth (pg_stat_statements calls). WAL: insert-position "
        "difference (commit records included); full-page images: `pg_stat_wal.wal_fpi`; index entries: "
        "B-tree leaf insertions in the WAL of the window, counted with `pg_waldump` by relation.", "",
        *_diagnostics_table(run), "",
        "### Where the server time goes (nested statements, pg_stat_statements)",
        *_nested_tables(run), "",
        "### Writes per job by relation (pg_waldump census)",
        *_writes_tables(run), "",
        "### What a user runs: fenceq.Worker against PgQueuer", "",
        "Each drain runs in a fresh child process on the same server and database, its queue filled "
        "beforehand (fenceq with `submit_batch`, PgQueuer with its batch `enqueue`) and a `CHECKPOINT` "
        "before it. Time from before the worker starts until the last job is done.", "",
        *_worker_section(run), "",
        "### SQLite (embedded default)", "", *_sqlite_section(run), "",
        "### Claim latency against backlog", "",
        "claim + complete timed together on one connection per backlog; the small backlog lives in a "
        "second database on the same server so that both exist at once and its tables hold only it; "
        "both filled through `submit_batch` of 1,000 (bare: its batch insert of the same JSON) and "
        f"vacuumed; {c['latency_warmup']} untimed pairs each, then {c['latency_blocks']} blocks each, "
        "rotating over system and backlog, a `CHECKPOINT` before every block.", "",
        *_latency_table(run), "",
        f"Phases: {phases}." + (f" Most CPU used by other processes in one phase: {busiest[1]:.0%} "
                                 f"({busiest[0]})." if busiest else ""), ""]
    return "\n".join(lines)


def _comparison(runs: list[dict]) -> list[str]:
    heads = [f"{'before' if i == 0 else 'after'}: {r['meta']['label']} at {r['meta']['commit']}"
             for i, r in enumerate(runs)]
    rows = [target_rows(r) for r in runs]
    out = ["| workload | target | " + " | ".join(heads) + " | met (latest)? |",
           "|---|---:|" + "---:|" * len(runs) + "---|"]
    for key, workload, target in TARGET_ROWS:
        ratios = [r.get(key, {}).get("ratio") for r in rows]
        cells = [f"{x:.2f}×" if x is not None else "—" for x in ratios]
        out.append(f"| {workload} | {_target_text(key, target)} | " + " | ".join(cells) +
                   f" | {_met(key, ratios[-1], target)} |")
    return out


def _independent_section(got: dict) -> list[str]:
    return [f"## Independent check: bench/independent.py, v{got['version']}", "",
            f"`python bench/independent.py --url … --rounds {got['rounds']} --jobs {got['jobs']:,}` on "
            f"{got['date']}: plain psycopg in threads, one connection per worker, the same SQL text, a "
            "`CHECKPOINT` before every timed run; median of the rounds. Compare the ratios with the "
            "run above (noise on this machine: ±0.1).", "",
            "| workload | baseline jobs/s | fenceq jobs/s | ratio |", "|---|---:|---:|---:|",
            *[f"| {label} | {_n(baseline)} | {_n(fenceq)} | {ratio:.2f}× |"
              for label, baseline, fenceq, ratio in got["rows"]], ""]


def render(runs_dir: Path) -> str:
    # make bench's own runs are v<N>.json; the other benches' records beside
    # them (v4-v5.json, peers.json) are not runs of this report.
    runs = sorted((json.loads(p.read_text()) for p in runs_dir.glob("v*.json") if p.stem[1:].isdigit()),
                  key=lambda r: (int(r["meta"]["version"]), r["meta"]["date"]))
    bare = "\n".join(["```sql", sql.BARE_SCHEMA.strip(), "-- claim", sql.BARE_CLAIM.strip(), "-- complete",
                      sql.BARE_COMPLETE.strip(), "```"])
    lines = [
        "# fenceq benchmarks", "",
        "Written by `make bench` from the runs recorded in `bench/runs/` (edit `bench/report.py`, not "
        "this file). Every fenceq figure stands beside a bare-SQL baseline measured in the same run on "
        "the same server (PostgreSQL 15, fsync on, `pg_stat_statements` preloaded with `track = all`), "
        "with a `CHECKPOINT` before every timed run: production claims pages written before the last "
        "checkpoint, so the first change to each page pays a full-page image.", "",
        "How it runs: one asyncio process, one psycopg `AsyncConnection` per worker, each call its own "
        "autocommit transaction, fenceq called exactly as another language would "
        "(`SELECT * FROM fenceq.claim_next(...)`, `SELECT fenceq.complete(...)`, a fresh random claim "
        "token per claim); timed sessions switch statement tracking off (`pg_stat_statements.track = "
        "none`) so that neither side pays for it, the per-call diagnostics switch it on. "
        "`python bench/independent.py` reproduces the PostgreSQL ratios with plain psycopg and threads, "
        "outside this package.", "",
        "Run it: `make bench` (9 minutes on this 2-core machine when quiet, 16 with other test "
        "suites running; it starts the durable server on port 54339). "
        "`make bench BENCH_ARGS=--quick` is a development run (100k backlog, fewer rounds) that prints "
        "its report and records nothing. After the main run, `make bench` runs `python -m bench.v4_v5` "
        "(version 4 beside version 5 on the same server: writes, statements and server time per job, "
        "drains, empty claims with jobs due later, the upgrade's lock; `bench/runs/v4-v5.md`).", "",
        "Why each missed target is missed, with the measurements behind it: "
        "[performance.md](performance.md).", ""]
    if runs:
        lines += ["## Targets: before and after", "", *_comparison(runs), ""]
        for i, run in enumerate(runs):
            m = run["meta"]
            lines.append(render_run(run, f"{'Before' if i == 0 else 'After'}: {m['label']} at commit "
                                         f"{m['commit']}"))
    for path in sorted(runs_dir.glob("independent-*.json")):
        lines += _independent_section(json.loads(path.read_text()))
    lines += ["## The bare baseline", "", "`bench/statements.py`:", "", bare, ""]
    return "\n".join(lines)
