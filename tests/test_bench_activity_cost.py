"""bench/activity_cost.py stays runnable: a tiny run against the test
server builds its history, samples it (a week's catch-up writes every
minute of every queue), reads it, searches it, makes each bulk action
change its 1,000 jobs, renders its tables and drops its database. No
timing is judged."""

from __future__ import annotations

import os

import psycopg
import pytest
from conftest import pg_url

from bench import activity_cost

pytestmark = pytest.mark.pg_server


def test_a_tiny_run_measures_every_call_and_renders(pg, tmp_path):
    name = f"fenceq_activity_cost_test_{os.getpid()}"
    args = activity_cost.parse_args(["--url", pg_url("postgres"), "--history", "2000", "--queues", "2",
                                     "--pending", "100", "--repeat", "1", "--db-name", name,
                                     "--out", str(tmp_path / "a.json")])
    record = activity_cost.run(args, log=lambda message: None)
    with psycopg.connect(pg_url("postgres")) as admin:
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone()[0] == 0
    week = record["sample_activity"]["catch up a week in one call (max_minutes 11520)"]
    assert week["answer"] >= 2 * (activity_cost.HOURS * 60 - 2), "every minute of both queues"
    # A minute may close between two calls: then each queue has one more.
    assert record["sample_activity"]["steady state: one minute per queue"]["answer"] in (2, 4)
    assert record["sample_activity"]["nothing to write (a second call in the minute)"]["answer"] in (0, 2)
    assert {f["answer"] for f in record["activity"].values()} <= {60, 96, 192}
    assert all(f["answer"] == 1000 for f in record["bulk"].values()), record["bulk"]
    assert record["search_jobs"]["claimed, all queues"]["answer"] == 50
    assert "| cancel_jobs, 1,000 pending |" in activity_cost.markdown(record)
