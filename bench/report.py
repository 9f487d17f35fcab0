"""docs/benchmarks.md, written at the end of every run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from . import statements as sql
from .db import QUEUES as Q
from .measure import Config, _count_label, median, ordered_scan_ok, pct


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    return f"{min(values):,.0f}–{max(values):,.0f}"


class Verdict:
    """A ratio against a target; higher is better unless `at_most`."""

    def __init__(self, ratio: float, target: float | None, at_most: bool = False):
        self.ratio = ratio
        self.target = target
        self.at_most = at_most

    @property
    def ok(self) -> bool | None:
        if self.target is None:
            return None
        return self.ratio <= self.target if self.at_most else self.ratio >= self.target

    def target_text(self) -> str:
        if self.target is None:
            return "—"
        return f"≤ {self.target:.2f}×" if self.at_most else f"≥ {self.target:.2f}×"

    def result_text(self) -> str:
        if self.ok is None:
            return "reported"
        if self.ok:
            return "pass"
        return f"**MISS** ({self.gap_text()})"

    def gap_text(self) -> str:
        if self.at_most:
            return f"{(self.ratio / self.target - 1) * 100:.1f}% over the limit"
        return (f"{(1 - self.ratio / self.target) * 100:.1f}% short; needs "
                f"{self.target / self.ratio:.2f}× the speed")


def paired(a: list[float], b: list[float]) -> float:
    """Median of the per-round ratios a[i] / b[i]: each round measures both
    systems back to back, so slow drift on the machine cancels out."""
    ratios = [x / y for x, y in zip(a, b) if y]
    return median(ratios) if ratios else float("nan")


def _figures(results: dict[str, Any], config: Config) -> dict[str, Any]:
    f: dict[str, Any] = {}
    drain = results["drain"]
    f["drain"] = []
    for workers in config.drain_jobs:
        fq = median(drain.get(f"fenceq/{workers}", []))
        bare = median(drain.get(f"bare/{workers}", []))
        ratio = paired(drain.get(f"fenceq/{workers}", []), drain.get(f"bare/{workers}", []))
        f["drain"].append((workers, fq, bare, Verdict(ratio, 0.9),
                           drain.get(f"fenceq/{workers}", []), drain.get(f"bare/{workers}", [])))
    batch = results["batch"]
    bare10 = median(batch.get("bare/10", []))
    f["bare10"] = bare10
    f["bare100"] = median(batch.get("bare/100", []))
    f["batch"] = []
    for size in (10, 100):
        fq = median(batch.get(f"fenceq/{size}", []))
        ratio = paired(batch.get(f"fenceq/{size}", []), batch.get("bare/10", []))
        f["batch"].append((size, fq, Verdict(ratio, 0.8), batch.get(f"fenceq/{size}", [])))
    sub = results["submit"]
    bare_sub = median(sub.get("bare/1", []))
    f["bare_submit"] = bare_sub
    f["submit"] = median(sub.get("fenceq/1", []))
    f["submit_v"] = Verdict(paired(sub.get("fenceq/1", []), sub.get("bare/1", [])), 0.9)
    f["owned"] = median(sub.get("fenceq_owned/1", []))
    f["owned_v"] = Verdict(paired(sub.get("fenceq_owned/1", []), sub.get("bare/1", [])), 0.8)
    sb = results["submit_batch"]
    f["sb_fq"] = median(sb.get("fenceq", []))
    f["sb_bare"] = median(sb.get("bare", []))
    f["sb_v"] = Verdict(paired(sb.get("fenceq", []), sb.get("bare", [])), None)
    notify = results["notify"]
    f["notify"] = []
    for producers in (1, 4):
        on = median(notify.get(f"on/{producers}", []))
        off = median(notify.get(f"off/{producers}", []))
        bare = median(notify.get(f"bare/{producers}", [])) if producers > 1 else bare_sub
        ratio = paired(notify.get(f"on/{producers}", []), notify.get(f"off/{producers}", []))
        f["notify"].append((producers, on, off, bare, ratio))
    lat = results["latency"]
    small, large = min(config.backlogs), max(config.backlogs)
    f["small"], f["large"] = small, large

    def p50(key: str) -> float:
        return pct(lat.get(key, []), 50)

    for name, key in (("fq", "fenceq/single"), ("bare", "bare/single"), ("multi", "fenceq/multi"),
                      ("bmulti", "bare/multi")):
        f[f"p50_{name}_small"] = p50(f"{key}/{small}")
        f[f"p50_{name}_large"] = p50(f"{key}/{large}")
    f["lat_v"] = Verdict(p50(f"fenceq/single/{large}") / p50(f"fenceq/single/{small}"), 1.3, at_most=True)
    f["lat_bare_v"] = Verdict(p50(f"bare/single/{large}") / p50(f"bare/single/{small}"), None)
    f["multi_v"] = Verdict(p50(f"fenceq/multi/{large}") / p50(f"fenceq/multi/{small}"), 1.3, at_most=True)
    f["multi_vs_single"] = p50(f"fenceq/multi/{large}") / p50(f"fenceq/single/{large}")
    plan = results["explain"].get("multi", "")
    f["ordered"] = ordered_scan_ok(plan, 3) if plan else None
    client = results["client"]
    f["direct"] = median(client.get("direct", []))
    f["client"] = median(client.get("client", []))
    generic = results["generic"]
    f["gen_auto"] = median(generic.get("auto", []))
    f["gen_forced"] = median(generic.get("generic", []))
    return f


def _summary(f: dict[str, Any]) -> list[str]:
    rows = ["| figure | fenceq | bare baseline | ratio | target | result |",
            "|---|---:|---:|---:|---:|---|"]
    for workers, fq, bare, v, _, _ in f["drain"]:
        rows.append(f"| per-job drain, {workers} worker{'s' if workers > 1 else ''} (jobs/s) | "
                    f"{_rate(fq)} | {_rate(bare)} | {v.ratio:.2f}× | {v.target_text()} | {v.result_text()} |")
    for size, fq, v, _ in f["batch"]:
        rows.append(f"| batched drain, batches of {size} (jobs/s) | {_rate(fq)} | {_rate(f['bare10'])} "
                    f"(10-row batches) | {v.ratio:.2f}× | {v.target_text()} | {v.result_text()} |")
    rows.append(f"| submit (jobs/s) | {_rate(f['submit'])} | {_rate(f['bare_submit'])} | "
                f"{f['submit_v'].ratio:.2f}× | {f['submit_v'].target_text()} | {f['submit_v'].result_text()} |")
    rows.append(f"| owned submit, with submission_id (jobs/s) | {_rate(f['owned'])} | "
                f"{_rate(f['bare_submit'])} | {f['owned_v'].ratio:.2f}× | {f['owned_v'].target_text()} | "
                f"{f['owned_v'].result_text()} |")
    rows.append(f"| submit_batch of 1,000 (jobs/s) | {_rate(f['sb_fq'])} | {_rate(f['sb_bare'])} | "
                f"{f['sb_v'].ratio:.2f}× | — | reported |")
    lat = f["lat_v"]
    small, large = _count_label(f["small"]), _count_label(f["large"])
    rows.append(f"| claim p50, {small} → {large} pending (ms) | {_ms(f['p50_fq_small'])} → "
                f"{_ms(f['p50_fq_large'])} | {_ms(f['p50_bare_small'])} → {_ms(f['p50_bare_large'])} | "
                f"{lat.ratio:.2f}× (bare {f['lat_bare_v'].ratio:.2f}×) | {lat.target_text()} | "
                f"{lat.result_text()} |")
    multi = f["multi_v"]
    ordered = {True: "ordered index scan per queue", False: "**no ordered index scan**",
               None: "plan not captured"}[f["ordered"]]
    rows.append(f"| 3-queue claim p50, small → large backlog (ms) | {_ms(f['p50_multi_small'])} → "
                f"{_ms(f['p50_multi_large'])} | {_ms(f['p50_bmulti_small'])} → {_ms(f['p50_bmulti_large'])} | "
                f"{multi.ratio:.2f}× | {multi.target_text()} | {multi.result_text()}; {ordered} |")
    return rows


def _machine(facts: dict[str, Any]) -> list[str]:
    m, s = facts["machine"], facts["server"]
    rows = ["| | |", "|---|---|",
            f"| CPUs (`nproc`) | {m.get('nproc')} ({m.get('cpu')}) |",
            f"| memory | {m.get('memory', 'unknown')} |",
            f"| kernel / Python / psycopg | {m.get('kernel')} / {m.get('python')} / {m.get('psycopg')} |",
            f"| PostgreSQL | {s.get('version')} |"]
    for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers",
                 "effective_cache_size", "work_mem", "max_wal_size", "checkpoint_timeout",
                 "commit_delay", "autovacuum", "jit", "plan_cache_mode", "max_connections"):
        if name in s:
            rows.append(f"| `{name}` | {s[name]} |")
    return rows


def _latency_table(results: dict[str, Any], config: Config) -> list[str]:
    lat = results["latency"]
    rows = ["| pending | system | queues | p50 ms | p95 ms | p99 ms | samples |",
            "|---:|---|---|---:|---:|---:|---:|"]
    for backlog in config.backlogs:
        for system in ("fenceq", "bare"):
            for mode, label in (("single", "1"), ("multi", "3")):
                samples = lat.get(f"{system}/{mode}/{backlog}")
                if not samples:
                    continue
                rows.append(f"| {_count_label(backlog)} | {system} | {label} | {_ms(pct(samples, 50))} | "
                            f"{_ms(pct(samples, 95))} | {_ms(pct(samples, 99))} | {len(samples)} |")
    naive = lat.get(f"bare/naive/{max(config.backlogs)}")
    if naive:
        rows.append(f"| {_count_label(max(config.backlogs))} | bare, naive `queue = ANY(...)` | 3 | "
                    f"{_ms(pct(naive, 50))} | {_ms(pct(naive, 95))} | {_ms(pct(naive, 99))} | {len(naive)} |")
    return rows


def _wal_text(results: dict[str, Any]) -> str:
    wal = results.get("wal", {})
    if not (wal.get("fenceq/1") and wal.get("bare/1")):
        return "more WAL per job"
    return (f"{median(wal['fenceq/1']):,.0f} bytes of WAL per job against "
            f"{median(wal['bare/1']):,.0f} bare")


def _helper_items(results: dict[str, Any]) -> list[str]:
    """Items 1 and 2 of the per-job explanation, from the installed code."""
    d = results["diag"]
    language = results.get("code", {}).get("language", {})
    items = []
    census = {k: v for k, v in results.get("census", {}).items() if v.get("statements", -1) >= 0}
    if census:
        items.append(
            "1. **Many statements per call.** Each statement a PL/pgSQL body runs is a separate SPI "
            "query with its own executor start-up and shutdown (plus planning when its plan is not "
            "cached); the bare loop runs one statement per call. Statements run inside fenceq per call "
            "in this run (counted with `auto_explain.log_nested_statements`): "
            + ", ".join(f"`{name}` {v['statements']}" + (
                        f" ({v['helpers']} of them `PERFORM fenceq._check_*` helper "
                        f"call{'s' if v['helpers'] != 1 else ''})" if v["helpers"] else "")
                        for name, v in census.items())
            + ". A helper called through `PERFORM` is the most expensive kind: "
            f"{d.get('server_perform_helper', 0) * 1e6:.2f} µs per `PERFORM fenceq._check_name(...)` "
            f"against {d.get('server_inline_check', 0) * 1e6:.2f} µs for the same test written inline "
            "(server time in a warm loop), because every fenceq function is `SECURITY DEFINER` with "
            "`SET search_path`, which saves and restores GUC state on each call.")
    hot_sql = [name for name in ("claim_next", "claim_batch", "submit", "_checkpoints_of", "_is_live")
               if language.get(name) == "sql"]
    if hot_sql:
        items.append(
            f"{len(items) + 1}. **SQL-language `SECURITY DEFINER` functions on the hot path are parsed "
            "and planned again in every statement that calls them.** In the installed version: "
            + ", ".join(f"`{name}`" for name in hot_sql) + " (`_checkpoints_of` runs once per claimed "
            "job, `_is_live` in every fenced write). A function with `SECURITY DEFINER`/`SET` is never "
            "inlined, and PostgreSQL 15 does not keep a SQL function's plan beyond the calling "
            "statement, so each call runs the parser and planner (`base_yyparse`, `pg_plan_query` "
            "under `fmgr_sql` in a `perf` profile of the backend).")
    return items


def _plan_item(f: dict[str, Any], number: int) -> str:
    gain = f["gen_forced"] / f["gen_auto"] - 1
    measured = (f"the same 1-worker fenceq drain with the session set to `plan_cache_mode = "
                f"force_generic_plan` ran {_rate(f['gen_forced'])} jobs/s against {_rate(f['gen_auto'])} "
                f"jobs/s by default ({gain * 100:+.0f}%)")
    if gain >= 0.05:
        return (f"{number}. **Statements are planned again on every call.** Statements whose parameters "
                "make the plan cache keep choosing custom plans (the claim query's queue, time and "
                f"count) are planned on every call. Diagnostic in this run: {measured}.")
    return (f"{number}. **Re-planning is not a significant cost in this version:** {measured}, within "
            "the noise.")


def _why_drain(f: dict[str, Any], results: dict[str, Any]) -> list[str]:
    d = results["diag"]
    w1 = f["drain"][0]
    extra = 1 / w1[1] - 1 / w1[2]
    lines = [
        f"**Per-job drain.** At one worker a job costs {_us(1 / w1[1])} µs with fenceq and "
        f"{_us(1 / w1[2])} µs bare: {_us(extra)} µs more per job. Both make two autocommit round trips "
        f"with two durable commits per job (a one-row commit costs {_us(d.get('commit_p50', 0))} µs "
        f"here, a `SELECT 1` round trip {_us(d.get('round_trip_p50', 0))} µs), so the difference is "
        "CPU spent inside the functions. With 4 and 16 workers both systems saturate the two cores, so the "
        "same extra CPU per job shows up as the throughput ratio. Where it goes (from `perf` profiles of "
        "the backend on this machine, and the diagnostics below):",
        "",
        *_helper_items(results),
        _plan_item(f, len(_helper_items(results)) + 1),
        f"{len(_helper_items(results)) + 2}. **More writes per job than the baseline, by design.** The claim ledger row (`_claims`, two "
        "indexes), five indexes on `_jobs` against two on `bare_jobs` (both claim and complete change "
        "`status`, which partial-index predicates read, so neither update is HOT), a lock-then-update "
        "pair of statements per fenced write (so the lease is judged after the lock), and three CHECK "
        f"constraints whose expressions are rebuilt in every UPDATE's executor start: {_wal_text(results)}.",
    ]
    return lines


def _why_batch(f: dict[str, Any], results: dict[str, Any]) -> list[str]:
    d = results["diag"]
    lines = []
    if results.get("code", {}).get("ledger_precheck") and d.get("ledger_first") and d.get("ledger_last"):
        growth = d["ledger_last"] / d["ledger_first"]
        seq = "Seq Scan on _claims" in d.get("ledger_plan", "")
        lines += [
            "**Batched drain: the claim-ledger pre-check scans the whole ledger.** Before claiming, "
            "`_claim` checks `EXISTS (SELECT 1 FROM fenceq._claims WHERE claim_token = ANY "
            "(claim_tokens))`. PL/pgSQL caches that statement's plan for the session; planned while the "
            "ledger is small (a fresh install, or right after `purge`), the cached plan is a sequential "
            "scan, and it stays one while the ledger grows, until autovacuum happens to analyse "
            f"`_claims`. Diagnostic in this run: draining {d.get('ledger_calls', 0):,} batches of 10 from "
            f"an empty ledger on one fresh session, `claim_batch` took {d['ledger_first'] * 1e3:.2f} ms per "
            f"call over the first tenth and {d['ledger_last'] * 1e3:.2f} ms over the last tenth "
            f"({growth:.1f}× the early time)"
            + ("; the executed plan of the pre-check (below, under Diagnostics) is a `Seq Scan on "
               "_claims`" if seq else "")
            + (f", which alone took {d['ledger_scan_ms']:.2f} ms to read {d['ledger_scan_rows']:,} "
               "ledger rows in that last call." if d.get("ledger_scan_rows") else "."),
            "",
            "This makes every batched claim O(ledger size) until the plan is replaced, and the ledger "
            "keeps every token until its job is purged. The check is redundant: the ledger `INSERT … ON "
            "CONFLICT (claim_token) DO NOTHING` that follows is always an index probe, already raises "
            "QF301, and raising rolls the whole claim back. (`claim_next` is exposed to the same cached "
            "plan, though its one-token probe was an index scan in the sessions examined.)",
            "",
        ]
    loops = results.get("code", {}).get("complete_batch_loops", True)
    lines += [
        "**Batched drain: a fixed cost per call.** "
        + ("`complete_batch` loops over the fences and calls `fenceq.complete` once per element, so "
           "its cost grows per job. " if loops else
           "`claim_batch` claims every picked job with one `UPDATE` and one ledger `INSERT`, and "
           "`complete_batch` completes them with one `UPDATE`, so what a batch pays beyond the bare "
           "loop is mostly a fixed cost per call (validation, the locking statements, function "
           "entry): a batch of 10 spreads it over 10 jobs, a batch of 100 over 100. ")
        + f"The bare batch loop is one `UPDATE` for the whole claim and one for the whole completion: "
        f"bare 100-row batches reach {_rate(f['bare100'])} jobs/s against {_rate(f['bare10'])} for "
        "10-row batches (the target compares with the 10-row loop).",
    ]
    return lines


def _why_submit(f: dict[str, Any], results: dict[str, Any]) -> list[str]:
    d = results["diag"]
    code = results.get("code", {})
    census = results.get("census", {})
    plain = census.get("submit", {})
    owned = census.get("submit with submission_id", {})
    language = code.get("language", {})
    sql_fp = [name for name in ("_fingerprint", "_canonical_json", "_utc_text", "_identity_keys")
              if language.get(name) == "sql"]
    lines = [
        f"**Submit.** Measured without network or commit (a warm loop in one rolled-back transaction), "
        f"`fenceq.submit` costs {d.get('server_submit', 0) * 1e6:.0f} µs of server time against "
        f"{d.get('server_bare_insert', 0) * 1e6:.0f} µs for the bare insert. It "
        + (f"runs {plain['statements']} statements inside fenceq, " if plain.get("statements", -1) >= 0
           else "")
        + "reads the queue row, generates a UUID and inserts into a table with five indexes and three "
        "CHECK constraints"
        + ("; the public `submit` is a `LANGUAGE sql` wrapper, parsed and planned on each call"
           if language.get("submit") == "sql" else "")
        + ". The queue's notify flag is on by default, so every submit also queues a `pg_notify` (see "
        "the notify table for its cost under concurrency).",
        "",
        "**Owned submit** adds the fingerprint (canonical JSON of the request and its SHA-256), an "
        "advisory lock per identity, and the `_submissions` lookup and insert (primary key and job-id "
        "index)"
        + (f": {owned['statements']} statements inside fenceq per call"
           if owned.get("statements", -1) >= 0 else "")
        + "."
        + (" " + ", ".join(f"`{name}`" for name in sql_fp) + " are `LANGUAGE sql SECURITY DEFINER` "
           "functions, each parsed and planned again on every call (a `perf` profile of an owned "
           "submit showed about a third of the backend's CPU in the parser and planner)."
           if sql_fp else ""),
    ]
    return lines


def _fixes(f: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """Suggested fixes, only those the installed code and this run's
    diagnostics still call for."""
    code = results.get("code", {})
    census = results.get("census", {})
    language = code.get("language", {})
    items = []
    if code.get("ledger_precheck"):
        items.append(
            "**Drop the claim-ledger pre-check in `_claim`** (`EXISTS (SELECT 1 FROM fenceq._claims "
            "WHERE claim_token = ANY (...))`). The ledger insert's `ON CONFLICT (claim_token)` is "
            "always an index probe and already raises QF301, which rolls the whole claim back; keep "
            "only the duplicate-token test within the array. If the early check must stay, write it "
            "so no cached plan can be a sequential scan (e.g. one `= t` probe per token in a `LATERAL`).")
    if code.get("complete_batch_loops"):
        items.append(
            "**Set-based batches.** `complete_batch`: lock every row in one `SELECT … WHERE job_id = "
            "ANY(...) ORDER BY job_id FOR UPDATE`, read `clock_timestamp()` once after the locks, then "
            "one `UPDATE … FROM unnest(...)` restricted to live fences, answering per element from "
            "what it updated. `claim_batch`: lock the candidates, read the clock, claim and write the "
            "ledger in one statement (`WITH cand AS MATERIALIZED (… FOR UPDATE SKIP LOCKED), upd AS "
            "(UPDATE … FROM cand RETURNING …), led AS (INSERT INTO _claims SELECT … FROM upd ON "
            "CONFLICT DO NOTHING RETURNING 1) …`), with one grouped checkpoint read.")
    batch_helpers = sum(v.get("helpers", 0) for k, v in census.items() if "batch" in k)
    if batch_helpers > 0:
        items.append(
            "**Extend the one-expression validation fast path to the batch calls** "
            f"(`claim_batch` and `complete_batch` still made {batch_helpers} helper calls through "
            "`PERFORM` for 10 jobs in this run): test array sizes and element lengths in one "
            "expression or one statement, and call the helpers only when it fails.")
    hot_sql = [name for name in ("claim_next", "claim_batch", "submit", "_checkpoints_of", "_is_live",
                                 "_fingerprint", "_canonical_json", "_utc_text", "_identity_keys")
               if language.get(name) == "sql"]
    if hot_sql:
        items.append("**No `LANGUAGE sql` functions on hot paths** (" + ", ".join(
            f"`{n}`" for n in hot_sql) + "): PL/pgSQL keeps its plans for the session.")
    if f["gen_forced"] / f["gen_auto"] - 1 >= 0.05:
        items.append(
            "**Stop re-planning the claim statement:** give the one-token path its own statement with "
            "a literal `LIMIT 1`, so that the generic plan is the cheap one. (A function-level `SET "
            "plan_cache_mode` would fail `verify_schema`, which requires `proconfig` to be exactly the "
            "pinned `search_path`.)")
    if not items:
        return []
    out = ["### Suggested fixes (for the SQL owners; not applied by the benchmark)", "",
           "Each keeps the contract (every function `SECURITY DEFINER` with the pinned `search_path`; "
           "locks taken before the clock is read):", ""]
    out += [f"{i}. {item}" for i, item in enumerate(items, 1)]
    out.append("")
    return out


def write_report(results: dict[str, Any], config: Config, facts: dict[str, Any], *, command: str,
                 started: dt.datetime, elapsed: float, path: Path | None) -> str:
    f = _figures(results, config)
    out: list[str] = []
    add = out.append
    add("# fenceq benchmarks")
    add("")
    add(f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC (run time {elapsed / 60:.1f} min). "
        "The whole file is rewritten by every run; edit `bench/report.py`, not this file.")
    add("")
    add("Every fenceq figure stands beside a bare-SQL baseline measured in the same run, on the same "
        "server, in the same database. fenceq's functions are called directly through psycopg 3 "
        "(autocommit connections; psycopg prepares statements server-side after five executions), "
        "except in the Python client figure.")
    add("")
    add("## Machine and server")
    add("")
    out.extend(_machine(facts))
    add("")
    add("The server is the durable one `make bench` starts (`FENCEQ_PG_DURABLE=1 scripts/pg-test-server "
        "start` on port 54339): every commit waits for `fdatasync`. Workers run as separate processes on "
        "the same 2-core machine as the server, so throughput figures with several workers are "
        "CPU-bound.")
    add("")
    load = results.get("load", {})
    if load:
        other = sum(v["other"] for v in load.values())
        capacity = sum(v["capacity"] for v in load.values())
        share = other / capacity if capacity else 0.0
        worst = max(load.items(), key=lambda kv: kv[1]["other_share"])
        add(f"Other processes on the machine (neither the bench nor its server) used {share * 100:.1f}% "
            f"of its CPU capacity during the run (most in \"{worst[0]}\": "
            f"{worst[1]['other_share'] * 100:.0f}%)."
            + (" **The machine was not idle: absolute figures are lower and noisier than on a quiet "
               "machine.** Ratios are less affected: both systems are measured alternately, in the "
               "same conditions." if share > 0.05 else ""))
        add("")
    add("## Summary")
    add("")
    out.extend(_summary(f))
    add("")
    add("Throughput figures are the median of "
        f"{config.rounds} rounds, and each throughput ratio is the median of the per-round ratios "
        "(fenceq ÷ baseline, higher is better); within a round both systems run back to back and the "
        "order alternates between rounds. Latency ratios are large ÷ small backlog (lower is better).")
    add("")

    misses = []
    if any(v.ok is False for _, _, _, v, _, _ in f["drain"]):
        misses.append("drain")
    if any(v.ok is False for _, _, v, _ in f["batch"]):
        misses.append("batch")
    if f["submit_v"].ok is False or f["owned_v"].ok is False:
        misses.append("submit")
    if f["lat_v"].ok is False or f["multi_v"].ok is False or f["ordered"] is False:
        misses.append("latency")
    add("## Targets missed, by how much, and why")
    add("")
    if not misses:
        add("None: every target was met in this run.")
        add("")
    else:
        gaps = []
        for workers, _, _, v, _, _ in f["drain"]:
            if v.ok is False:
                gaps.append(f"per-job drain at {workers} worker(s): {v.ratio:.2f}× against ≥ 0.90× "
                            f"({v.gap_text()})")
        for size, _, v, _ in f["batch"]:
            if v.ok is False:
                gaps.append(f"batched drain, batches of {size}: {v.ratio:.2f}× against ≥ 0.80× "
                            f"({v.gap_text()})")
        for label, v, target in (("submit", f["submit_v"], "0.90"), ("owned submit", f["owned_v"], "0.80")):
            if v.ok is False:
                gaps.append(f"{label}: {v.ratio:.2f}× against ≥ {target}× ({v.gap_text()})")
        if f["lat_v"].ok is False:
            gaps.append(f"claim latency scaling: {f['lat_v'].ratio:.2f}× against ≤ 1.30× "
                        f"({f['lat_v'].gap_text()})")
        if f["multi_v"].ok is False:
            gaps.append(f"3-queue claim latency scaling: {f['multi_v'].ratio:.2f}× against ≤ 1.30× "
                        f"({f['multi_v'].gap_text()})")
        if f["ordered"] is False:
            gaps.append("3-queue claims did not use an ordered index scan per queue (see the plan below)")
        for gap in gaps:
            add(f"- {gap}")
        add("")
        if "drain" in misses:
            out.extend(_why_drain(f, results))
            add("")
        if "batch" in misses:
            out.extend(_why_batch(f, results))
            add("")
        if "submit" in misses:
            out.extend(_why_submit(f, results))
            add("")
        if "latency" in misses:
            add("**Claim latency.** See the latency table and plans below: the figures show which part "
                "grows with the backlog.")
            add("")
        if {"drain", "batch", "submit"} & set(misses):
            out.extend(_fixes(f, results))

    add("## Per-job drain")
    add("")
    add("Each worker loops `fenceq.claim_next` then `fenceq.complete` (each its own autocommit "
        "transaction, a fresh 128-bit claim token per claim) until the queue is empty; the baseline "
        "loops the bare claim `UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) "
        "RETURNING` then the bare completing `UPDATE`. Jobs per run: "
        + ", ".join(f"{config.jobs(n):,} at {w} worker{'s' if w > 1 else ''}"
                    for w, n in config.drain_jobs.items())
        + " (fenceq's filled with `submit_batch`, the baseline's with one `INSERT … SELECT`); finished "
        "jobs are purged and both tables vacuumed between runs.")
    add("")
    add("| workers | fenceq jobs/s | bare jobs/s | ratio | target | result | fenceq rounds | bare rounds |")
    add("|---:|---:|---:|---:|---:|---|---|---|")
    for workers, fq, bare, v, fq_all, bare_all in f["drain"]:
        add(f"| {workers} | {_rate(fq)} | {_rate(bare)} | {v.ratio:.2f}× | {v.target_text()} | "
            f"{v.result_text()} | {_spread(fq_all)} | {_spread(bare_all)} |")
    add("")
    add("## Batched drain")
    add("")
    add(f"{config.batch_workers} workers; each loops `claim_batch` (10 or 100 fresh tokens) then "
        f"`complete_batch` on what it got; the baseline claims with one `UPDATE … FROM (SELECT … FOR "
        f"UPDATE SKIP LOCKED LIMIT n) RETURNING` and completes with one `UPDATE … WHERE id = ANY(...)`. "
        f"{config.jobs(config.batch_jobs):,} jobs per run. The target compares both fenceq batch sizes "
        "with the bare 10-row loop.")
    add("")
    add("| loop | jobs/s | ratio to bare 10-row | target | result |")
    add("|---|---:|---:|---:|---|")
    add(f"| bare, 10-row batches | {_rate(f['bare10'])} | 1.00× | | baseline |")
    add(f"| bare, 100-row batches | {_rate(f['bare100'])} | {f['bare100'] / f['bare10']:.2f}× | | reported |")
    for size, fq, v, _ in f["batch"]:
        add(f"| fenceq, batches of {size} | {_rate(fq)} | {v.ratio:.2f}× | {v.target_text()} | "
            f"{v.result_text()} |")
    add("")
    add("## Submit")
    add("")
    add(f"One producer, {config.submit_seconds:.0f} s per round, each call its own autocommit "
        "transaction: `fenceq.submit(queue, task, payload)` on a queue with the default settings (notify "
        "on), the same with a unique `submission_id`, and the bare `INSERT … RETURNING id`. "
        f"`submit_batch` sends {config.submit_batch_size:,} requests as one JSON array, "
        f"{config.submit_batches} calls per round; the bare batch inserts the same JSON array with one "
        "`INSERT … SELECT … FROM jsonb_array_elements(...)`.")
    add("")
    add("| call | jobs/s | ratio to bare | target | result |")
    add("|---|---:|---:|---:|---|")
    add(f"| bare `INSERT` | {_rate(f['bare_submit'])} | 1.00× | | baseline |")
    add(f"| `fenceq.submit` | {_rate(f['submit'])} | {f['submit_v'].ratio:.2f}× | "
        f"{f['submit_v'].target_text()} | {f['submit_v'].result_text()} |")
    add(f"| `fenceq.submit` with `submission_id` | {_rate(f['owned'])} | {f['owned_v'].ratio:.2f}× | "
        f"{f['owned_v'].target_text()} | {f['owned_v'].result_text()} |")
    add(f"| bare batch `INSERT` of 1,000 | {_rate(f['sb_bare'])} | 1.00× | | baseline |")
    add(f"| `fenceq.submit_batch` of 1,000 | {_rate(f['sb_fq'])} | {f['sb_v'].ratio:.2f}× | — | reported |")
    add("")
    add("### Notify flag on and off")
    add("")
    add("A transaction that ran `pg_notify` takes a cluster-wide lock at commit, so notifying commits "
        "serialise. `fenceq.submit` into a queue with the notify flag on (the default) and into one "
        "switched off with `fenceq.set_queue_notify(queue, false)`:")
    add("")
    add("| producers | notify on jobs/s | notify off jobs/s | on ÷ off | bare `INSERT` jobs/s |")
    add("|---:|---:|---:|---:|---:|")
    for producers, on, off, bare, ratio in f["notify"]:
        add(f"| {producers} | {_rate(on)} | {_rate(off)} | {ratio:.2f}× | {_rate(bare)} |")
    add("")
    add("## Claim latency against backlog size")
    add("")
    add(f"One connection claims with `claim_next` (timed) and completes each job (untimed); "
        f"{config.latency_warmup} warm-up claims, then {config.latency_samples} timed ones per row. The "
        f"backlog of `{Q['lat']}` is topped up before each row so it stays between the stated size and "
        f"that size plus {config.latency_samples + config.latency_warmup}. Backlogs over 5,000 jobs are "
        "bulk-inserted **directly into `fenceq._jobs`** (one `INSERT … SELECT generate_series`, the row "
        "`submit` would write: UUID job id, priority 0, the queue's `max_attempts`, due an hour ago), "
        "not through `submit_batch`; smaller top-ups use `submit_batch`. The baseline table gets the "
        "same counts. 3-queue rows claim across "
        f"`[{Q['lat']}, {Q['lat_b']}, {Q['lat_c']}]`; the two extra queues hold "
        f"{config.side_backlog_small:,} pending jobs each, and {config.side_backlog_large:,} each at the "
        f"largest backlog ({max(config.backlogs) + 2 * config.side_backlog_large:,} pending in all). "
        "The bare 3-queue claim uses the same per-queue `LATERAL` shape as fenceq; the naive "
        "`queue = ANY(...)` form is shown for contrast.")
    add("")
    out.extend(_latency_table(results, config))
    add("")
    add(f"p50 at {_count_label(f['large'])} ÷ p50 at {_count_label(f['small'])}: fenceq "
        f"{f['lat_v'].ratio:.2f}× (target {f['lat_v'].target_text()}: {f['lat_v'].result_text()}), bare "
        f"{f['lat_bare_v'].ratio:.2f}×. 3-queue claims: {f['multi_v'].ratio:.2f}× from small to large "
        f"backlog (target {f['multi_v'].target_text()}: {f['multi_v'].result_text()}), and "
        f"{f['multi_vs_single']:.2f}× a single-queue claim at the large backlog.")
    add("")
    explain = results["explain"]
    if explain.get("multi"):
        verdict = {True: "Each queue is read with an ordered scan of `_jobs_claim_idx` under a `Limit`, "
                         "and the only sort is of the per-queue heads (at most one row per queue), never "
                         "the backlog.",
                   False: "**The plan does not show one ordered index scan per queue: check it.**",
                   None: ""}[f["ordered"]]
        add("### EXPLAIN evidence")
        add("")
        add(f"The candidate query inside `fenceq._claim` for a 3-queue `claim_next` at the largest "
            f"backlog, captured with `auto_explain` (`log_nested_statements`, `log_analyze`) during the "
            f"run. {verdict}")
        add("")
        add("```")
        add(explain["multi"])
        add("```")
        add("")
    if explain.get("naive"):
        add("For contrast, the naive bare form `queue = ANY(...) ORDER BY priority DESC, run_at, id` "
            "at the same backlog (`EXPLAIN ANALYZE`, rolled back) has to read and sort every pending job "
            "of the three queues:")
        add("")
        add("```")
        add(explain["naive"])
        add("```")
        add("")
    if explain.get("error"):
        add(f"(No plan captured: {explain['error']}.)")
        add("")
    add("## Python client overhead")
    add("")
    add("One worker, the same per-job loop: fenceq's functions through psycopg directly, and through the "
        "client (`fenceq.connect(url)`, `claim_next(...)`, `complete(claim.fence)`), which validates "
        "inputs and builds `Claim`/`Fence` objects.")
    add("")
    add("| loop | jobs/s | per job |")
    add("|---|---:|---:|")
    add(f"| direct psycopg calls | {_rate(f['direct'])} | {_us(1 / f['direct'])} µs |")
    add(f"| `fenceq.connect(url)` client | {_rate(f['client'])} | {_us(1 / f['client'])} µs |")
    add("")
    add(f"Client overhead: {_us(1 / f['client'] - 1 / f['direct'])} µs per job "
        f"({(1 - f['client'] / f['direct']) * 100:.0f}% of the direct rate).")
    add("")
    add("## Diagnostics")
    add("")
    d = results["diag"]
    add("| probe | value |")
    add("|---|---:|")
    add(f"| `SELECT 1` round trip, p50 | {_us(d.get('round_trip_p50', 0))} µs |")
    add(f"| one-row `INSERT` autocommit (durable commit), p50 | {_us(d.get('commit_p50', 0))} µs |")
    add(f"| server time per `fenceq.submit` (warm loop, no commit) | "
        f"{d.get('server_submit', 0) * 1e6:.1f} µs |")
    add(f"| server time per bare `INSERT` (warm loop, no commit) | "
        f"{d.get('server_bare_insert', 0) * 1e6:.1f} µs |")
    add(f"| `PERFORM fenceq._check_name(...)` (one helper call) | "
        f"{d.get('server_perform_helper', 0) * 1e6:.2f} µs |")
    add(f"| the same check inline (`IF length(...) NOT BETWEEN ...`) | "
        f"{d.get('server_inline_check', 0) * 1e6:.2f} µs |")
    wal = results.get("wal", {})
    if wal.get("fenceq/1") and wal.get("bare/1"):
        add(f"| WAL written per job, 1-worker per-job drain: fenceq | {median(wal['fenceq/1']):,.0f} bytes |")
        add(f"| WAL written per job, 1-worker per-job drain: bare | {median(wal['bare/1']):,.0f} bytes |")
    add(f"| 1-worker fenceq drain, default plan cache | {_rate(f['gen_auto'])} jobs/s |")
    add(f"| 1-worker fenceq drain, session `plan_cache_mode = force_generic_plan` | "
        f"{_rate(f['gen_forced'])} jobs/s |")
    if d.get("ledger_first"):
        add(f"| `claim_batch` of 10 from an empty ledger, first tenth of the drain | "
            f"{d['ledger_first'] * 1e3:.2f} ms |")
        add(f"| the same, last tenth ({d.get('ledger_calls', 0):,} calls in all) | "
            f"{d['ledger_last'] * 1e3:.2f} ms |")
    add("")
    if d.get("ledger_plan"):
        add("The executed plan of `_claim`'s ledger pre-check at the end of that drain (`auto_explain`):")
        add("")
        add("```")
        add(d["ledger_plan"])
        add("```")
        add("")
    add("## Method notes")
    add("")
    add("- Database: a fresh `fenceq_bench` on the server, fenceq installed with "
        "`fenceq.migrate.migrate(url)`, the baseline table created beside it and dropped with it at the "
        "end (`python -m bench --keep-db` keeps it).")
    add("- Worker processes (not threads), each with its own autocommit connection, started once and "
        "released together for each run; a run's rate is its jobs over the span from the first worker's "
        "start to the last one's end. Every statement is warmed up (prepared, PL/pgSQL compiled) "
        "before timing.")
    add("- Per-job and batched drains fill fenceq's queue through `submit_batch`; finished jobs are "
        "removed with `fenceq.purge` (baseline: `DELETE`) and both tables vacuumed and checkpointed "
        "before every run. Autovacuum stays on, as in production.")
    add("- Tokens are 128-bit random hex strings (`secrets.token_hex(16)`), as "
        "`fenceq.new_claim_token()` makes.")
    add("")
    add("The baseline schema and statements (`bench/statements.py`):")
    add("")
    add("```sql")
    add(sql.BARE_SCHEMA.strip())
    add("-- claim")
    add(sql.BARE_CLAIM.strip())
    add("-- complete")
    add(sql.BARE_COMPLETE.strip())
    add("```")
    add("")
    add("Phase timings of this run: " + ", ".join(
        f"{name} {seconds:.0f} s" for name, seconds in results["phases"].items()) + ".")
    if load:
        add("")
        add("CPU used by other processes during each phase (share of the machine's capacity): " + ", ".join(
            f"{name} {v['other_share'] * 100:.0f}%" for name, v in load.items()) + ".")
    add("")
    text = "\n".join(out)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return text
