"""The SQLite batch files do work in proportion to their batch: counted in
virtual-machine steps (SQLite's progress handler), which do not depend on
the machine's speed. A join of json_each to json_each on the index, or a
scratch-table match without an index, made every element scan the whole
batch (10,000 fences took minutes)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

import fenceq
from fenceq import ops
from fenceq.backends.sqlite import database_path, execute, open_connection

STEP = 100  # the progress handler runs every STEP virtual-machine steps
SMALL, LARGE = 500, 2000  # four times the elements
LINEAR = 4 * 1.5  # four times the work, with room for an n log n sort; n squared is 16


def steps_of(connection, op) -> tuple[int, list[dict]]:
    """The steps of one call, and its answer rows."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.set_progress_handler(count, STEP)
    try:
        rows = execute(connection, op, set())
    finally:
        connection.set_progress_handler(None, STEP)
    return steps, rows


def job_id(queue: str, n: int) -> str:
    return f"00000000-0000-4000-8000-{queue == 'large':04d}{n:08d}"


def requests(queue: str, count: int, kind: str) -> list[dict]:
    if kind == "plain":
        return [{"task": "t"} for _ in range(count)]
    if kind == "submission ids and keys":
        return [{"task": "t", "submission_id": f"{queue}-{n}", "active_key": f"{queue}-{n}"} for n in range(count)]
    # chains of ten jobs, each waiting on the one before it
    return [{"task": "t", "job_id": job_id(queue, n), **({"depends_on": [job_id(queue, n - 1)]} if n % 10 else {})}
            for n in range(count)]


@pytest.mark.parametrize("kind", ["plain", "submission ids and keys", "dependencies"])
def test_submit_batch_costs_in_proportion_to_the_batch(sqlite_db, kind):
    with contextlib.closing(open_connection(database_path(sqlite_db.url))) as connection:
        steps = []
        for queue, count in (("small", SMALL), ("large", LARGE)):
            with sqlite_db.connect() as client:
                client.create_queue(queue)
            steps.append(steps_of(connection, ops.submit_batch(queue, requests(queue, count, kind)))[0])
    assert steps[1] < LINEAR * steps[0], steps


def test_fence_batches_cost_in_proportion_to_the_batch(sqlite_db):
    claims, fences = [], []
    with contextlib.closing(open_connection(database_path(sqlite_db.url))) as connection:
        for queue, count in (("small", SMALL), ("large", LARGE)):
            with sqlite_db.connect() as client:
                client.create_queue(queue, lease=timedelta(minutes=10))
                client.submit_batch(queue, [{"task": "t"} for _ in range(count)])
            tokens = [fenceq.new_claim_token() for _ in range(count)]
            steps, rows = steps_of(connection, ops.claim_batch([queue], "w", tokens))
            claims.append(steps)
            fences.append([fenceq.Fence(r["job_id"], r["owner_id"], r["generation"], r["claim_token"])
                           for r in rows])
        heartbeats = [steps_of(connection, ops.heartbeat_batch(f))[0] for f in fences]
        results = [[{"n": n, "text": "x" * 100} for n in range(len(f))] for f in fences]
        completions = [steps_of(connection, ops.complete_batch(f, r))[0] for f, r in zip(fences, results)]
    assert len(fences[1]) == LARGE
    for steps in (claims, heartbeats, completions):
        assert steps[1] < LINEAR * steps[0], (claims, heartbeats, completions)
