"""bench/fence_calls.py stays runnable: a tiny run against the test server
migrates one database to version 8 and one to version 9, runs every fenced
call in both (each call answering true, or the run raises), each writing
WAL, the table lists every call with both versions' figures, and both
databases are dropped. No timing is judged."""

from __future__ import annotations

import psycopg
import pytest
from conftest import pg_url

from bench import fence_calls

pytestmark = pytest.mark.pg_server


def test_a_tiny_run_measures_every_call_in_both_versions_and_drops_its_databases(pg):
    run = fence_calls.run(pg_url("postgres"), jobs=30, rounds=2, size=10, log=lambda message: None)
    assert run["versions"] == {"v8": "8", "v9": "9"}
    for version in fence_calls.VERSIONS:
        assert set(run["results"][version]) == set(fence_calls.CALLS)
        for runs in run["results"][version].values():
            assert len(runs) == 2 and all(r["wal"] > 0 and r["us"] > 0 for r in runs)
    with psycopg.connect(pg_url("postgres")) as admin:
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'fenceq_fence_calls_%'"
                             ).fetchone()[0] == 0
    rows = fence_calls.markdown(run, size=10).splitlines()[2:]
    assert [row.split(" | ")[0].removeprefix("| ").split(" (")[0] for row in rows] == list(fence_calls.CALLS)
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 6 and all(cells[1:]), row  # v8 and v9 time, ratio, v8 and v9 WAL


def test_each_phase_covers_the_claimed_jobs_as_planned():
    claimed = [(f"j{i}", 1, "t") for i in range(25)]
    assert [len(c) for c in fence_calls.plan("heartbeat", claimed, 10)] == [1] * 25
    assert [len(c) for c in fence_calls.plan("heartbeat_batch", claimed, 10)] == [10, 10, 5]
    halves = fence_calls.plan("complete", claimed, 10), fence_calls.plan("complete_batch", claimed, 10)
    assert [f for c in halves[0] for f in c] + [f for c in halves[1] for f in c] == claimed
    assert [len(c) for c in halves[0]] == [1] * 12 and [len(c) for c in halves[1]] == [10, 3]
