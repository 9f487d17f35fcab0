"""``python -m bench.dashboard_reads``: what each dashboard page costs over a
history of finished jobs (docs/observability.md, "What the dashboard
reads"), on PostgreSQL::

    python -m bench.dashboard_reads --url postgresql://postgres@127.0.0.1:54329/postgres --jobs 1000000

A database of its own (created and dropped by the run) gets ``--jobs``
finished jobs spread over the last week (one claim and one submission id
each; 2% failed, 1% cancelled), written in SQL as the functions would leave
them, then 2,000 pending jobs, 1,000 of them waiting for a retry, 200
claimed, 500 dead letters through the client, and a week of the per-minute
activity series for two queues (tests/activity_rows.py). Each page is
served by the dashboard's WSGI application (Werkzeug's test client, no
network), after one warm-up, and timed ``--rounds`` times: the median and
the slowest. The bulk actions write, so each is timed once. Writes
bench/runs/dashboard-reads.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
from werkzeug.test import Client as WebClient

import fenceq
from fenceq.dashboard import Dashboard
from fenceq.migrate import migrate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from activity_rows import record_activity  # noqa: E402

OUT = Path(__file__).resolve().parent / "runs" / "dashboard-reads.md"
WEEK_SECONDS = 7 * 24 * 3600
ERROR = "SMTPServerDisconnected: Connection unexpectedly closed"

FILL = """
INSERT INTO fenceq._jobs (job_id, queue, task, payload, priority, status, attempts, max_attempts, run_at, owner_id,
                          generation, last_error, submission_id, created_at, finished_at)
SELECT gen_random_uuid()::text, CASE WHEN g %% 4 = 0 THEN 'reports' ELSE 'emails' END, 'send',
       jsonb_build_object('customer', g %% 1000, 'order', g), 0,
       CASE WHEN g %% 50 = 0 THEN 'failed' WHEN g %% 100 = 1 THEN 'cancelled' ELSE 'completed' END,
       1, 3, t - interval '2 seconds', 'w', 1,
       CASE WHEN g %% 50 = 0 THEN %(error)s END, 'order-' || g, t - interval '3 seconds', t
  FROM (SELECT g, now() - interval '1 minute' - g * %(spacing)s::interval AS t
          FROM generate_series(1, %(jobs)s::integer) AS g) AS s
"""
CLAIMS = """
INSERT INTO fenceq._claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT gen_random_uuid()::text, job_id, 1, 'w', finished_at - interval '1 second'
  FROM fenceq._jobs WHERE finished_at IS NOT NULL
