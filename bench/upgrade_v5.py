"""``python -m bench.upgrade_v5``: how long step 0005 stops the queue, and
how long `fenceq migrate`'s marking of the jobs version 4 left waiting takes
after it (docs/dba.md §7), on version 4 databases of the given sizes (half
the jobs pending due later, a quarter pending due now, a quarter
completed; a CHECKPOINT before the step)::

    python -m bench.upgrade_v5 --url postgresql://postgres@127.0.0.1:54339/postgres --sizes 100000,1000000

Prints one line per size. Each database is created and dropped by the run.
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg

from fenceq.backends.migrations import apply_postgres_steps_through as apply_through
from fenceq.backends.migrations import mark_waiting_jobs

FILL = """
INSERT INTO fenceq._jobs (job_id, queue, task, priority, max_attempts, run_at, created_at, status, finished_at)
SELECT gen_random_uuid()::text, 'q', 't', g %% 5, 3,
       CASE WHEN g %% 4 < 2 THEN now() + interval '1 hour' ELSE now() END, now(),
       CASE WHEN g %% 4 = 3 THEN 'completed' ELSE 'pending' END,
       CASE WHEN g %% 4 = 3 THEN now() END
  FROM generate_series(1, %(size)s::integer) AS g
"""


def measure(server: str, size: int) -> str:
    name = "fenceq_upgrade_" + uuid.uuid4().hex[:8]
    admin_url = server.rsplit("/", 1)[0]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = f"{admin_url}/{name}"
    try:
        apply_through(url, "0004_fenceq_v4")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT fenceq.create_queue('q')")
            conn.execute(FILL, {"size": size})
            conn.execute("VACUUM ANALYZE fenceq._jobs")
            conn.execute("CHECKPOINT")
            table = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('fenceq._jobs'))").fetchone()[0]
        started = time.perf_counter()
        apply_through(url, "0005_fenceq_v5")
        step = time.perf_counter() - started
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            marked = mark_waiting_jobs(conn)
            marking = time.perf_counter() - started
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    return f"{size} jobs, _jobs {table}: step {step:.2f} s, then marking {marking:.2f} s ({marked} jobs)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upgrade_v5", description=__doc__)
    parser.add_argument("--url", required=True, help="a server's maintenance database")
    parser.add_argument("--sizes", default="100000")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.sizes.split(",")):
        print(measure(args.url, size), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
