"""Fenced progress (docs/guarantees.md §17) on both engines: a report is
recorded only on a live claim, renews its lease exactly as a heartbeat
does, and is bounded; a refused or bad report changes nothing. On
PostgreSQL it stays a HOT update."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

import fenceq
from fenceq.ops import Arg, Op
from helpers import claim, raises_code, wait_until_past

LEASE = timedelta(seconds=30)
LIMIT = 64 * 1024  # bytes of canonical JSON


def _snapshot(client: fenceq.Client, job_id: str) -> tuple:
    job = client.get_job(job_id)
    return job.status, job.progress, job.progress_at, job.lease_expires_at, job.generation, job.owner_id


def test_a_report_is_recorded_and_renews_the_lease_as_a_heartbeat(client, queue):
    job_id = client.submit(queue, "t")
    work = claim(client, queue, lease=LEASE)
    assert client.get_job(job_id).progress_at is None
    wait_until_past(work.lease_expires_at - LEASE)  # the clock has moved on since the claim
    assert client.progress(work.fence, {"done": 3, "of": 10}) is True
    job = client.get_job(job_id)
    assert (job.progress, job.status) == ({"done": 3, "of": 10}, "claimed")
    assert job.lease_expires_at > work.lease_expires_at, "renewed"
    assert job.lease_expires_at == job.progress_at + LEASE, "to now + the claim's lease, as heartbeat does"
    assert client.progress(work.fence, None) is True, "JSON null clears the report"
    cleared = client.get_job(job_id)
    assert cleared.progress is None and cleared.progress_at >= job.progress_at
    assert client.complete(work.fence, "ok")
    assert client.get_job(job_id).progress_at == cleared.progress_at, "the last report stays for inspection"


def test_the_budget_clamps_the_renewal(client, queue):
    client.submit(queue, "t")
    work = claim(client, queue, lease=LEASE, budget=timedelta(seconds=10))
    assert client.progress(work.fence, 1) is True
    job = client.get_job(work.job_id)
    assert job.lease_expires_at == job.budget_expires_at


def test_a_cancel_requested_claim_still_reports(client, queue):
    client.submit(queue, "t")
    work = claim(client, queue)
    assert client.cancel(work.job_id) == "cancel_requested"
    assert client.progress(work.fence, "stopping") is True
    assert client.get_job(work.job_id).progress == "stopping"


def test_a_stale_fence_is_refused_and_changes_nothing(client):
    queue = "fast"
    client.create_queue(queue, lease=LEASE, backoff_base=timedelta(0))  # requeued jobs are due at once
    client.submit(queue, "t")
    old = claim(client, queue, owner="w-1", lease=timedelta(milliseconds=200))
    wait_until_past(old.lease_expires_at)
    assert client.progress(old.fence, "too late") is False, "its lease ran out"
    assert client.reap().requeued == 1
    new = claim(client, queue, owner="w-2", lease=LEASE)
    assert client.progress(new.fence, "mine") is True
    before = _snapshot(client, new.job_id)
    assert client.progress(old.fence, "stale") is False
    assert client.progress(fenceq.Fence(new.job_id, "w-2", new.generation, "another-token"), "forged") is False
    assert client.progress(fenceq.Fence(new.job_id, "w-1", new.generation, new.claim_token), "forged") is False
    assert _snapshot(client, new.job_id) == before
    assert client.complete(new.fence)
    finished = _snapshot(client, new.job_id)
    assert client.progress(new.fence, "after the end") is False, "a terminal job takes no report"
    assert _snapshot(client, new.job_id) == finished
    assert client.progress(fenceq.Fence("no-such-job", "w-2", 1, "t"), 1) is False


def test_a_report_may_hold_64_kib_of_canonical_json_and_no_more(client, queue):
    client.submit(queue, "t")
    work = claim(client, queue)
    largest = "x" * (LIMIT - 2)  # with its quotes, exactly the limit
    assert client.progress(work.fence, largest) is True
    before = _snapshot(client, work.job_id)
    for bad, code in ((largest + "x", "QF103"), ([[]] * (LIMIT // 3 + 1), "QF103"), (float("nan"), "QF103"),
                      ({"a": {1, 2}}, "QF103")):
        with raises_code(code):
            client.progress(work.fence, bad)
    with raises_code("QF106"):
        client.progress(fenceq.Fence(work.job_id, "", 1, "t"), 1)
    assert _snapshot(client, work.job_id) == before


def _raw_progress(client: fenceq.Client, fence: fenceq.Fence, text: str) -> bool:
    """A call that reaches the SQL unchecked by the client."""
    return client._backend.run(Op("progress", (
        Arg("job_id", "text", fence.job_id), Arg("owner_id", "text", fence.owner_id),
        Arg("generation", "bigint", fence.generation), Arg("claim_token", "text", fence.claim_token),
        Arg("progress", "jsonb", text)), "scalar", bool))


def test_the_sql_enforces_the_bound_itself(client, queue):
    client.submit(queue, "t")
    work = claim(client, queue)
    assert _raw_progress(client, work.fence, '"' + "y" * (LIMIT - 2) + '"') is True
    before = _snapshot(client, work.job_id)
    with raises_code("QF103"):
        _raw_progress(client, work.fence, '"' + "y" * (LIMIT - 1) + '"')
    with raises_code("QF103"):  # the value is named before the malformed fence
        _raw_progress(client, fenceq.Fence(work.job_id, "w", 0, "t"), '"' + "y" * LIMIT + '"')
    with raises_code("QF106"):
        _raw_progress(client, fenceq.Fence(work.job_id, "w", 0, "t"), "1")
    assert _snapshot(client, work.job_id) == before


def test_progress_is_a_hot_update(pg):
    """No index covers what progress changes (docs/guarantees.md §11): every
    report is a heap-only tuple update, counted in the transaction's own
    statistics."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        work = claim(client, "q")
    with psycopg.connect(pg.url) as conn:  # one transaction: its statistics are its own
        for n in range(5):
            assert conn.execute("SELECT fenceq.progress(%s, %s, %s, %s, %s::jsonb)",
                                (work.job_id, work.owner_id, work.generation, work.claim_token,
                                 f'{{"n": {n}}}')).fetchone() == (True,)
        updates, hot = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'fenceq' AND relname = '_jobs'").fetchone()
        conn.commit()
    assert (updates, hot) == (5, 5)


@pytest.mark.parametrize("call", [
    "SELECT fenceq.progress(NULL, '', 0, NULL, %s::jsonb)",
    "SELECT fenceq.progress('j', 'w', 1, 't', %s::jsonb)",
])
def test_the_sql_names_a_deep_value(pg, call):
    deep = "[" * 129 + "]" * 129
    with psycopg.connect(pg.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(call, (deep,))
    assert info.value.sqlstate == "QF103"
