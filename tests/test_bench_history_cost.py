"""bench/history_cost.py stays runnable: a tiny run against the test server
(no pg_stat_statements there: WAL figures only) drains every job on the
three databases, history on writes three events per job and history off
none, the tables render, and the databases are dropped. No timing is judged."""

from __future__ import annotations

import os

import psycopg
import pytest
from conftest import pg_url

from bench import history_cost

pytestmark = pytest.mark.pg_server


def test_a_tiny_run_records_every_system_and_renders(pg, tmp_path):
    prefix = f"fenceq_history_cost_test_{os.getpid()}"
    args = history_cost.parse_args(["--url", pg_url("postgres"), "--jobs", "250", "--single-jobs", "5",
                                    "--rounds", "1", "--db-prefix", prefix, "--out", str(tmp_path / "h.json")])
    record = history_cost.run(args, log=lambda message: None)
    with psycopg.connect(pg_url("postgres")) as admin:
        left = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)).fetchall()
    assert left == [], "the three databases are dropped"
    assert record["versions"] == {"v5": "5", "off": "6", "on": "6"}
    (round_,) = record["rounds"]
    for part, jobs, events in (("submit_batch", 250, 1), ("drain", 250, 2), ("single", 5, 3)):
        for track in history_cost.TRACKS:
            by_system = round_[part][track]
            assert all(by_system[s]["jobs"] == jobs and by_system[s]["wal_bytes"] > 0 for s in history_cost.SYSTEMS)
            assert (by_system["v5"]["events"], by_system["off"]["events"], by_system["on"]["events"]) == (
                None, 0, events), (part, track)
    text = history_cost.markdown(record)
    assert "| events rows per job | — | 0.00 (0.00–0.00) | 3.00 (3.00–3.00) | — | — |" in text.splitlines()
