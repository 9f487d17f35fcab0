"""The timed loops, on psycopg AsyncConnections in one asyncio process: one
connection per worker, each call its own autocommit transaction, fenceq's
functions called exactly as another language would call them."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

import psycopg

from . import statements as sql

# Positions in fenceq.claim (docs/guarantees.md §3: its columns are only ever appended).
CLAIM_JOB_ID, CLAIM_GENERATION, CLAIM_TOKEN = 0, 8, 9


def new_token() -> str:
    """A fresh 128-bit claim token, as fenceq.new_claim_token() makes."""
    return secrets.token_hex(16)


async def open_connections(url: str, count: int, track: str = "none") -> list[psycopg.AsyncConnection]:
    """`track` is this session's pg_stat_statements.track: "none" in timed
    runs (no bookkeeping cost on either side), "all" in diagnostic windows."""
    conns = []
    for _ in range(count):
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await conn.execute(f"SET pg_stat_statements.track = '{track}'")
        conns.append(conn)
    return conns


async def close_connections(conns: list[psycopg.AsyncConnection]) -> None:
    for conn in conns:
        await conn.close()


@dataclass
class Timed:
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


async def run_workers(conns: list[psycopg.AsyncConnection], loop, /, **kwargs) -> Timed:
    """Start `loop` on every connection at once; the rate is all jobs over
    the span until the last worker found the queue empty."""
    started = time.perf_counter()
    counts = await asyncio.gather(*(loop(conn, owner=f"bench-{i}", **kwargs)
                                    for i, conn in enumerate(conns)))
    return Timed(sum(counts), time.perf_counter() - started)


# --- drains: loop until the queue is empty, return jobs handled ---------------

async def fenceq_claim(conn, queue: str, owner: str):
    token = new_token()
    cur = await conn.execute(sql.FQ_CLAIM_NEXT, {"queues": [queue], "owner": owner, "token": token})
    return await cur.fetchone()


async def fenceq_complete(conn, claim, owner: str) -> None:
    cur = await conn.execute(sql.FQ_COMPLETE, {
        "job_id": claim[CLAIM_JOB_ID], "owner": owner,
        "generation": claim[CLAIM_GENERATION], "token": claim[CLAIM_TOKEN]})
    if not (await cur.fetchone())[0]:
        raise RuntimeError("fenceq.complete returned false for a live claim")


async def bare_claim(conn, queue: str, owner: str):
    cur = await conn.execute(sql.BARE_CLAIM, {"queue": queue, "owner": owner})
    return await cur.fetchone()


async def bare_complete(conn, claim, owner: str) -> None:
    cur = await conn.execute(sql.BARE_COMPLETE, {"id": claim[0], "owner": owner})
    if cur.rowcount != 1:
        raise RuntimeError("the bare complete updated no row")


PER_JOB = {"fenceq": (fenceq_claim, fenceq_complete), "bare": (bare_claim, bare_complete)}


async def drain_per_job(conn, owner: str, system: str, queue: str) -> int:
    claim, complete = PER_JOB[system]
    done = 0
    while (row := await claim(conn, queue, owner)) is not None:
        await complete(conn, row, owner)
        done += 1
    return done


async def fenceq_claim_batch(conn, queue: str, owner: str, size: int) -> list:
    tokens = [new_token() for _ in range(size)]
    cur = await conn.execute(sql.FQ_CLAIM_BATCH, {"queues": [queue], "owner": owner, "tokens": tokens})
    return await cur.fetchall()


async def fenceq_claim_jobs(conn, queue: str, owner: str, size: int) -> list:
    cur = await conn.execute(sql.FQ_CLAIM_JOBS, {"queues": [queue], "owner": owner, "nonce": new_token(),
                                                 "n": size})
    return await cur.fetchall()


async def fenceq_complete_batch(conn, rows: list, owner: str) -> None:
    cur = await conn.execute(sql.FQ_COMPLETE_BATCH, {
        "job_ids": [r[CLAIM_JOB_ID] for r in rows], "owners": [owner] * len(rows),
        "generations": [r[CLAIM_GENERATION] for r in rows], "tokens": [r[CLAIM_TOKEN] for r in rows]})
    if not all((await cur.fetchone())[0]):
        raise RuntimeError("fenceq.complete_batch returned false for a live claim")


async def bare_claim_batch(conn, queue: str, owner: str, size: int) -> list:
    cur = await conn.execute(sql.BARE_CLAIM_BATCH, {"queue": queue, "owner": owner, "n": size})
    return await cur.fetchall()


async def bare_complete_batch(conn, rows: list, owner: str) -> None:
    cur = await conn.execute(sql.BARE_COMPLETE_BATCH, {"ids": [r[0] for r in rows], "owner": owner})
    if cur.rowcount != len(rows):
        raise RuntimeError("the bare batch complete missed rows")


BATCHED = {"fenceq": (fenceq_claim_batch, fenceq_complete_batch),
           "fenceq_jobs": (fenceq_claim_jobs, fenceq_complete_batch),  # version 8
           "bare": (bare_claim_batch, bare_complete_batch)}


async def drain_batched(conn, owner: str, system: str, queue: str, size: int) -> int:
    claim, complete = BATCHED[system]
    done = 0
    while rows := await claim(conn, queue, owner, size):
        await complete(conn, rows, owner)
        done += len(rows)
    return done


# --- submits -----------------------------------------------------------------

SUBMIT = {"bare": sql.BARE_INSERT, "fenceq": sql.FQ_SUBMIT, "fenceq_owned": sql.FQ_SUBMIT_OWNED}


async def submit_each(conn, owner: str, variant: str, queue: str, count: int, tag: str) -> int:
    statement = SUBMIT[variant]
    for i in range(count):
        params = {"queue": queue, "task": "bench", "payload": '{"n": %d}' % i}
        if variant == "fenceq_owned":
            params["submission_id"] = f"{tag}-{owner}-{i}"
        await (await conn.execute(statement, params)).fetchone()
    return count


async def submit_batches(conn, owner: str, statement: str, queue: str, arrays: list[str]) -> int:
    """One call per prepared JSON array (built before the clock starts)."""
    done = 0
    for requests in arrays:
        cur = await conn.execute(statement, {"queue": queue, "requests": requests})
        done += (await cur.fetchone())[0]
    return done


# --- latency -------------------------------------------------------------------

async def claim_complete_latencies(conn, system: str, queue: str, count: int) -> list[float]:
    """Seconds per claim + complete pair, one connection."""
    claim, complete = PER_JOB[system]
    owner = "bench-latency"
    out = []
    for _ in range(count):
        started = time.perf_counter()
        row = await claim(conn, queue, owner)
        if row is None:
            raise RuntimeError("the latency backlog ran dry")
        await complete(conn, row, owner)
        out.append(time.perf_counter() - started)
    return out
