"""``python -m bench.activity_cost``: what version 7's operator's view costs
at a history of ``--history`` jobs (issue 27): ``sample_activity`` in its
steady state (one minute per queue) and catching up (an hour; a whole
week in one call), ``activity()`` over an hour, a day and a week, for one
queue and for all, each range ``search_jobs`` reads, and the three bulk
actions, on one database.

The history is written straight into the tables, spread evenly over the
last 192 hours (the sampler's default retention) across ``--queues``
queues, as fenceq's functions leave it: 90% completed, 5% failed (each with
a dead letter, the newest 1,000 unhandled), 3% cancelled, 2% expired; one
job in ten retried once (two claims in the ledger); half with a submission
id; a payload ``{"customer": n % 1000, "order": n}``; waits up to a minute
and run times up to ten seconds. Beside it, a live backlog: ``--pending``
pending jobs (a tenth of them waiting for a retry) and 100 claimed. A
worker would need hours to leave such a history; these figures are of the
reads and writes of version 7's functions, not of making it. The activity
series is then filled by ``sample_activity`` itself (the week's catch-up,
measured).

Each call is made ``--repeat`` times on one connection, after a warm-up
call, and timed at the client (milliseconds: median, min, max). Before each
sampler call the rows it is to write again are deleted (the last minute of
each queue; the last hour; everything), so every repetition does the same
work. The bulk actions each act on a fresh 1,000 jobs of a queue of their
own, made through the API before the timed call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

import psycopg

from . import db

DB_NAME = "fenceq_activity_cost"
HOURS = 192
BULK = 1000


def build_history(conn: psycopg.Connection, history: int, queues: int, pending: int) -> None:
    """The history, the live backlog and their ledger, submission ids and
    dead letters, in a few set-wise statements."""
    for q in range(queues):
        conn.execute("SELECT fenceq.create_queue(%s)", (f"q{q}",))
    conn.execute("""
        CREATE TEMP TABLE made AS
        SELECT n, 'q' || (n %% %(queues)s) AS queue, gen_random_uuid()::text AS job_id,
               clock_timestamp() - make_interval(hours => %(hours)s) * ((n + 0.5) / %(history)s) AS finished_at,
               CASE WHEN n %% 100 < 90 THEN 'completed' WHEN n %% 100 < 95 THEN 'failed'
                    WHEN n %% 100 < 98 THEN 'cancelled' ELSE 'expired' END AS status,
               (n %% 10 = 0) AS retried, random() * 60 AS wait_s, random() * 10 AS run_s
          FROM generate_series(0, %(history)s - 1) AS n""", {"queues": queues, "hours": HOURS, "history": history})
    conn.execute("""
        INSERT INTO fenceq._jobs (job_id, queue, task, payload, priority, status, attempts, max_attempts, run_at,
                                  owner_id, generation, last_error, submission_id, fingerprint, dlq_id,
                                  created_at, finished_at, scheduled)
        SELECT m.job_id, m.queue, 'task-' || (m.n % 7), jsonb_build_object('customer', m.n % 1000, 'order', m.n),
               0, m.status, CASE WHEN m.status IN ('completed', 'failed') THEN 1 + m.retried::integer ELSE 0 END, 5,
               m.finished_at - make_interval(secs => m.run_s + m.wait_s),
               CASE WHEN m.status IN ('completed', 'failed') THEN 'worker-' || (m.n % 16) END,
               CASE WHEN m.status IN ('completed', 'failed') THEN 1 + m.retried::integer ELSE 0 END,
               CASE WHEN m.status = 'failed' THEN 'Timeout talking to upstream ' || (m.n % 13) END,
               CASE WHEN m.n % 2 = 0 THEN 'order-' || m.n END, CASE WHEN m.n % 2 = 0 THEN 'fq1:' || md5(m.n::text) END,
               CASE WHEN m.status = 'failed' THEN md5(m.job_id) END,
               m.finished_at - make_interval(secs => m.run_s + m.wait_s + 30 * m.retried::integer), m.finished_at,
               false
          FROM made AS m""")
    conn.execute("""
        INSERT INTO fenceq._claims (claim_token, job_id, generation, owner_id, claimed_at)
        SELECT md5(m.job_id || g), m.job_id, g, 'worker-' || (m.n % 16),
               m.finished_at - make_interval(secs => m.run_s + CASE WHEN g = 1 AND m.retried THEN 30 ELSE 0 END)
          FROM made AS m CROSS JOIN LATERAL generate_series(1, 1 + m.retried::integer) AS g
         WHERE m.status IN ('completed', 'failed')""")
    conn.execute("""
        INSERT INTO fenceq._submissions (submission_id, fingerprint, job_id, queue, created_at)
        SELECT 'order-' || m.n, 'fq1:' || md5(m.n::text), m.job_id, m.queue, m.finished_at
          FROM made AS m WHERE m.n % 2 = 0""")
    conn.execute("""
        INSERT INTO fenceq._dead_letters (dlq_id, job_id, queue, task, error, attempts, failed_at, replayed_at)
        SELECT md5(m.job_id), m.job_id, m.queue, 'task-' || (m.n % 7), 'Timeout talking to upstream', 1,
               m.finished_at, CASE WHEN m.n >= 20000 THEN m.finished_at END
          FROM made AS m WHERE m.status = 'failed'""")
    conn.execute("DROP TABLE made")
    conn.execute("""
        INSERT INTO fenceq._jobs (job_id, queue, task, payload, priority, status, attempts, max_attempts, run_at,
                                  last_error, created_at, scheduled)
        SELECT gen_random_uuid()::text, 'q' || (n %% %(queues)s), 'task-' || (n %% 7),
               jsonb_build_object('customer', n %% 1000), 0, 'pending', (n %% 10 = 0)::integer, 5,
               CASE WHEN n %% 10 = 0 THEN clock_timestamp() + interval '1 hour' ELSE clock_timestamp() END,
               CASE WHEN n %% 10 = 0 THEN 'Timeout talking to upstream' END, clock_timestamp(), n %% 10 = 0
          FROM generate_series(1, %(pending)s) AS n""", {"queues": queues, "pending": pending})
    tokens = [f"live-{n}" for n in range(100)]
    conn.execute("SELECT count(*) FROM fenceq.claim_batch(%s, 'live-worker', %s)",
                 ([f"q{q}" for q in range(queues)], tokens))
    conn.execute("VACUUM ANALYZE")


def timed(conn: psycopg.Connection, statement: str, repeat: int, before: Callable[[], None] = lambda: None,
          params: dict | None = None) -> dict:
    """Milliseconds of ``repeat`` calls after a warm-up, ``before`` run ahead of each."""
    before()
    conn.execute(statement, params).fetchall()
    times, answer = [], None
    for _ in range(repeat):
        before()
        started = time.perf_counter()
        rows = conn.execute(statement, params).fetchall()
        times.append((time.perf_counter() - started) * 1000)
        answer = rows[0][0] if len(rows) == 1 and len(rows[0]) == 1 else len(rows)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "answer": answer}


def measure_sampler(conn: psycopg.Connection, queues: int, repeat: int, log) -> dict:
    end = conn.execute("SELECT fenceq._activity_end(clock_timestamp())").fetchone()[0]
    seed = ", ".join(f"('q{q}', %(start)s::timestamptz, 0, 0, 0, 0, 0, 0, 0, NULL::integer, NULL::integer,"
                     f" NULL::integer, '{{}}'::integer[], '{{}}'::integer[])" for q in range(queues))

    def from_scratch() -> None:
        conn.execute("DELETE FROM fenceq._activity")
        conn.execute(f"INSERT INTO fenceq._activity VALUES {seed}",
                     {"start": end - timedelta(hours=HOURS) + timedelta(minutes=1)})

    def forget(minutes: int) -> Callable[[], None]:
        return lambda: conn.execute("DELETE FROM fenceq._activity AS a WHERE a.minute > "
                                    "(SELECT max(b.minute) FROM fenceq._activity AS b) - %s * interval '1 minute'",
                                    (minutes,))

    results = {}
    log("sample_activity: the week in one call")
    results["catch up a week in one call (max_minutes 11520)"] = timed(
        conn, "SELECT fenceq.sample_activity(max_minutes => 11520)", max(1, repeat // 2), from_scratch)
    log("sample_activity: an hour, then a minute")
    results["catch up an hour (max_minutes 60, the default)"] = timed(
        conn, "SELECT fenceq.sample_activity()", repeat, forget(60))
    results["steady state: one minute per queue"] = timed(conn, "SELECT fenceq.sample_activity()", repeat, forget(1))
    results["nothing to write (a second call in the minute)"] = timed(
        conn, "SELECT fenceq.sample_activity()", repeat)
    return results


def measure_reads(conn: psycopg.Connection, history: int, repeat: int, log) -> tuple[dict, dict]:
    log("activity()")
    activity = {}
    for since in ("1 hour", "24 hours", "192 hours"):
        for queue in ("q0", None):
            label = f"{'one queue' if queue else 'all queues'}, since {since}"
            activity[label] = timed(conn, "SELECT * FROM fenceq.activity(queue => %(queue)s, since => %(since)s)",
                                    repeat, params={"queue": queue, "since": since})
    log("search_jobs")
    middle = conn.execute("SELECT seq FROM fenceq._jobs WHERE job_id = (SELECT job_id FROM fenceq._submissions"
                          " WHERE submission_id = %s)", (f"order-{history // 4 * 2}",)).fetchone()
    searches = {
        "submission prefix 'order-12'": "submission_prefix => 'order-12'",
        "prefix 'order-' with payload customer 42 (max_scan 10,000)":
            "submission_prefix => 'order-', payload_contains => '{\"customer\": 42}'",
        "pending of one queue, task filter": "queue => 'q0', status => 'pending', task => 'task-3'",
        "pending of all queues, payload customer 42": "status => 'pending', payload_contains => '{\"customer\": 42}'",
        "claimed, all queues": "status => 'claimed'",
        "failed in the last hour, one queue":
            "queue => 'q0', status => 'failed', since => clock_timestamp() - interval '1 hour'",
        "error text 'UPSTREAM 7' (max_scan 10,000)": "error_contains => 'UPSTREAM 7'",
        "completed, a page below a seq in the middle": f"status => 'completed', before_seq => {middle[0]}",
        "a day's window, max_scan 1,000,000, customer 42":
            "since => clock_timestamp() - interval '24 hours', payload_contains => '{\"customer\": 42}', "
            "max_scan => 1000000",
        "the whole week, max_scan 1,000,000, customer 42":
            "since => clock_timestamp() - interval '192 hours', payload_contains => '{\"customer\": 42}', "
            "max_scan => 1000000",
    }
    search = {label: timed(conn, f"SELECT * FROM fenceq.search_jobs({args})", repeat)
              for label, args in searches.items()}
    return activity, search


def measure_bulk(url: str, conn: psycopg.Connection, repeat: int, log) -> dict:
    import fenceq

    log("bulk actions")
    conn.execute("SELECT fenceq.create_queue('bulk', max_attempts => 2, backoff_base => '1 hour')")
    client = fenceq.connect(url)

    def pending() -> None:
        client.submit_batch("bulk", [{"task": "cancel-me", "payload": {"customer": n}} for n in range(BULK)])

    def retrying() -> None:
        client.submit_batch("bulk", [{"task": "retry-me"} for _ in range(BULK)])
        for c in client.claim_batch(["bulk"], "w", [fenceq.new_claim_token() for _ in range(BULK)]):
            client.fail(c.fence, "upstream timeout")

    def failed() -> None:
        client.submit_batch("bulk", [{"task": "replay-me", "max_attempts": 1} for _ in range(BULK)])
        for c in client.claim_batch(["bulk"], "w", [fenceq.new_claim_token() for _ in range(BULK)]):
            client.fail(c.fence, "upstream timeout", retry=False)

    def clear() -> None:  # nothing of an earlier repetition left to match
        conn.execute("SELECT fenceq.cancel_matching('bulk', include_claimed => true, force => true,"
                     " max_rows => 100000)")

    try:
        results = {
            "retry_jobs, 1,000 waiting for a retry": timed(
                conn, "SELECT fenceq.retry_jobs('bulk', task => 'retry-me')", repeat, lambda: (clear(), retrying())),
            "cancel_jobs, 1,000 pending": timed(
                conn, "SELECT fenceq.cancel_jobs('bulk', task => 'cancel-me')", repeat, lambda: (clear(), pending())),
            "replay_dead_letters, 1,000 failed": timed(
                conn, "SELECT fenceq.replay_dead_letters('bulk', task => 'replay-me')", repeat,
                lambda: (clear(), failed())),
        }
    finally:
        client.close()
    return results


def run(args: argparse.Namespace, log=lambda message: print(message, flush=True)) -> dict:
    url = db.recreate_database(args.url, args.db_name)
    started_at = time.perf_counter()
    try:
        from fenceq.migrate import migrate

        migrate(url)
        with db.connect(url) as conn:
            log(f"building a history of {args.history:,} jobs")
            build_at = time.perf_counter()
            build_history(conn, args.history, args.queues, args.pending)
            record = {"server": db.server_facts(conn), "machine": db.machine_facts(),
                      "measured_code": db.git_commit(Path(__file__).resolve().parents[1]),
                      "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "load_average": list(os.getloadavg()), "version": db.fenceq_version(conn),
                      "args": {k: str(v) for k, v in vars(args).items()},
                      "build_seconds": time.perf_counter() - build_at,
                      "sizes": dict(conn.execute(  # the history's tables as built
                          "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class AS c"
                          " WHERE c.relnamespace = 'fenceq'::regnamespace AND c.relkind = 'r'").fetchall())}
            record["sample_activity"] = measure_sampler(conn, args.queues, args.repeat, log)
            record["activity_rows"] = conn.execute("SELECT count(*) FROM fenceq._activity").fetchone()[0]
            record["activity"], record["search_jobs"] = measure_reads(conn, args.history, args.repeat, log)
            record["bulk"] = measure_bulk(url, conn, args.repeat, log)
    finally:
        if not args.keep:
            db.drop_database(args.url, args.db_name)
    record["load_average_end"] = list(os.getloadavg())
    record["seconds"] = time.perf_counter() - started_at
    return record


def _row(label: str, figures: dict) -> str:
    return (f"| {label} | {figures['median_ms']:,.1f} | {figures['min_ms']:,.1f}–{figures['max_ms']:,.1f} "
            f"| {figures['answer']:,} |")


def markdown(record: dict) -> str:
    s, a = record["server"], record["args"]
    lines = [f"{record['started']}, {s['version']} (fsync {s.get('fsync', '?')}, shared_buffers "
             f"{s.get('shared_buffers', '?')}, jit {s.get('jit', '?')}), {record['machine']['nproc']} cores, "
             f"load average {record['load_average'][0]:.1f} at the start, {record['load_average_end'][0]:.1f} at "
             f"the end; schema version {record['version']}, measured code {record['measured_code']}; "
             f"--history {a['history']} --queues {a['queues']} --pending {a['pending']} --repeat {a['repeat']} "
             f"({record['seconds']:.0f} s; the history built in {record['build_seconds']:.0f} s).",
             "",
             f"Milliseconds per call at the client, median (min–max) of {a['repeat']} after a warm-up. "
             f"_jobs {record['sizes'].get('_jobs', 0) / 2**20:,.0f} MiB with its indexes; "
             f"_activity {record['activity_rows']:,} rows.", ""]
    for title, key, answer in (("sample_activity", "sample_activity", "rows written"),
                               ("activity()", "activity", "buckets"),
                               ("search_jobs (max_rows 50)", "search_jobs", "rows"),
                               ("bulk actions", "bulk", "jobs changed")):
        lines += [f"| {title} | median ms | min–max | {answer} |", "|---|---:|---:|---:|"]
        lines += [_row(label, figures) for label, figures in record[key].items()]
        lines.append("")
    return "\n".join(lines).rstrip()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.activity_cost", description=__doc__)
    parser.add_argument("--url", required=True, help="a server; the database --db-name is made on it and dropped")
    parser.add_argument("--history", type=int, default=1_000_000, help="finished jobs of history")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--pending", type=int, default=10_000, help="the live backlog")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db-name", default=DB_NAME)
    parser.add_argument("--keep", action="store_true", help="leave the database for a look afterwards")
    parser.add_argument("--out", type=Path, default=Path("bench/runs/activity-cost.json"),
                        help="the JSON record; its tables are written beside it (.md)")
    parser.add_argument("--markdown", action="store_true", help="print the tables of --out and stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return db.record_main(parse_args(argv), run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
