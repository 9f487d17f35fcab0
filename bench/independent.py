"""An independent check of the PostgreSQL ratios of ``make bench``: plain
psycopg in threads (one connection per worker), fenceq's SQL functions
called exactly as any other language would, nothing from the fenceq client
or the bench package but the SQL text of ``bench/statements.py``.

    python bench/independent.py --url postgresql://postgres@127.0.0.1:54339/postgres

It recreates the database ``fenceq_independent`` on that server, applies
the install script (``fenceq sql --backend postgres``, or ``--install FILE``)
and the bare table, and prints bare and fenceq jobs/s and their ratio for
each workload: the median of ``--rounds`` rounds, a CHECKPOINT before every
timed run, the first system alternating between rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

_spec = importlib.util.spec_from_file_location("statements", Path(__file__).with_name("statements.py"))
sql = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sql)

DATABASE = "fenceq_independent"
QUEUE = "independent"
SUBMIT_QUEUE = "independent_submit"  # submitted jobs stay pending: keep them out of the drains


def claim_and_complete(cur, system: str, owner: str) -> bool:
    """One job: claim, then complete in a second transaction; False when empty."""
    if system == "bare":
        row = cur.execute(sql.BARE_CLAIM, {"queue": QUEUE, "owner": owner}).fetchone()
        if row:
            cur.execute(sql.BARE_COMPLETE, {"id": row[0], "owner": owner})
        return row is not None
    token = secrets.token_hex(16)
    row = cur.execute(sql.FQ_CLAIM_NEXT, {"queues": [QUEUE], "owner": owner, "token": token}).fetchone()
    if row:
        assert cur.execute(sql.FQ_COMPLETE, {"job_id": row[0], "owner": owner, "generation": row[8],
                                             "token": token}).fetchone()[0]
    return row is not None


def claim_and_complete_ten(cur, system: str, owner: str) -> int:
    if system == "bare":
        ids = [r[0] for r in cur.execute(sql.BARE_CLAIM_BATCH,
                                         {"queue": QUEUE, "owner": owner, "n": 10}).fetchall()]
        if ids:
            cur.execute(sql.BARE_COMPLETE_BATCH, {"ids": ids, "owner": owner})
        return len(ids)
    rows = cur.execute(sql.FQ_CLAIM_BATCH, {"queues": [QUEUE], "owner": owner,
                                            "tokens": [secrets.token_hex(16) for _ in range(10)]}).fetchall()
    if rows:
        assert all(cur.execute(sql.FQ_COMPLETE_BATCH, {
            "job_ids": [r[0] for r in rows], "owners": [owner] * len(rows),
            "generations": [r[8] for r in rows], "tokens": [r[9] for r in rows]}).fetchone()[0])
    return len(rows)


def threaded(url: str, workers: int, work) -> float:
    """Run work(cursor, index) -> jobs in `workers` threads; jobs/s over the span."""
    # Statement tracking off where pg_stat_statements is loaded, as in make bench's timed runs.
    conns = [psycopg.connect(url, autocommit=True, options="-c pg_stat_statements.track=none")
             for _ in range(workers)]
    start = threading.Barrier(workers + 1)
    done = [0] * workers

    def body(i: int) -> None:
        cur = conns[i].cursor()
        start.wait()
        done[i] = work(cur, i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    for conn in conns:
        conn.close()
    return sum(done) / elapsed


def drain(step, system: str):
    def work(cur, i: int) -> int:
        jobs = 0
        while got := step(cur, system, f"w{i}"):
            jobs += int(got)
        return jobs
    return work


def submits(statement: str, count: int, tag: str | None = None):
    def work(cur, i: int) -> int:
        for n in range(count):
            params = {"queue": SUBMIT_QUEUE, "task": "t", "payload": json.dumps({"n": n})}
            if tag:
                params["submission_id"] = f"{tag}-{n}"
            cur.execute(statement, params).fetchone()
        return count
    return work


def batches(statement: str, arrays: list[str]):
    def work(cur, i: int) -> int:
        return sum(cur.execute(statement, {"queue": SUBMIT_QUEUE, "requests": a}).fetchone()[0]
                   for a in arrays)
    return work


def requests(n: int, tag: str | None = None) -> str:
    return json.dumps([{"task": "t", "payload": {"n": i}} | ({"submission_id": f"{tag}-{i}"} if tag else {})
                       for i in range(n)])


def fill(admin, jobs: int) -> None:
    for statement in (sql.FQ_SUBMIT_BATCH, sql.BARE_INSERT_BATCH):
        for start in range(0, jobs, 1000):
            admin.execute(statement, {"queue": QUEUE, "requests": requests(min(1000, jobs - start))})
    admin.execute("VACUUM (ANALYZE)")


def install(server_url: str, script: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    parts = urlsplit(server_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/" + DATABASE, parts.query, parts.fragment))
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(script)
        admin.execute(sql.BARE_SCHEMA)
        for queue in (QUEUE, SUBMIT_QUEUE):
            admin.execute(sql.FQ_CREATE_QUEUE, {"queue": queue})
    return url


def install_script(path: str | None) -> str:
    if path:
        return Path(path).read_text()
    cli = shutil.which("fenceq") or str(Path(sys.executable).with_name("fenceq"))
    return subprocess.run([cli, "sql", "--backend", "postgres"], check=True, capture_output=True,
                          text=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="server URL")
    parser.add_argument("--install", help="fenceq install script (default: `fenceq sql` output)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per drain run")
    parser.add_argument("--json", help="also write the figures to this file (make bench's report "
                        "shows bench/runs/independent-*.json)")
    args = parser.parse_args()
    url = install(args.url, install_script(args.install))
    admin = psycopg.connect(url, autocommit=True)
    n = args.jobs
    plain = [requests(1000)] * 20
    drains = [(f"per-job drain, {w} worker{'s' * (w > 1)}", w, claim_and_complete, n) for w in (1, 4, 16)]
    drains.append(("claim_batch 10 + complete_batch, 4 workers", 4, claim_and_complete_ten, 2 * n))
    ratios: dict[str, list[tuple[float, float]]] = {}

    def paired(r: int, label: str, workers: int, baseline, fenceq) -> None:
        """Both sides back to back, a CHECKPOINT before each, order alternating."""
        sides = [baseline, fenceq] if r % 2 == 0 else [fenceq, baseline]
        rates = {}
        for work in sides:
            admin.execute("CHECKPOINT")
            rates[id(work)] = threaded(url, workers, work)
        ratios.setdefault(label, []).append((rates[id(baseline)], rates[id(fenceq)]))

    for r in range(args.rounds):
        for label, workers, step, jobs in drains:
            fill(admin, jobs)
            paired(r, label, workers, drain(step, "bare"), drain(step, "fenceq"))
            admin.execute(sql.FQ_PURGE)
            admin.execute(sql.BARE_CLEAR_FINISHED)
        paired(r, "submit (vs bare insert)", 1, submits(sql.BARE_INSERT, 2000), submits(sql.FQ_SUBMIT, 2000))
        paired(r, "owned submit (vs bare insert)", 1, submits(sql.BARE_INSERT, 2000),
               submits(sql.FQ_SUBMIT_OWNED, 2000, tag=f"r{r}"))
        paired(r, "submit_batch of 1,000 (vs bare batch insert)", 1, batches(sql.BARE_INSERT_BATCH, plain),
               batches(sql.FQ_SUBMIT_BATCH, plain))
        paired(r, "owned submit_batch of 1,000 (vs plain submit_batch)", 1, batches(sql.FQ_SUBMIT_BATCH, plain),
               batches(sql.FQ_SUBMIT_BATCH, [requests(1000, f"r{r}-{k}") for k in range(3)]))
    rows = [[label, statistics.median(b for b, _ in pairs), statistics.median(f for _, f in pairs),
             statistics.median(f / b for b, f in pairs)] for label, pairs in ratios.items()]
    print(f"{'workload':52} {'baseline/s':>11} {'fenceq/s':>10} {'ratio':>7}")
    for label, baseline, fenceq, ratio in rows:
        print(f"{label:52} {baseline:11,.0f} {fenceq:10,.0f} {ratio:6.2f}x")
    if args.json:
        version = admin.execute("SELECT fenceq.version()").fetchone()[0]
        Path(args.json).write_text(json.dumps({
            "version": version, "rounds": args.rounds, "jobs": n, "rows": rows,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1) + "\n")
    admin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
