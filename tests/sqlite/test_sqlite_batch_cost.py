"""The SQLite batch files do work in proportion to their batch: counted in
virtual-machine steps (SQLite's progress handler), which do not depend on
the machine's speed. Joining json_each to json_each on the index rescanned
the inner array for every element (10,000 fences took minutes)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import fenceq
from fenceq import ops
from fenceq.backends.sqlite import database_path, execute, open_connection

STEP = 100  # the progress handler runs every STEP virtual-machine steps
SMALL, LARGE = 500, 2000  # four times the fences
LINEAR = 4 * 1.5  # four times the work, with room for an n log n sort; n squared is 16


def claimed_fences(db, queue: str, count: int) -> list[fenceq.Fence]:
    with db.connect() as client:
        client.create_queue(queue, lease=timedelta(minutes=10))
        client.submit_batch(queue, [{"task": "t"} for _ in range(count)])
        claims = []
        while len(claims) < count:
            tokens = [fenceq.new_claim_token() for _ in range(min(1000, count - len(claims)))]
            claims += client.claim_batch([queue], "w", tokens)
    return [claim.fence for claim in claims]


def steps_of(connection, op) -> int:
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.set_progress_handler(count, STEP)
    try:
        execute(connection, op, set())
    finally:
        connection.set_progress_handler(None, STEP)
    return steps


def test_batch_files_cost_in_proportion_to_the_batch(sqlite_db):
    small = claimed_fences(sqlite_db, "small", SMALL)
    large = claimed_fences(sqlite_db, "large", LARGE)
    results = {n: [{"n": i, "text": "x" * 100} for i in range(n)] for n in (SMALL, LARGE)}
    with contextlib.closing(open_connection(database_path(sqlite_db.url))) as connection:
        heartbeats = [steps_of(connection, ops.heartbeat_batch(f)) for f in (small, large)]
        completions = [steps_of(connection, ops.complete_batch(f, results[len(f)])) for f in (small, large)]
    assert heartbeats[1] < LINEAR * heartbeats[0], heartbeats
    assert completions[1] < LINEAR * completions[0], completions
