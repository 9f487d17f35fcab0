"""``python -m bench.plprofile``: where the server time of fenceq's hot calls
goes, line by line of PL/pgSQL, measured by plprofiler (Debian's
``postgresql-15-plprofiler``) on a server that preloads it::

    make profile
    python -m bench.plprofile --url postgresql://postgres@127.0.0.1:54349/postgres [--calls 1000] [--batch 16]

Each workload runs in a database the run creates and drops, called as
another language would (autocommit, a fresh claim token per claim), after a
warm-up: one job at a time (``claim_next`` + ``complete``), a batch
(``claim_batch``, one ``heartbeat_batch``, ``complete_batch``), the same
with ``claim_jobs``' one nonce per call (version 8), ``submit``
and ``submit`` with a submission id. For each it prints every line of
every function that took at least ``--min-us`` microseconds per call of
the workload; line 0 is the function's whole call. Without
pg_stat_statements on the server, no statement pays for being tracked.
A profile is a diagnosis, not a benchmark: the plugin's own bookkeeping
adds a little to each line, and the run has no baseline beside it.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Callable

import psycopg

from fenceq.backends.migrations import migrate

QUEUE = "profile"
LINES = """
SELECT p.proname, l.line_number, l.exec_count, l.total_time,
       pg_catalog.regexp_replace(pg_catalog.split_part(p.prosrc, E'\\n', greatest(l.line_number::integer, 1)),
                                 '\\s+', ' ', 'g') AS source
  FROM public.pl_profiler_linestats_local() AS l JOIN pg_catalog.pg_proc AS p ON p.oid = l.func_oid
 WHERE l.exec_count > 0
 ORDER BY p.proname, l.line_number
"""


def _fill(conn: psycopg.Connection, jobs: int) -> None:
    for start in range(0, jobs, 10_000):  # submit_batch takes at most 10,000 requests
        conn.execute("SELECT fenceq.submit_batch(%s, (SELECT jsonb_agg(jsonb_build_object("
                     "'task', 't', 'payload', jsonb_build_object('i', g)))"
                     " FROM generate_series(%s::integer, %s::integer) AS g))", (QUEUE, start + 1, min(start + 10_000, jobs)))


def one_at_a_time(conn: psycopg.Connection, calls: int) -> None:
    for _ in range(calls):
        job_id, generation, token = conn.execute(
            "SELECT job_id, generation, claim_token FROM fenceq.claim_next("
            "queues => %s, owner_id => 'w', claim_token => %s)", ([QUEUE], uuid.uuid4().hex)).fetchone()
        conn.execute("SELECT fenceq.complete(job_id => %s, owner_id => 'w', generation => %s,"
                     " claim_token => %s, result => '{}'::jsonb)", (job_id, generation, token))


def batches(conn: psycopg.Connection, calls: int, batch: int) -> None:
    for _ in range(calls):
        rows = conn.execute("SELECT job_id, generation, claim_token FROM fenceq.claim_batch(%s, 'w', %s)",
                            ([QUEUE], [uuid.uuid4().hex for _ in range(batch)])).fetchall()
        fences = ([r[0] for r in rows], ["w"] * len(rows), [r[1] for r in rows], [r[2] for r in rows])
        conn.execute("SELECT fenceq.heartbeat_batch(%s::text[], %s::text[], %s::bigint[], %s::text[])", fences)
        conn.execute("SELECT fenceq.complete_batch(%s::text[], %s::text[], %s::bigint[], %s::text[], %s::jsonb[])",
                     (*fences, ["{}"] * len(rows)))


def calls_of(conn: psycopg.Connection, calls: int, batch: int) -> None:
    """``batches``' workload with one ``claim_jobs`` nonce per call (version 8)."""
    for _ in range(calls):
        rows = conn.execute("SELECT job_id, generation, claim_token FROM fenceq.claim_jobs(%s, 'w', %s, %s)",
                            ([QUEUE], uuid.uuid4().hex, batch)).fetchall()
        fences = ([r[0] for r in rows], ["w"] * len(rows), [r[1] for r in rows], [r[2] for r in rows])
        conn.execute("SELECT fenceq.heartbeat_batch(%s::text[], %s::text[], %s::bigint[], %s::text[])", fences)
        conn.execute("SELECT fenceq.complete_batch(%s::text[], %s::text[], %s::bigint[], %s::text[], %s::jsonb[])",
                     (*fences, ["{}"] * len(rows)))


def submits(conn: psycopg.Connection, calls: int) -> None:
    for i in range(calls):
        conn.execute("SELECT fenceq.submit(queue => %s, task => 't', payload => %s::jsonb)",
                     (QUEUE, f'{{"i": {i}}}'))


def owned_submits(conn: psycopg.Connection, calls: int) -> None:
    for i in range(calls):
        conn.execute("SELECT fenceq.submit(queue => %s, task => 't', payload => %s::jsonb, submission_id => %s)",
                     (QUEUE, f'{{"i": {i}}}', uuid.uuid4().hex))


Workload = Callable[[psycopg.Connection, int], None]


def workloads(batch: int) -> dict[str, tuple[int, Workload]]:
    """Each workload's jobs to fill per call (outside the profile), and its calls."""
    return {"one job at a time (claim_next + complete)": (1, one_at_a_time),
            f"batches of {batch} (claim_batch + heartbeat_batch + complete_batch)":
                (batch, lambda conn, calls: batches(conn, calls, batch)),
            f"calls of {batch} (claim_jobs + heartbeat_batch + complete_batch)":
                (batch, lambda conn, calls: calls_of(conn, calls, batch)),
            "submit": (0, submits),
            "submit with a submission id": (0, owned_submits)}


def profile(url: str, jobs_per_call: int, body: Workload, calls: int) -> list:
    """The line statistics of one workload, in a database of its own."""
    name = "fenceq_profile_" + uuid.uuid4().hex[:8]
    server = url.rsplit("/", 1)[0]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        migrate(f"{server}/{name}")
        with psycopg.connect(f"{server}/{name}", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS plprofiler")
            conn.execute("SELECT fenceq.create_queue(%s)", (QUEUE,))
            warm_up = max(calls // 10, 10)  # plans cached, pages read
            if jobs_per_call:
                _fill(conn, (warm_up + calls) * jobs_per_call)
            body(conn, warm_up)
            conn.execute("SELECT public.pl_profiler_reset_local()")
            conn.execute("SELECT public.pl_profiler_set_enabled_local(true)")
            body(conn, calls)
            conn.execute("SELECT public.pl_profiler_set_enabled_local(false)")
            return conn.execute(LINES).fetchall()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def report(title: str, lines: list, calls: int, min_us: float) -> list[str]:
    out = [f"### {title}", "", "| function | line | runs per call | µs per call | source |",
           "|---|---:|---:|---:|---|"]
    for function, line, runs, total_us, source in lines:
        per_call = total_us / calls
        if per_call >= min_us:
            text = "(whole call)" if line == 0 else f"`{source.strip()[:90]}`"
            out.append(f"| {function} | {line} | {runs / calls:g} | {per_call:.1f} | {text} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plprofile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="a server preloading plprofiler (make profile)")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per workload")
    parser.add_argument("--batch", type=int, default=16, help="jobs per claim_batch")
    parser.add_argument("--min-us", type=float, default=1.0, help="leave out lines below this (µs per call)")
    args = parser.parse_args(argv)
    for title, (jobs_per_call, body) in workloads(args.batch).items():
        lines = profile(args.url, jobs_per_call, body, args.calls)
        print("\n".join(report(f"{title}, {args.calls} calls", lines, args.calls, args.min_us)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
