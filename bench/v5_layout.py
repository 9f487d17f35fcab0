"""``python -m bench.v5_layout``: what the storage layout proposed for
version 5 (bench/v5_layout.sql, docs/design-v5.md) writes and costs per job,
beside version 4 and the bare loop, in one run on one server; and its token
scheme raced with real sessions.

Per system, one connection with statement tracking on drains a fill of
``--diag-jobs`` jobs (claim then complete, each call its own transaction,
a CHECKPOINT before the window): server time per job (top-level
statements), statements per job, WAL bytes, index entries, heap writes by
kind and full-page images per job. Then per-job drains at 1 and 4 workers,
systems alternating, a CHECKPOINT before each, as ratios to the bare loop
of the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
from pathlib import Path

import psycopg

from . import db, drivers
from . import statements as sql
from .serverstats import ServerStats

LAB_SQL = Path(__file__).with_name("v5_layout.sql")
QUEUE = "v5lab"
SYSTEMS = ("bare", "fenceq", "v5lab")

LAB_SUBMIT_BATCH = """
SELECT count(v5lab.submit(queue => %(queue)s::text, task => 'bench', payload => r.value -> 'payload'))
  FROM jsonb_array_elements(%(requests)s::jsonb) AS r
"""
LAB_CLAIM = ("SELECT * FROM v5lab.claim_next(queue => %(queue)s::text, owner_id => %(owner)s::text, "
             "claim_token => %(token)s::text)")
LAB_COMPLETE = ("SELECT v5lab.complete(job_id => %(job_id)s::text, owner_id => %(owner)s::text, "
                "generation => %(generation)s::bigint, claim_token => %(token)s::text)")


async def lab_claim(conn, queue: str, owner: str):
    token = drivers.new_token()
    cur = await conn.execute(LAB_CLAIM, {"queue": queue, "owner": owner, "token": token})
    row = await cur.fetchone()
    return None if row is None else (row[0], row[4], token)


async def lab_complete(conn, claim, owner: str) -> None:
    job_id, generation, token = claim
    cur = await conn.execute(LAB_COMPLETE, {"job_id": job_id, "owner": owner,
                                            "generation": generation, "token": token})
    if not (await cur.fetchone())[0]:
        raise RuntimeError("v5lab.complete returned false for a live claim")


LAB_CLAIM_BATCH = ("SELECT * FROM v5lab.claim_batch(queue => %(queue)s::text, owner_id => %(owner)s::text, "
                   "claim_tokens => %(tokens)s::text[])")
LAB_COMPLETE_BATCH = ("SELECT v5lab.complete_batch(job_ids => %(job_ids)s::text[], owner_ids => %(owners)s::text[], "
                      "generations => %(generations)s::bigint[], claim_tokens => %(tokens)s::text[])")


async def lab_claim_batch(conn, queue: str, owner: str, size: int) -> list:
    tokens = [drivers.new_token() for _ in range(size)]
    cur = await conn.execute(LAB_CLAIM_BATCH, {"queue": queue, "owner": owner, "tokens": tokens})
    return [(row[0], row[4], row[5]) for row in await cur.fetchall()]


async def lab_complete_batch(conn, rows: list, owner: str) -> None:
    cur = await conn.execute(LAB_COMPLETE_BATCH, {
        "job_ids": [r[0] for r in rows], "owners": [owner] * len(rows),
        "generations": [r[1] for r in rows], "tokens": [r[2] for r in rows]})
    if not all((await cur.fetchone())[0]):
        raise RuntimeError("v5lab.complete_batch returned false for a live claim")


drivers.PER_JOB["v5lab"] = (lab_claim, lab_complete)
drivers.BATCHED["v5lab"] = (lab_claim_batch, lab_complete_batch)


def fill(conn, system: str, count: int) -> None:
    if system != "v5lab":
        db.fill(conn, system, QUEUE, count)
        return
    done = 0
    while done < count:
        size = min(db.FILL_CHUNK, count - done)
        conn.execute(LAB_SUBMIT_BATCH, {"queue": QUEUE, "requests": db.plain_requests(size, done)})
        done += size


def clear(conn) -> None:
    db.clear_finished(conn)
    conn.execute("TRUNCATE v5lab._jobs, v5lab._ready, v5lab._scheduled, v5lab._claimed, v5lab._spent")


def vacuum(conn) -> None:
    db.vacuum(conn)
    conn.execute("VACUUM (ANALYZE) v5lab._jobs, v5lab._ready, v5lab._scheduled, v5lab._claimed, v5lab._spent")


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


async def diagnostics(url: str, admin, stats: ServerStats, jobs: int, size: int | None = None) -> dict:
    """Per job, claimed and completed one by one, or ``size`` at a time."""
    conn = (await drivers.open_connections(url, 1, track="all"))[0]
    out = {}
    try:
        for system in SYSTEMS:
            claim, complete = drivers.PER_JOB[system] if size is None else drivers.BATCHED[system]
            fill(admin, system, jobs)
            vacuum(admin)
            db.checkpoint(admin)
            stats.begin()
            for _ in range(jobs // (size or 1)):
                row = await claim(conn, QUEUE, "diag", *((size,) if size else ()))
                await complete(conn, row, "diag")
            window = stats.end(jobs * 2 // (size or 1), jobs)
            out[system] = {**per_job(window, jobs), "by_relation": window["relations"],
                           "statements_us": {s["query"][:90]: round(s["total_ms"] * 1000 / s["calls"], 1)
                                             for s in window["statements"]}}
            clear(admin)
    finally:
        await conn.close()
    return out


LATER_FILL = {
    "bare": ("INSERT INTO bare_jobs (queue, task, payload, run_at) "
             "SELECT %(queue)s, 'bench', '{}', now() + interval '1 day' + n * interval '1 second' "
             "FROM generate_series(1, %(n)s) AS n"),
    "fenceq": ("SELECT count(*) FROM fenceq.submit_batch(queue => %(queue)s::text, requests => "
               "(SELECT jsonb_agg(jsonb_build_object('task', 'bench', 'priority', n, 'run_at', "
               "now() + interval '1 day' + n * interval '1 second')) "
               "FROM generate_series(1, %(n)s) AS n))"),
    "v5lab": ("SELECT count(v5lab.submit(queue => %(queue)s::text, task => 'bench', priority => n, "
              "run_at => now() + interval '1 day' + n * interval '1 second')) "
              "FROM generate_series(1, %(n)s) AS n"),
}
NEXT_DUE = {"fenceq": "SELECT fenceq.next_due(queues => ARRAY[%(queue)s]::text[])",
            "v5lab": "SELECT v5lab.next_due(queue => %(queue)s::text)"}


async def later_probes(url: str, admin, stats: ServerStats, later: int, calls: int = 200) -> dict:
    """With ``later`` jobs due later (every priority distinct) and none due:
    server µs of an empty claim and of next_due."""
    conn = (await drivers.open_connections(url, 1, track="all"))[0]
    out = {}
    try:
        for system in SYSTEMS:
            for chunk in range(0, later, 10_000):
                admin.execute(LATER_FILL[system], {"queue": QUEUE, "n": min(10_000, later - chunk)})
            vacuum(admin)
            claim, _ = drivers.PER_JOB[system]
            probes = {"empty claim": lambda: claim(conn, QUEUE, "probe")}
            if system in NEXT_DUE:
                probes["next_due"] = lambda: conn.execute(NEXT_DUE[system], {"queue": QUEUE})
            for name, probe in probes.items():
                for _ in range(20):  # plans cached before the window
                    await probe()
                stats.begin()
                for _ in range(calls):
                    if name == "empty claim" and await probe() is not None:
                        raise RuntimeError(f"{system}: a job due later was claimed")
                    elif name != "empty claim":
                        await probe()
                window = stats.end(calls, calls)
                top = [s for s in window["statements"] if s["toplevel"]]
                out.setdefault(system, {})[name] = sum(s["total_ms"] for s in top) * 1000 / calls
            clear(admin)
            admin.execute("DELETE FROM bare_jobs")
    finally:
        await conn.close()
    return out


async def drains(url: str, admin, rounds: int, jobs: int, workers: tuple[int, ...],
                 size: int | None = None) -> dict:
    conns = await drivers.open_connections(url, max(workers))

    def shape(system: str) -> tuple:
        if size is None:
            return drivers.drain_per_job, {"system": system, "queue": QUEUE}
        return drivers.drain_batched, {"system": system, "queue": QUEUE, "size": size}

    rates: dict[str, dict[str, list[float]]] = {}
    try:
        for system in SYSTEMS:  # warm every connection's plans
            fill(admin, system, 20 * len(conns))
            loop, kwargs = shape(system)
            await drivers.run_workers(conns, loop, **kwargs)
        clear(admin)
        for n in workers:
            for r in range(rounds):
                order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
                for system in order:
                    fill(admin, system, jobs)
                vacuum(admin)
                for system in order:
                    db.checkpoint(admin)
                    loop, kwargs = shape(system)
                    timed = await drivers.run_workers(conns[:n], loop, **kwargs)
                    if timed.jobs != jobs:
                        raise RuntimeError(f"{system}: {timed.jobs} of {jobs} jobs")
                    rates.setdefault(f"{n}", {}).setdefault(system, []).append(timed.rate)
                clear(admin)
    finally:
        await drivers.close_connections(conns)
    return {n: {system: {"median_jobs_s": statistics.median(v),
                         "ratio_to_bare": statistics.median(
                             [x / b for x, b in zip(v, by_system["bare"])])}
                for system, v in by_system.items()}
            for n, by_system in rates.items()}


def race_token_retirement(url: str, cases=(("retire", "commit"), ("retire", "rollback"),
                                           ("claim", "commit"), ("claim", "rollback"))) -> dict:
    """The scheme's races, forced with real sessions. A first session uses
    token T and holds its transaction open: it retires T (complete), or
    claims another job with T. A second session claims with T, waits on the
    unique index, and is answered once the first commits or rolls back.
    Every case must end in QF301 except a concurrent first claim rolled
    back, which leaves T unused (the second claim stands)."""
    outcomes = {}
    with psycopg.connect(url, autocommit=True) as admin:
        for first, ending in cases:
            admin.execute(LAB_SUBMIT_BATCH, {"queue": QUEUE, "requests": db.plain_requests(2)})
            token = drivers.new_token()
            holder = psycopg.connect(url)
            claiming = psycopg.connect(url, autocommit=True)
            try:
                if first == "retire":
                    job_id, _, _, _, generation, _ = admin.execute(
                        LAB_CLAIM, {"queue": QUEUE, "owner": "a", "token": token}).fetchone()
                    assert holder.execute(LAB_COMPLETE, {
                        "job_id": job_id, "owner": "a", "generation": generation,
                        "token": token}).fetchone()[0]
                else:
                    assert holder.execute(LAB_CLAIM, {"queue": QUEUE, "owner": "a",
                                                      "token": token}).fetchone()
                result: dict = {}

                def claim() -> None:
                    try:
                        row = claiming.execute(LAB_CLAIM, {"queue": QUEUE, "owner": "b",
                                                           "token": token}).fetchone()
                        result["answer"] = "claimed" if row else "no job"
                    except psycopg.Error as error:
                        result["answer"] = error.sqlstate

                thread = threading.Thread(target=claim)
                thread.start()
                waited = _wait_until_blocked(admin, claiming.info.backend_pid)
                getattr(holder, ending)()
                thread.join(30)
                outcomes[f"{first} then {ending}"] = {"second_claim_waited": waited,
                                                      "answer": result.get("answer")}
            finally:
                holder.close()
                claiming.close()
            admin.execute("TRUNCATE v5lab._jobs, v5lab._ready, v5lab._scheduled, v5lab._claimed, v5lab._spent")
    return outcomes


def repeatable_read_answer(url: str) -> str:
    """What a claim answers inside a REPEATABLE READ transaction."""
    with psycopg.connect(url) as repeatable:
        repeatable.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        try:
            repeatable.execute(LAB_CLAIM, {"queue": QUEUE, "owner": "c", "token": "t"})
        except psycopg.Error as error:
            return error.sqlstate
    return "claimed"


def same_statement_variant() -> str:
    """claim_next with the spent check moved into the claiming statement:
    the scheme the issue warns against, kept to show that the race above
    catches it (its snapshot predates the wait on the unique index)."""
    text = LAB_SQL.read_text(encoding="utf-8")
    later = text[text.index("    -- Its own statement: a snapshot"):text.index("    RETURN QUERY SELECT v_row.job_id")]
    text = text.replace(later, "")
    text = text.replace("          FROM job AS j\n        ON CONFLICT",
                        "          FROM job AS j WHERE NOT EXISTS (SELECT 1 FROM v5lab._spent AS s\n"
                        "                               WHERE s.claim_token = claim_next.claim_token)\n"
                        "        ON CONFLICT")
    if "WHERE NOT EXISTS" not in text:
        raise RuntimeError("the variant no longer applies to v5_layout.sql")
    return text


def _wait_until_blocked(admin, pid: int) -> bool:
    for _ in range(500):
        row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                            (pid,)).fetchone()
        if row and row[0] == "Lock":
            return True
        admin.execute("SELECT pg_sleep(0.01)")
    return False


ROWS = (("server time per job (µs, top-level statements)", "server_us", "{:,.0f}"),
        ("statements per job (top-level and nested)", "statements", "{:.0f}"),
        ("WAL bytes per job", "wal_bytes", "{:,.0f}"),
        ("index entries per job", "index entries", "{:.2f}"),
        ("heap inserts / non-HOT updates / HOT updates / deletes per job",
         ("heap inserts", "heap updates (non-HOT)", "HOT updates", "heap deletes"), "{:.2f}"),
        ("row locks per job", "row locks", "{:.2f}"),
        ("full-page images per job", "full-page images", "{:.2f}"))


def markdown(figures: dict) -> str:
    """The run's tables, as docs/design-v5.md shows them."""
    lines = []
    for title, key in (("one job at a time", "per_job"), ("batches of 10", "per_job_batch_10"),
                       ("batches of 100", "per_job_batch_100")):
        per_job = figures[key]
        lines += [f"| per job, {title} | bare | version 4 | laboratory |", "|---|---:|---:|---:|"]
        for label, keys, fmt in ROWS:
            cells = []
            for system in SYSTEMS:
                row = per_job[system]
                if isinstance(keys, tuple):
                    cells.append(" / ".join(fmt.format(row.get(k, 0)) for k in keys))
                else:
                    cells.append(fmt.format(row.get(keys, 0)))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["| drain (median of rounds; ratio to bare) | bare | version 4 | laboratory |",
              "|---|---:|---:|---:|"]
    for title, key in (("one job at a time", "drains"), ("batches of 10", "drains_batch_10"),
                       ("batches of 100", "drains_batch_100")):
        for workers, by_system in sorted(figures[key].items(), key=lambda item: int(item[0])):
            cells = [f"{by_system[s]['median_jobs_s']:,.0f} jobs/s ({by_system[s]['ratio_to_bare']:.2f}×)"
                     for s in SYSTEMS]
            lines.append(f"| {title}, {workers} worker{'s' if workers != '1' else ''} | "
                         + " | ".join(cells) + " |")
    later = figures["later"]
    lines += ["", f"| with {figures['later_jobs']:,} jobs due later, server µs per call | bare | version 4 | laboratory |",
              "|---|---:|---:|---:|"]
    for probe in ("empty claim", "next_due"):
        cells = [f"{later[s][probe]:,.0f}" if probe in later[s] else "—" for s in SYSTEMS]
        lines.append(f"| {probe} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.v5_layout", description=__doc__)
    parser.add_argument("--url", required=True, help="a server preloading pg_stat_statements")
    parser.add_argument("--diag-jobs", type=int, default=2000)
    parser.add_argument("--drain-jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--later", type=int, default=100_000, help="jobs due later for the probes")
    parser.add_argument("--out", type=Path, default=Path("bench/runs/v5-layout.json"))
    parser.add_argument("--markdown", action="store_true", help="print the tables of --out and stop")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8"))))
        return 0

    url = db.recreate_database(args.url, "fenceq_v5_layout")
    db.install(url, [QUEUE])
    with db.connect(url) as admin:
        admin.execute(LAB_SQL.read_text(encoding="utf-8"))
        stats = ServerStats(admin)
        figures = {"server": db.server_facts(admin), "machine": db.machine_facts(),
                   "race": race_token_retirement(url),
                   "repeatable_read": repeatable_read_answer(url)}
        admin.execute(same_statement_variant())
        figures["race_same_statement_variant"] = race_token_retirement(url, (("retire", "commit"),))
        admin.execute(LAB_SQL.read_text(encoding="utf-8"))
        print("race:", json.dumps(figures["race"]), "repeatable read:", figures["repeatable_read"])
        print("race, spent check in the claiming statement:",
              json.dumps(figures["race_same_statement_variant"]))
        figures["per_job"] = asyncio.run(diagnostics(url, admin, stats, args.diag_jobs))
        for system, row in figures["per_job"].items():
            print(system, json.dumps({k: v for k, v in row.items() if k not in ("by_relation", "statements_us")}))
        figures["drains"] = asyncio.run(drains(url, admin, args.rounds, args.drain_jobs, (1, 4)))
        print("drains:", json.dumps(figures["drains"]))
        for size in (10, 100):
            figures[f"per_job_batch_{size}"] = asyncio.run(
                diagnostics(url, admin, stats, args.diag_jobs, size))
            for system, row in figures[f"per_job_batch_{size}"].items():
                print(f"batch {size}", system, json.dumps(
                    {k: v for k, v in row.items() if k not in ("by_relation", "statements_us")}))
            figures[f"drains_batch_{size}"] = asyncio.run(
                drains(url, admin, args.rounds, args.drain_jobs, (4,), size))
            print(f"drains, batch {size}:", json.dumps(figures[f"drains_batch_{size}"]))
        # Last: version 4's jobs due later stay behind (only purge's terminal jobs go).
        figures["later"] = asyncio.run(later_probes(url, admin, stats, args.later))
        figures["later_jobs"] = args.later
        print("with jobs due later, server µs:", json.dumps(figures["later"]))
    args.out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    db.drop_database(args.url, "fenceq_v5_layout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
