"""SQLite on one machine: several OS processes share one database file."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import fenceq
import fenceq.backends.sqlite
from fenceq.ops import get_job

CHILD = Path(__file__).with_name("sqlite_child.py")


def child(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CHILD), *arguments], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_processes_claiming_at_once_never_share_a_job(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("shared")
        job_ids = client.submit_batch("shared", [{"task": "t"} for _ in range(240)])
    # A short busy timeout for some of them, so that "database is locked"
    # really happens and must come back as a clean PersistenceFailed.
    processes = [child("claim", sqlite_db.url, "shared", f"owner-{n}", timeout)
                 for n, timeout in enumerate(["0.001", "0.001", "5", "5"])]
    reports = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        reports.append(json.loads(out))

    claimed = [job_id for report in reports for job_id in report["claimed"]]
    assert sorted(claimed) == sorted(job_ids)  # every job once, no job twice
    for cause, cause_text, message in (f for report in reports for f in report["failures"]):
        assert (cause, cause_text) == ("OperationalError", "database is locked")
        assert message == str(fenceq.PersistenceFailed())
    with sqlite_db.connect() as client:
        jobs = [client.get_job(job_id) for job_id in job_ids]
    assert {(job.status, job.attempts, job.generation) for job in jobs} == {("completed", 1, 1)}


def test_database_is_locked_is_a_clean_persistence_failure(sqlite_db, monkeypatch):
    monkeypatch.setattr(fenceq.backends.sqlite, "BUSY_TIMEOUT_SECONDS", 0.05)
    with sqlite_db.connect() as client:
        client.create_queue("q")
        job_id = client.submit("q", "t")
        holder = sqlite3.connect(fenceq.backends.sqlite.database_path(sqlite_db.url), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(fenceq.PersistenceFailed) as info:
                client.submit("q", "t", submission_id="during-the-lock")
            with pytest.raises(fenceq.PersistenceFailed):
                client.claim_next(["q"], "w", fenceq.new_claim_token())
            # Readers are not blocked by the writer (WAL).
            assert client.get_job(job_id).status == "pending"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        error = info.value
        assert (error.code, error.reason, error.sqlstate) == (
            fenceq.ErrorCode.QUEUE_PERSISTENCE_FAILED, "unavailable", None)
        assert isinstance(error.__cause__, sqlite3.OperationalError)
        assert "locked" not in str(error) and "during-the-lock" not in str(error)
        # The refused submission left nothing behind: it can be retried.
        replayed = client.submit("q", "t", submission_id="during-the-lock")
        assert client.submit("q", "t", submission_id="during-the-lock") == replayed


def test_killed_submitter_loses_nothing_that_was_committed(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("q")
    process = child("submit", sqlite_db.url, "q")
    returned = [process.stdout.readline().strip() for _ in range(60)]
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    with sqlite_db.connect() as client:
        assert all(client.get_job(job_id) is not None for job_id in returned)
        assert all(check.ok for check in client.verify_schema())


def test_killed_writer_holding_the_lock_loses_nothing_and_frees_the_file(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("q")
        job_ids = [client.submit("q", "t", {"n": n}) for n in range(5)]
    process = child("hold", sqlite_db.url, "q")
    assert process.stdout.readline().strip() == "holding"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert sqlite_db.sql("PRAGMA integrity_check") == [("ok",)]
    with sqlite_db.connect() as client:
        # The open transaction is gone; everything committed before it stays.
        assert [client.get_job(job_id).status for job_id in job_ids] == ["pending"] * 5
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claim is not None and client.complete(claim.fence)
        assert client._backend.run(get_job(claim.job_id)).status == "completed"
