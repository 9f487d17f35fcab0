"""The worker on a PostgreSQL schema of version 8 claims several jobs with
claim_jobs, one nonce per call: the ledger holds fewer rows than jobs, every
job runs once, and a call whose answer was lost is recovered with its nonce
(recover_claim answers every job of the call), never claimed anew."""

from __future__ import annotations

import pytest

from conftest import LEASE, read_trace, running
from fenceq.worker import Worker
from fq_worker_apps import app as tasks_app
from test_worker_runtime import FAST, LoseAcks, recording_recoveries, wait_status


@pytest.fixture
async def pg_aclient(pg):
    client = await pg.connect_async()
    await client.create_queue("work", lease=LEASE, max_attempts=3)
    yield client
    await client.close()


def _ledger(pg) -> tuple[int, int, int]:
    """(call rows, jobs they name, per-token rows) of the claim ledger."""
    [row] = pg.sql("SELECT count(*) FILTER (WHERE job_ids IS NOT NULL),"
                   " coalesce(sum(cardinality(job_ids)), 0), count(*) FILTER (WHERE job_ids IS NULL)"
                   " FROM fenceq._claims")
    return row


async def _ran_once(client, ids, trace_file) -> None:
    for job_id in ids:
        job = await client.get_job(job_id)
        assert (job.status, job.generation, job.attempts) == ("completed", 1, 1)
    started = [e["job"] for e in read_trace(trace_file) if e["event"] == "start"]
    assert sorted(started) == sorted(ids), "every job ran exactly once"


async def test_a_worker_on_schema_8_drains_with_one_ledger_row_per_call(pg, pg_aclient, trace_file):
    ids = [await pg_aclient.submit("work", "quick", {"trace": str(trace_file)}) for _ in range(40)]
    worker = Worker(tasks_app, url=pg.url, queues=["work"], concurrency=4, **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(pg_aclient, job_id, "completed")
    await _ran_once(pg_aclient, ids, trace_file)
    calls, named, per_token = _ledger(pg)
    assert calls >= 1 and named + per_token == len(ids), "each claim recorded once"
    assert calls + per_token < len(ids), "fewer ledger rows than jobs"


async def test_a_lost_answer_to_claim_jobs_is_recovered_with_its_nonce(pg, pg_aclient, trace_file):
    ids = [await pg_aclient.submit("work", "quick", {"trace": str(trace_file)}) for _ in range(3)]
    faults = LoseAcks({"claim_jobs"})
    recovered = []
    worker = Worker(tasks_app, url=pg.url, queues=["work"], concurrency=3,
                    wrap_client=recording_recoveries(faults, recovered), **FAST)
    async with running(worker):
        for job_id in ids:
            await wait_status(pg_aclient, job_id, "completed")
    assert faults.hits == ["claim_jobs"]
    assert sorted(c.job_id for c in recovered) == sorted(ids), "the lost call's every job, by its nonce"
    assert len({c.claim_token for c in recovered}) == 1
    assert worker.counts["recovered_claims"] == len(ids)
    await _ran_once(pg_aclient, ids, trace_file)
    assert _ledger(pg) == (1, 3, 0)
