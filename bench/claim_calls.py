"""``python -m bench.claim_calls``: what one nonce per claim call (version 8's
``claim_jobs``) saves against a nonce per job (``claim_batch``), in one
database on one server, the calls alternating::

    .venv/bin/python -m bench.claim_calls --url postgresql://postgres@127.0.0.1:54339/postgres
        [--jobs 10000] [--rounds 6] [--size 100]

It creates a database (dropped at the end), migrates it, and installs
version 7's ``claim_batch`` beside version 8's under the name
``claim_batch_v7``, from the frozen text of the step that last defined it
(0006): both write the same tables. Each round fills ``--jobs`` no-op jobs
and drains them once per call (version 7's ``claim_batch``, version 8's
``claim_batch``, ``claim_jobs``), each claim of ``--size`` followed by one
``complete_batch`` of what it claimed; the order of the three alternates
between rounds, and a ``VACUUM`` and a ``CHECKPOINT`` come before each
drain (production claims pages written before the last checkpoint).
Per job, each call's time from the client (one round trip per call) and
the WAL it wrote (``pg_current_wal_insert_lsn`` before and after), for the
claim and the completion apart; the medians of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path
from typing import Callable

import psycopg

from fenceq.backends.migrations import migrate

QUEUE = "claim_calls"
FROZEN = Path(__file__).resolve().parents[1] / "migrations" / "postgres" / "sql" / "0006_fenceq_v6.sql"
CALLS = ("v7 claim_batch", "v8 claim_batch", "v8 claim_jobs")


def v7_claim_batch() -> str:
    """Version 7's claim_batch, as step 0006 froze it, named claim_batch_v7."""
    text = FROZEN.read_text(encoding="utf-8")
    start = text.rindex("CREATE OR REPLACE FUNCTION fenceq.claim_batch(")
    end = text.index("$$;", text.index("AS $$", start)) + len("$$;")
    return text[start:end].replace("fenceq.claim_batch(", "fenceq.claim_batch_v7(") \
                          .replace("claim_batch.", "claim_batch_v7.")


def claimers(conn: psycopg.Connection, size: int) -> dict[str, Callable[[], list]]:
    def by_token(function: str) -> Callable[[], list]:
        return lambda: conn.execute(
            f"SELECT job_id, generation, claim_token FROM fenceq.{function}(ARRAY[%s], 'w', %s)",
            (QUEUE, [uuid.uuid4().hex for _ in range(size)])).fetchall()

    def by_call() -> list:
        return conn.execute("SELECT job_id, generation, claim_token FROM fenceq.claim_jobs(ARRAY[%s], 'w', %s, %s)",
                            (QUEUE, uuid.uuid4().hex, size)).fetchall()

    return {"v7 claim_batch": by_token("claim_batch_v7"), "v8 claim_batch": by_token("claim_batch"),
            "v8 claim_jobs": by_call}


def timed(conn: psycopg.Connection, call: Callable[[], list]) -> tuple[list, float, int]:
    """A call's answer, seconds and WAL bytes."""
    before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    started = time.perf_counter()
    answer = call()
    seconds = time.perf_counter() - started
    wal = conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (before,)).fetchone()[0]
    return answer, seconds, int(wal)


def drain(conn: psycopg.Connection, claim: Callable[[], list]) -> dict[str, float]:
    """Per job: claim µs and WAL bytes, completion µs and WAL bytes."""
    jobs, totals = 0, [0.0, 0, 0.0, 0]
    while True:
        rows, seconds, wal = timed(conn, claim)
        totals[0] += seconds
        totals[1] += wal
        if not rows:
            break
        fences = ([r[0] for r in rows], ["w"] * len(rows), [r[1] for r in rows], [r[2] for r in rows])
        answers, seconds, wal = timed(conn, lambda: conn.execute(
            "SELECT fenceq.complete_batch(%s, %s, %s, %s)", fences).fetchone()[0])
        if not all(answers):
            raise RuntimeError("complete_batch refused a live claim")
        totals[2] += seconds
        totals[3] += wal
        jobs += len(rows)
    return {"claim_us": totals[0] / jobs * 1e6, "claim_wal": totals[1] / jobs,
            "complete_us": totals[2] / jobs * 1e6, "complete_wal": totals[3] / jobs}


def fill(conn: psycopg.Connection, jobs: int) -> None:
    for start in range(0, jobs, 1000):
        conn.execute("SELECT fenceq.submit_batch(%s, (SELECT jsonb_agg(jsonb_build_object('task', 't'))"
                     " FROM generate_series(1, %s)))", (QUEUE, min(1000, jobs - start)))


def run(url: str, jobs: int, rounds: int, size: int, log: Callable[[str], None] = print) -> dict[str, list]:
    name = "fenceq_claim_calls_" + uuid.uuid4().hex[:8]
    server = url.rsplit("/", 1)[0]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        migrate(f"{server}/{name}")
        results: dict[str, list] = {call: [] for call in CALLS}
        with psycopg.connect(f"{server}/{name}", autocommit=True) as conn:
            conn.execute("SET search_path = pg_catalog, fenceq")
            conn.execute(v7_claim_batch())
            conn.execute("RESET search_path")
            conn.execute("SELECT fenceq.create_queue(%s)", (QUEUE,))
            calls = claimers(conn, size)
            for round_ in range(rounds):
                for call in (CALLS if round_ % 2 == 0 else tuple(reversed(CALLS))):
                    fill(conn, jobs)
                    conn.execute("VACUUM ANALYZE fenceq._jobs")
                    conn.execute("VACUUM fenceq._claims")
                    conn.execute("CHECKPOINT")
                    results[call].append(drain(conn, calls[call]))
                    conn.execute("SELECT fenceq.purge(interval '0', 1000000)")
                log(f"round {round_ + 1} of {rounds} done")
        return results
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def markdown(results: dict[str, list]) -> str:
    lines = ["| call | claim µs/job | claim WAL bytes/job | complete_batch µs/job | complete_batch WAL bytes/job"
             " | both µs/job |", "|---|---:|---:|---:|---:|---:|"]
    for call, runs in results.items():
        def median(key: str) -> float:
            return statistics.median(r[key] for r in runs)
        both = statistics.median(r["claim_us"] + r["complete_us"] for r in runs)
        lines.append(f"| {call} | {median('claim_us'):.1f} | {median('claim_wal'):,.0f} | "
                     f"{median('complete_us'):.1f} | {median('complete_wal'):,.0f} | {both:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server (fsync on, for WAL figures that mean something)")
    parser.add_argument("--jobs", type=int, default=10000, help="no-op jobs per drain")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, the calls' order alternating")
    parser.add_argument("--size", type=int, default=100, help="jobs per claim call")
    args = parser.parse_args(argv)
    print(markdown(run(args.url, args.jobs, args.rounds, args.size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
