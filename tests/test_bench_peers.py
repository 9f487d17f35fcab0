"""bench/peers.py's own parts (fenceq.Worker, fenceq's raw loop, the bare
loop and the pickup latency), with a few jobs against the test server:
every job done, every figure of the record present. No peer, npm or timing
is needed or asserted; a peer that is not installed is reported, not fatal."""

from __future__ import annotations

import os

import psycopg
import pytest
from conftest import pg_url

from bench import peers

pytestmark = pytest.mark.pg_server

JOBS = 200


@pytest.fixture
def record(pg, tmp_path, monkeypatch):
    monkeypatch.setattr(peers.SYSTEMS["oban"], "python", str(tmp_path / "no-such-python"))
    prefix = f"fenceq_peers_test_{os.getpid()}"
    args = peers.parse_args(["--url", pg_url("postgres"), "--jobs", str(JOBS), "--rounds", "1", "--processes", "1",
                             "--systems", "fenceq-worker,raw,bare,oban", "--wake", "5", "--db-prefix", prefix,
                             "--out", str(tmp_path / "peers.json")])
    got = peers.run(args, log=lambda message: None)
    with psycopg.connect(pg_url("postgres")) as admin:
        left = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)).fetchall()
    assert left == [], "the systems' databases are dropped"
    return got


def test_the_fenceq_parts_drain_every_job_and_record_every_figure(record):
    assert [(r["system"], r["processes"], r["handled"]) for r in record["runs"]] == [
        ("fenceq-worker", 1, JOBS), ("raw", 1, JOBS), ("bare", 1, JOBS)]
    for run in record["runs"]:
        assert run["seconds"] > 0 and run["polls"] >= 1
        assert run["wal_bytes_per_job"] > 0 and run["commits_per_job"] > 0
        assert run["client_cpu_us_per_job"] >= 0
        assert set(peers.PER_JOB) <= set(run)  # server time is None where pg_stat_statements is not loaded
    summary = record["summary"]
    assert set(summary) == {"fenceq-worker", "raw", "bare"}
    for name, by_w in summary.items():
        row = by_w["1"]
        assert row["jobs_per_s"] > 0 and row["handled"] == [JOBS]
        assert row["ratio_to_worker"] > 0 and row["ratio_to_raw"] > 0
    assert summary["fenceq-worker"]["1"]["ratio_to_worker"] == 1.0
    assert {"p50_ms", "p95_ms", "max_ms"} <= set(record["wake"]) and record["wake"]["samples"] == 5
    assert record["versions"]["fenceq schema"]


def test_a_peer_that_cannot_run_is_reported_with_its_reason(record):
    assert set(record["not_run"]) == {"oban"}
    assert "Python >= 3.12" in record["not_run"]["oban"]
    table = peers.markdown(record)
    assert "| fenceq.Worker | 1 |" in table and "Not run: oban:" in table


def test_node_peers_without_node_are_reported(monkeypatch, tmp_path):
    monkeypatch.setattr(peers, "NODE", tmp_path / "node")
    assert "Node 22" in peers.unavailable(peers.SYSTEMS["graphile-worker"])
    assert peers.unavailable(peers.SYSTEMS["bare"]) is None
