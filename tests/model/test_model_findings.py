"""The disagreements the lockstep model found (docs/fuzzing.md, "The model
in lockstep"), as the promise says it should be: fixed in version 5 (M1 on
both engines, M2 and M4 on SQLite; M3 followed from M1), kept as regression
tests."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import fenceq

def test_m1_a_job_forced_over_its_own_dependency_is_cancelled(client):
    client.create_queue("q")
    first = client.submit("q", "t", active_key="k")
    second = client.submit("q", "t", active_key="k", force=True, depends_on=[first])
    assert client.get_job(first).status == "cancelled"
    job = client.get_job(second)
    assert (job.status, job.last_error) == ("cancelled", "dependency_failed")


def test_m2_blocked_by_of_a_job_stored_cancelled_is_the_same_on_both(pg, sqlite_db):
    counts = []
    for database in (pg, sqlite_db):
        with database.connect() as client:
            client.create_queue("q")
            failed, pending = client.submit("q", "t"), client.submit("q", "t")
            client.cancel(failed)
            job = client.get_job(client.submit("q", "t", depends_on=[failed, pending]))
            assert (job.status, job.last_error) == ("cancelled", "dependency_failed")
            counts.append(job.blocked_by)
    assert counts[0] == counts[1]


def test_m3_cancelling_a_cancelled_job_again_changes_the_same_on_both(pg, sqlite_db):
    statuses = []
    for database in (pg, sqlite_db):
        with database.connect() as client:
            client.create_queue("q")
            first = client.submit("q", "t", active_key="k")
            stranded = client.submit("q", "t", active_key="k", force=True, depends_on=[first])
            assert client.cancel(first, force=True) == "cancelled"
            statuses.append(client.get_job(stranded).status)
    assert statuses[0] == statuses[1]



def test_m4_a_dependent_overdue_for_expiry_is_cancelled_by_its_reaped_dependency(client, db):
    """M4 (the long run, fixed in version 5 on SQLite): one reap fails a
    lapsed claim for good and finds a job that depends on it overdue. The
    claims are settled first, with their dependents: the dependent is
    cancelled (dependency_failed), not expired, on both engines."""
    client.create_queue("q", max_attempts=1)
    parent = client.submit("q", "t")
    claim = client.claim_next(["q"], "w", fenceq.new_claim_token(), lease=timedelta(milliseconds=100))
    assert claim.job_id == parent
    child = client.submit("q", "t", depends_on=[parent], expires_at=datetime.now(timezone.utc) - timedelta(hours=1))
    lease_end = client.get_job(parent).lease_expires_at
    deadline = time.monotonic() + 60
    while (db.sql("SELECT clock_timestamp()")[0][0] if db.backend == "postgres"
           else datetime.now(timezone.utc)) <= lease_end:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    reaped = client.reap()
    assert (reaped.requeued, reaped.failed, reaped.cancelled, reaped.expired) == (0, 1, 0, 0)
    job = client.get_job(child)
    assert (job.status, job.last_error) == ("cancelled", "dependency_failed")
