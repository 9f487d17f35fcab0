"""The measurements. Every fenceq figure has a bare-SQL figure taken in the
same phase, alternating which system goes first from round to round so that
drift (autovacuum, checkpoints, cache warmth) does not favour either."""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import cpu, db
from . import statements as sql
from .workers import Pool, new_token

Q = db.QUEUES


@dataclass
class Config:
    scale: float = 1.0
    rounds: int = 5
    drain_jobs: dict[int, int] = field(default_factory=lambda: {1: 2500, 4: 4000, 16: 4000})
    batch_jobs: int = 20000
    batch_workers: int = 4
    client_jobs: int = 2000
    submit_seconds: float = 2.0
    submit_batches: int = 10
    submit_batch_size: int = 1000
    backlogs: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    side_backlog_large: int = 250_000   # lat_b and lat_c at the largest stage
    side_backlog_small: int = 1_000
    latency_samples: int = 400
    latency_warmup: int = 40
    naive_samples: int = 5

    def jobs(self, n: int) -> int:
        return max(100, int(n * self.scale))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Bench:
    def __init__(self, url: str, config: Config, log: Callable[[str], None]):
        self.url = url
        self.config = config
        self.log = log
        self.conn = db.connect(url)
        self.results: dict[str, Any] = {"drain": {}, "wal": {}, "batch": {}, "client": {}, "generic": {},
                                        "submit": {}, "notify": {}, "submit_batch": {},
                                        "latency": {}, "explain": {}, "diag": {}, "phases": {}}
        self.pool: Pool | None = None
        self.postmaster = cpu.postmaster_pid(self.conn)
        self.results["load"] = {}

    def cpu_sample(self):
        return cpu.sample(self.postmaster, self.pool.pids if self.pool else [],
                          self.conn.info.dbname)

    # -- helpers ---------------------------------------------------------------

    def _order(self, round_no: int, items: list) -> list:
        """Alternate the order of the systems from round to round."""
        return items if round_no % 2 == 0 else list(reversed(items))

    def _record(self, group: str, key: str, value: float) -> None:
        self.results[group].setdefault(key, []).append(value)

    def _phase(self, name: str, fn: Callable[[], None]) -> None:
        start = time.monotonic()
        self.log(f"== {name}")
        before = self.cpu_sample()
        fn()
        load = cpu.other_load(before, self.cpu_sample())
        self.results["phases"][name] = time.monotonic() - start
        if load is not None:
            self.results["load"][name] = load
            if load["other_share"] > 0.05:
                self.log(f"  note: other processes used {load['other_share'] * 100:.0f}% of the "
                         f"machine's CPU during this phase")

    def start_pool(self) -> None:
        size = max(self.config.drain_jobs)
        size = max(size, self.config.batch_workers, 4)
        self.log(f"starting {size} worker processes")
        self.pool = Pool(self.url, size)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.conn.close()

    # -- phases ------------------------------------------------------------------

    def warm_up(self) -> None:
        """Every worker connection runs every statement past psycopg's prepare
        threshold and compiles fenceq's PL/pgSQL before anything is timed."""
        n = max(self.config.drain_jobs)
        w = self.config.batch_workers
        db.fill_fenceq_api(self.conn, Q["drain"], n * 12)
        db.fill_bare(self.conn, Q["drain"], n * 12)
        db.vacuum(self.conn, checkpoint=False)
        self.pool.run(n, "drain_fenceq", queue=Q["drain"])
        self.pool.run(n, "drain_bare", queue=Q["drain"])
        for size, rounds in ((10, 8), (100, 3)):
            db.fill_fenceq_api(self.conn, Q["batch"], w * size * rounds)
            db.fill_bare(self.conn, Q["batch"], w * size * rounds)
            self.pool.run(w, "drain_fenceq_batch", queue=Q["batch"], batch=size)
            self.pool.run(w, "drain_bare_batch", queue=Q["batch"], batch=size)
        db.clear_finished(self.conn)

    def drains(self) -> None:
        c = self.config
        for workers, base in c.drain_jobs.items():
            n = c.jobs(base)
            for r in range(c.rounds):
                db.fill_fenceq_api(self.conn, Q["drain"], n)
                db.fill_bare(self.conn, Q["drain"], n)
                db.vacuum(self.conn)
                for system in self._order(r, ["bare", "fenceq"]):
                    lsn = self.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
                    res = self.pool.run(workers, f"drain_{system}", queue=Q["drain"])
                    wal = self.conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)",
                                            (lsn,)).fetchone()[0]
                    self._record("wal", f"{system}/{workers}", float(wal) / n)
                    if res.jobs != n:
                        raise RuntimeError(f"{system} drain handled {res.jobs} of {n} jobs")
                    self._record("drain", f"{system}/{workers}", res.rate)
                    self.log(f"  per-job drain {system:6} {workers:2} workers round {r + 1}: "
                             f"{res.rate:8.0f} jobs/s ({n} jobs in {res.seconds:.2f}s)")
                db.clear_finished(self.conn)

    def batches(self) -> None:
        c = self.config
        n = c.jobs(c.batch_jobs)
        w = c.batch_workers
        variants = [("bare", 10), ("fenceq", 10), ("fenceq", 100), ("bare", 100)]
        for r in range(c.rounds):
            for system, size in self._order(r, variants):
                if system == "fenceq":
                    db.fill_fenceq_api(self.conn, Q["batch"], n)
                else:
                    db.fill_bare(self.conn, Q["batch"], n)
                db.vacuum(self.conn)
                res = self.pool.run(w, f"drain_{system}_batch", queue=Q["batch"], batch=size)
                if res.jobs != n:
                    raise RuntimeError(f"{system} batch drain handled {res.jobs} of {n} jobs")
                self._record("batch", f"{system}/{size}", res.rate)
                self.log(f"  batched drain {system:6} batch {size:3} ({w} workers) round {r + 1}: "
                         f"{res.rate:8.0f} jobs/s ({n} jobs in {res.seconds:.2f}s)")
                db.clear_finished(self.conn)

    def client_overhead(self) -> None:
        """One worker: fenceq's functions through psycopg directly, versus the
        same loop through the Python client (fenceq.connect)."""
        c = self.config
        n = c.jobs(c.client_jobs)
        self.pool.run(1, "drain_client", queue=Q["client"], url=self.url)  # connect + warm up
        db.fill_fenceq_api(self.conn, Q["client"], 50)
        self.pool.run(1, "drain_client", queue=Q["client"], url=self.url)
        for r in range(c.rounds):
            for system in self._order(r, ["direct", "client"]):
                db.fill_fenceq_api(self.conn, Q["client"], n)
                db.vacuum(self.conn)
                if system == "direct":
                    res = self.pool.run(1, "drain_fenceq", queue=Q["client"])
                else:
                    res = self.pool.run(1, "drain_client", queue=Q["client"], url=self.url)
                self._record("client", system, res.rate)
                self.log(f"  client overhead {system:6} round {r + 1}: {res.rate:8.0f} jobs/s")
                db.clear_finished(self.conn)

    def generic_plans(self) -> None:
        """Diagnostic: the 1-worker fenceq drain with the session forced to
        generic plans (PL/pgSQL statements then skip re-planning)."""
        c = self.config
        n = c.jobs(c.drain_jobs[1])
        session = ["SET plan_cache_mode = force_generic_plan"]
        for r in range(c.rounds):
            for mode in self._order(r, ["auto", "generic"]):
                db.fill_fenceq_api(self.conn, Q["drain"], n)
                db.vacuum(self.conn)
                res = self.pool.run(1, "drain_fenceq", queue=Q["drain"],
                                    session=session if mode == "generic" else None)
                self._record("generic", mode, res.rate)
                self.log(f"  1-worker fenceq drain, plan_cache_mode {mode:7} round {r + 1}: "
                         f"{res.rate:8.0f} jobs/s")
                db.clear_finished(self.conn)

    def submits(self) -> None:
        c = self.config
        seconds = c.submit_seconds
        for r in range(c.rounds):
            for variant in self._order(r, ["bare", "fenceq", "fenceq_owned"]):
                res = self.pool.run(1, "submit", queue=Q["submit"], variant=variant,
                                    duration=seconds, tag=f"s{r}")
                self._record("submit", f"{variant}/1", res.rate)
                self.log(f"  submit {variant:12} 1 producer  round {r + 1}: {res.rate:8.0f} jobs/s")
        # pg_notify serialises notifying commits: compare the notify flag on
        # and off, with 1 and 4 producers (bare insert with 4 for reference).
        for producers in (1, 4):
            for r in range(c.rounds):
                variants = [("off", Q["notify_off"]), ("on", Q["notify_on"])]
                if producers > 1:
                    variants.append(("bare", Q["submit"]))
                for flag, queue in self._order(r, variants):
                    res = self.pool.run(producers, "submit", queue=queue,
                                        variant="bare" if flag == "bare" else "fenceq",
                                        duration=seconds, tag=f"n{r}")
                    self._record("notify", f"{flag}/{producers}", res.rate)
                    self.log(f"  submit notify {flag:4} {producers} producers round {r + 1}: "
                             f"{res.rate:8.0f} jobs/s")
        # submit_batch of 1,000 versus one bare multi-row INSERT of the same JSON.
        size = c.submit_batch_size
        requests = json.dumps([{"task": "bench", "payload": {"n": i, "kind": "bench"}}
                               for i in range(size)])
        for statement in (sql.FQ_SUBMIT_BATCH, sql.BARE_INSERT_BATCH):  # warm up
            self.conn.execute(statement, {"queue": Q["submit_batch"], "requests": requests})
        for r in range(c.rounds):
            for system in self._order(r, ["bare", "fenceq"]):
                statement = sql.FQ_SUBMIT_BATCH if system == "fenceq" else sql.BARE_INSERT_BATCH
                start = time.perf_counter()
                for _ in range(c.submit_batches):
                    ids = self.conn.execute(statement, {"queue": Q["submit_batch"],
                                                        "requests": requests}).fetchone()[0]
                    if len(ids) != size:
                        raise RuntimeError(f"{system} batch insert returned {len(ids)} ids")
                rate = size * c.submit_batches / (time.perf_counter() - start)
                self._record("submit_batch", system, rate)
                self.log(f"  submit batch of {size} {system:6} round {r + 1}: {rate:8.0f} jobs/s")
        db.clear_queues(self.conn, [Q[k] for k in db.SUBMIT_QUEUES])

    # -- claim latency -------------------------------------------------------------

    def _top_up(self, queue: str, target: int) -> None:
        missing = target - db.pending_fenceq(self.conn, queue)
        if missing > 0:
            if missing > 5000:
                db.fill_fenceq_direct(self.conn, queue, missing)
            else:
                db.fill_fenceq_api(self.conn, queue, missing)
        missing = target - db.pending_bare(self.conn, queue)
        db.fill_bare(self.conn, queue, missing)

    def _claims(self, system: str, queues: list[str], count: int, naive: bool = False) -> list[float]:
        owner = "bench-latency"
        out = []
        conn = self.conn
        for _ in range(count):
            if system == "fenceq":
                token = new_token()
                start = time.perf_counter()
                row = conn.execute(sql.FQ_CLAIM_NEXT,
                                   {"queues": queues, "owner": owner, "token": token}).fetchone()
                out.append(time.perf_counter() - start)
                if row is None:
                    raise RuntimeError("the latency backlog ran dry")
                conn.execute(sql.FQ_COMPLETE, {"job_id": row[0], "owner": owner,
                                               "generation": row[1], "token": token})
            else:
                if len(queues) == 1:
                    statement, params = sql.BARE_CLAIM, {"queue": queues[0], "owner": owner}
                else:
                    statement = sql.BARE_CLAIM_MULTI_NAIVE if naive else sql.BARE_CLAIM_MULTI
                    params = {"queues": queues, "owner": owner}
                start = time.perf_counter()
                row = conn.execute(statement, params).fetchone()
                out.append(time.perf_counter() - start)
                if row is None:
                    raise RuntimeError("the latency backlog ran dry")
                conn.execute(sql.BARE_COMPLETE, {"id": row[0], "owner": owner})
        return out

    def latency(self) -> None:
        c = self.config
        per_block = c.latency_samples + c.latency_warmup
        single = [Q["lat"]]
        multi = [Q["lat"], Q["lat_b"], Q["lat_c"]]
        largest = max(c.backlogs)
        for stage, backlog in enumerate(c.backlogs):
            side = c.side_backlog_large if backlog == largest else c.side_backlog_small
            label = _count_label(backlog)
            self.log(f"  filling: {label} pending in {Q['lat']} (side queues {side}) for both systems")
            fill_start = time.monotonic()
            self._top_up(Q["lat"], backlog + per_block)
            self._top_up(Q["lat_b"], side + per_block)
            self._top_up(Q["lat_c"], side + per_block)
            db.vacuum(self.conn)
            self.results["phases"][f"latency fill {label}"] = time.monotonic() - fill_start
            blocks = [("fenceq", "single", single), ("bare", "single", single),
                      ("fenceq", "multi", multi), ("bare", "multi", multi)]
            for system, mode, queues in self._order(stage, blocks):
                for q in queues:
                    self._top_up(q, (backlog if q == Q["lat"] else side) + per_block)
                samples = self._claims(system, queues, per_block)[c.latency_warmup:]
                key = f"{system}/{mode}/{backlog}"
                self.results["latency"][key] = samples
                self.log(f"  claim latency {system:6} {mode:6} at {label:>4}: "
                         f"p50 {pct(samples, 50) * 1e3:6.3f} ms  p95 {pct(samples, 95) * 1e3:6.3f} ms  "
                         f"p99 {pct(samples, 99) * 1e3:6.3f} ms")
            if backlog == largest:
                self._explain(single, multi)
        # The naive `queue = ANY(...)` bare claim, for contrast (few samples:
        # it sorts the whole backlog on every claim).
        samples = self._claims("bare", multi, c.naive_samples, naive=True)
        self.results["latency"][f"bare/naive/{largest}"] = samples
        self.log(f"  claim latency bare naive ANY() at {_count_label(largest)}: "
                 f"p50 {pct(samples, 50) * 1e3:.1f} ms")

    @staticmethod
    def _nested_plans(conn, statement: str, params: dict) -> tuple[list[str], Any]:
        """Run one statement with auto_explain reporting every nested
        statement's executed plan to this session; returns (plans, rows)."""
        notices: list[str] = []

        def on_notice(diag) -> None:
            notices.append(diag.message_primary or "")

        conn.execute("LOAD 'auto_explain'")
        conn.add_notice_handler(on_notice)
        try:
            for setting in ("auto_explain.log_min_duration = 0",
                            "auto_explain.log_nested_statements = on",
                            "auto_explain.log_analyze = on", "auto_explain.log_buffers = on",
                            "auto_explain.log_timing = on", "auto_explain.log_level = notice",
                            "client_min_messages = notice"):
                conn.execute(f"SET {setting}")
            rows = conn.execute(statement, params).fetchall()
        finally:
            conn.execute("SET auto_explain.log_min_duration = -1")
            conn.execute("RESET client_min_messages")
            conn.remove_notice_handler(on_notice)
        return notices, rows

    def ledger_probe(self) -> None:
        """Diagnostic: claim_batch time early and late in a one-worker drain
        that starts with an empty, freshly analysed claim ledger (as right
        after a purge), and the executed plan of _claim's ledger pre-check."""
        c = self.config
        n = c.jobs(20000)
        queue = Q["batch"]
        db.fill_fenceq_api(self.conn, queue, n)
        db.vacuum(self.conn)
        diag = self.results["diag"]
        with db.connect(self.url) as conn:  # a fresh session: nothing cached yet
            owner = "bench-ledger"
            times = []
            while True:
                tokens = [new_token() for _ in range(10)]
                start = time.perf_counter()
                rows = conn.execute(sql.FQ_CLAIM_BATCH,
                                    {"queues": [queue], "owner": owner, "tokens": tokens}).fetchall()
                times.append(time.perf_counter() - start)
                if not rows:
                    break
                conn.execute(sql.FQ_COMPLETE_BATCH, {
                    "job_ids": [r[0] for r in rows], "owners": [owner] * len(rows),
                    "generations": [r[1] for r in rows], "tokens": [r[2] for r in rows]})
            k = max(1, len(times) // 10)
            diag["ledger_calls"] = len(times) - 1
            diag["ledger_first"] = statistics.mean(times[:k])
            diag["ledger_last"] = statistics.mean(times[-k - 1:-1])
            self.log(f"  claim_batch(10) from an empty ledger: first {k} calls "
                     f"{diag['ledger_first'] * 1e3:.2f} ms, last {k} calls {diag['ledger_last'] * 1e3:.2f} ms "
                     f"({len(times) - 1} calls)")
            try:
                db.fill_fenceq_api(self.conn, queue, 10)
                plans, _ = self._nested_plans(conn, sql.FQ_CLAIM_BATCH, {
                    "queues": [queue], "owner": owner, "tokens": [new_token() for _ in range(10)]})
                plan = next((p for p in plans if "fenceq._claims" in p and "ANY" in p), "")
                diag["ledger_plan"] = _trim_plan(plan)
                match = re.search(r"Seq Scan on _claims.*?actual time=[\d.]+\.\.([\d.]+) .*?"
                                  r"Rows Removed by Filter: (\d+)", plan, re.S)
                if match:
                    diag["ledger_scan_ms"] = float(match.group(1))
                    diag["ledger_scan_rows"] = int(match.group(2))
            except Exception as exc:
                diag["ledger_plan"] = f"(not captured: {type(exc).__name__})"
        db.clear_finished(self.conn)

    def _explain(self, single: list[str], multi: list[str]) -> None:
        """EXPLAIN evidence, from inside fenceq's functions (auto_explain with
        nested statements, reported to this session as NOTICEs)."""
        conn = self.conn
        for name, queues in (("single", single), ("multi", multi)):
            token = new_token()
            try:
                notices, rows = self._nested_plans(conn, sql.FQ_CLAIM_NEXT, {
                    "queues": queues, "owner": "bench-explain", "token": token})
            except Exception as exc:  # auto_explain not installed, or not a superuser
                self.results["explain"]["error"] = f"auto_explain unavailable: {type(exc).__name__}"
                return
            row = rows[0]
            conn.execute(sql.FQ_COMPLETE, {"job_id": row[0], "owner": "bench-explain",
                                           "generation": row[1], "token": token})
            plan = next((n for n in notices if "CROSS JOIN LATERAL" in n), "")
            self.results["explain"][name] = _trim_plan(plan)
        with conn.transaction(force_rollback=True):
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql.BARE_CLAIM_MULTI_NAIVE,
                                {"queues": multi, "owner": "bench-explain"}).fetchall()
        self.results["explain"]["naive"] = "\n".join(r[0] for r in plan)

    # -- diagnostics -----------------------------------------------------------------

    HOT_FUNCTIONS = ["claim_next", "claim_batch", "_claim", "complete", "complete_batch", "submit",
                     "_submit", "_checkpoints_of", "_is_live", "_lock_live", "_fingerprint",
                     "_canonical_json", "_utc_text", "_identity_keys", "_lock_identities"]

    def code_facts(self) -> None:
        """What the installed functions look like (the SQL changes; the
        report's explanations use these facts, not assumptions)."""
        rows = self.conn.execute(
            "SELECT p.proname, l.lanname, p.prosrc, p.proconfig FROM pg_proc AS p "
            "JOIN pg_namespace AS n ON n.oid = p.pronamespace JOIN pg_language AS l ON l.oid = p.prolang "
            "WHERE n.nspname = 'fenceq' AND p.proname = ANY (%s)", (self.HOT_FUNCTIONS,)).fetchall()
        facts: dict[str, Any] = {"language": {}, "perform_helpers": {}}
        for name, language, source, config in rows:
            facts["language"][name] = language
            facts["perform_helpers"][name] = len(re.findall(r"PERFORM\s+fenceq\._check_\w+", source))
            if name == "_claim":
                # A ledger lookup whose cached plan may be a sequential scan
                # (not when the function rules sequential scans out).
                facts["ledger_precheck"] = "enable_seqscan=off" not in (config or []) and bool(re.search(
                    r"FROM\s+fenceq\._claims\s+AS\s+\w+\s+WHERE\s+\w+\.claim_token\s*=", source))
            if name == "complete_batch":
                facts["complete_batch_loops"] = "fenceq.complete(" in source
        self.results["code"] = facts

    def statement_census(self) -> None:
        """How many statements each call runs inside fenceq (auto_explain
        with nested statements reports every one), and how many of them are
        helper calls through PERFORM (reported as `SELECT fenceq._check_...`)."""
        conn = self.conn
        queue = Q["drain"]
        db.fill_fenceq_api(conn, queue, 30)
        census: dict[str, dict[str, int]] = {}

        def count(name: str, statement: str, params: Any) -> Any:
            notices, rows = self._nested_plans(conn, statement, params)
            nested = [n for n in notices if "Query Text:" in n][:-1]  # the last is the call itself
            texts = [n.split("Query Text:", 1)[1].strip() for n in nested]
            census[name] = {"statements": len(texts),
                            "helpers": sum(t.startswith("SELECT fenceq._check_") for t in texts)}
            return rows

        try:
            token = new_token()
            row = count("claim_next", sql.FQ_CLAIM_NEXT,
                        {"queues": [queue], "owner": "bench-census", "token": token})[0]
            count("complete", sql.FQ_COMPLETE, {"job_id": row[0], "owner": "bench-census",
                                                 "generation": row[1], "token": token})
            tokens = [new_token() for _ in range(10)]
            rows = count("claim_batch (10)", sql.FQ_CLAIM_BATCH,
                         {"queues": [queue], "owner": "bench-census", "tokens": tokens})
            count("complete_batch (10)", sql.FQ_COMPLETE_BATCH, {
                "job_ids": [r[0] for r in rows], "owners": ["bench-census"] * len(rows),
                "generations": [r[1] for r in rows], "tokens": [r[2] for r in rows]})
            count("submit", sql.FQ_SUBMIT, ("bench_submit", "bench", '{"n": 1}'))
            count("submit with submission_id", sql.FQ_SUBMIT_OWNED,
                  ("bench_submit", "bench", '{"n": 1}', "bench-census-" + new_token()))
        except Exception as exc:  # auto_explain unavailable: the report says so
            census["error"] = {"statements": -1, "helpers": -1}
            self.log(f"  statement census skipped: {type(exc).__name__}")
        self.results["census"] = census
        if "error" not in census:
            self.log("  statements run inside fenceq per call: " + ", ".join(
                f"{k} {v['statements']} ({v['helpers']} helper calls)" for k, v in census.items()))

    def diagnostics(self) -> None:
        conn = self.conn
        diag = self.results["diag"]
        self.code_facts()
        self.statement_census()
        conn.execute("CREATE TABLE IF NOT EXISTS bench_probe (x integer)")
        samples = []
        for i in range(600):
            start = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            samples.append(time.perf_counter() - start)
        diag["round_trip_p50"] = pct(samples[100:], 50)
        samples = []
        for i in range(400):
            start = time.perf_counter()
            conn.execute("INSERT INTO bench_probe VALUES (%s)", (i,))
            samples.append(time.perf_counter() - start)
        diag["commit_p50"] = pct(samples[50:], 50)
        # Server time per call, no network and no commit: loops in a DO block
        # inside a transaction that is rolled back.
        loops = {
            "submit": ("PERFORM fenceq.submit('bench_submit', 'bench', '{\"n\": 1}'::jsonb)", 3000),
            "bare_insert": ("INSERT INTO bare_jobs (queue, task, payload) "
                            "VALUES ('bench_submit', 'bench', '{\"n\": 1}'::jsonb)", 3000),
            "perform_helper": ("PERFORM fenceq._check_name('bench_submit', 'queue')", 30000),
            "inline_check": ("IF length('bench_submit'::text) NOT BETWEEN 1 AND 255 THEN "
                             "RAISE EXCEPTION 'x'; END IF", 30000),
        }
        for name, (body, n) in loops.items():
            best = float("inf")
            for _ in range(3):
                with conn.transaction(force_rollback=True):
                    start = time.perf_counter()
                    conn.execute(f"DO $$ BEGIN FOR i IN 1..{n} LOOP {body}; END LOOP; END $$")
                    best = min(best, (time.perf_counter() - start) / n)
            diag[f"server_{name}"] = best
        self.log(f"  round trip p50 {diag['round_trip_p50'] * 1e6:.0f} us, one-row commit p50 "
                 f"{diag['commit_p50'] * 1e6:.0f} us; server time per call: submit "
                 f"{diag['server_submit'] * 1e6:.1f} us, bare insert {diag['server_bare_insert'] * 1e6:.1f} us, "
                 f"PERFORM helper {diag['server_perform_helper'] * 1e6:.2f} us, inline check "
                 f"{diag['server_inline_check'] * 1e6:.2f} us")


def _count_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _trim_plan(text: str) -> str:
    """Keep the plan of auto_explain's notice (drop its 'duration' line)."""
    lines = text.splitlines()
    keep = [line for line in lines if not line.startswith("duration:")]
    return "\n".join(keep).strip()


def ordered_scan_ok(plan: str, queues: int) -> bool:
    """The claim plan scans _jobs_claim_idx per queue under a Limit, and
    whatever it sorts is only the per-queue heads (at most one row each
    for claim_next), never the backlog."""
    if "Index Scan using _jobs_claim_idx" not in plan:
        return False
    if "Seq Scan on _jobs" in plan or "Bitmap Heap Scan on _jobs" in plan:
        return False
    for match in re.finditer(r"Sort .*?\(actual time=[\d.]+\.\.[\d.]+ rows=(\d+) loops=(\d+)\)", plan):
        if int(match.group(1)) * int(match.group(2)) > queues:
            return False
    return True