"""
SUBMISSIONS = """
INSERT INTO fenceq._submissions (submission_id, fingerprint, job_id, queue, created_at)
SELECT submission_id, md5(submission_id), job_id, queue, created_at FROM fenceq._jobs WHERE submission_id IS NOT NULL
"""

PAGES = {
    "queues": "/queues",
    "activity, all queues, last hour": "/activity?range=1h",
    "activity, one queue, last hour": "/activity?queue=emails&range=1h",
    "activity, one queue, last day": "/activity?queue=emails&range=1d",
    "activity, all queues, last week": "/activity?range=7d",
    "search: submission prefix": "/search?prefix=order-12345",
    "search: pending of a queue, by payload": '/search?queue=emails&status=pending&payload={"customer":7}',
    "search: failed in the last day": "/search?status=failed&window=24h",
    "search: failed in the last week, by payload": '/search?status=failed&window=7d&payload={"customer":50}',
    "search: error text in the last week, 2nd page": "/search?error=smtp&window=7d&before={before}",
    "job page": "/jobs/{job_id}",
    "finished jobs (version 6 listing)": "/jobs?status=failed&window=24h",
}


def fill(url: str, jobs: int) -> tuple[str, int]:
    """The history; a finished job's id and a seq in the middle of the failed ones."""
    with psycopg.connect(url, autocommit=True) as conn:
        spacing = timedelta(seconds=(WEEK_SECONDS - 3600) / jobs)
        conn.execute(FILL, {"jobs": jobs, "spacing": spacing, "error": ERROR})
        conn.execute(CLAIMS)
        conn.execute(SUBMISSIONS)
    with fenceq.connect(url) as client:
        client.create_queue("emails", backoff_base=timedelta(hours=1), backoff_max=timedelta(hours=1))
        client.create_queue("reports")
        client.create_queue("doomed", max_attempts=1)
        client.submit_batch("emails", [{"task": "send", "payload": {"customer": n % 1000}} for n in range(2000)])
        for claim in client.claim_batch(["emails"], "w", [fenceq.new_claim_token() for _ in range(1000)]):
            client.fail(claim.fence, ERROR)  # waits an hour for its retry
        client.submit_batch("emails", [{"task": "send"} for _ in range(200)])
        client.claim_batch(["emails"], "w", [fenceq.new_claim_token() for _ in range(200)])
        client.submit_batch("doomed", [{"task": "send", "payload": {"customer": n % 10}} for n in range(500)])
        for claim in client.claim_batch(["doomed"], "w", [fenceq.new_claim_token() for _ in range(500)]):
            client.fail(claim.fence, ERROR, retry=False)
    for queue in ("emails", "reports"):
        record_activity(url, queue, [dict(submitted=jobs // 20160, completed=jobs // 20160, pending=100, due=10,
                                          running=4, wait={30: 5, 40: 1}, run={36: 6})
                                     for _ in range(7 * 24 * 60)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        job_id, = conn.execute("SELECT job_id FROM fenceq._jobs WHERE status = 'completed' LIMIT 1").fetchone()
        before, = conn.execute("SELECT seq FROM fenceq._jobs WHERE status = 'failed' ORDER BY seq DESC"
                               " OFFSET 50 LIMIT 1").fetchone()
    return job_id, before


def timed(call, rounds: int) -> tuple[float, float]:
    call()  # warm-up: plans, caches, the connection
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), max(times)


def get(web: WebClient, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 200, (path, response.status_code, response.get_data(as_text=True)[-500:])


def measure(server: str, jobs: int, rounds: int) -> list[str]:
    name = "fenceq_dashboard_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = f"{server.rsplit('/', 1)[0]}/{name}"
    try:
        migrate(url)
        started = time.perf_counter()
        job_id, before = fill(url, jobs)
        print(f"filled {jobs:,} jobs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        with psycopg.connect(url) as conn:
            size, = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('fenceq._jobs'))").fetchone()
            server_version, = conn.execute("SHOW server_version").fetchone()
        dashboard = Dashboard(url, allow_actions=True)
        web = WebClient(dashboard)
        lines = [f"| page | median | slowest of {rounds} |", "|---|---|---|"]
        for label, path in PAGES.items():
            median, slowest = timed(lambda: get(web, path.replace("{job_id}", job_id).replace("{before}", str(before))), rounds)
            lines.append(f"| {label} | {median * 1000:.1f} ms | {slowest * 1000:.1f} ms |")
            print(lines[-1], file=sys.stderr)
        with fenceq.connect(url) as client:
            for label, action in (
                    ("retry_jobs, 1,000 waiting, by error text",
                     lambda: client.retry_jobs("emails", error_contains="smtp", max_rows=100_000)),
                    ("cancel_jobs, pending of a queue, by payload",
                     lambda: client.cancel_jobs("emails", payload_contains={"customer": 7}, max_rows=100_000)),
                    ("replay_dead_letters, 500 letters, by task",
                     lambda: client.replay_dead_letters("doomed", task="send", max_rows=100_000))):
                started = time.perf_counter()
                changed = action()
                lines.append(f"| {label}: {changed:,} changed | {(time.perf_counter() - started) * 1000:.1f} ms"
                             " | (once) |")
                print(lines[-1], file=sys.stderr)
        dashboard.close()
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    return [f"{jobs:,} finished jobs over the last week (`_jobs` {size} with its indexes), 2,200 live jobs, "
            "500 dead letters, a week of activity for two queues (20,160 minute rows). PostgreSQL "
            f"{server_version.split()[0]}, {os.cpu_count()} cores shared with other work: times include the "
            "dashboard's rendering.", ""] + lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_reads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="a server's maintenance database")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    lines = measure(args.url, args.jobs, args.rounds)
    OUT.write_text("# What the dashboard's pages cost (bench/dashboard_reads.py)\n\n" + "\n".join(lines) + "\n",
                   encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
