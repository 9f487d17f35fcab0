"""A claim whose lease spans a failover (docs/guarantees.md §17): the new
primary has the lease as the old one granted it, to the microsecond; its
owner heartbeats and completes there while the lease holds, and is refused
once the new primary's clock has passed it. The clients follow the
primary: the call cut off by the failover fails (PersistenceFailed) and
the same call re-sent runs on the new primary."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import psycopg

import fenceq
from fenceq import new_claim_token
from fenceq.errors import PersistenceFailed
from replicated import cluster, needs_failover  # noqa: F401 - the fixture

pytestmark = needs_failover

QUEUE = "leases"


def resend(call):
    """A fenced write or a read, re-sent unchanged while its outcome is unknown."""
    for _ in range(100):
        try:
            return call()
        except PersistenceFailed:
            time.sleep(0.1)
    raise AssertionError("the database stayed unreachable")


async def resend_async(call):
    for _ in range(100):
        try:
            return await call()
        except PersistenceFailed:
            await asyncio.sleep(0.1)
    raise AssertionError("the database stayed unreachable")


def leases(url: str, job_ids: list[str]) -> dict[str, object]:
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT job_id, lease_expires_at FROM fenceq.jobs WHERE job_id = ANY(%s)",
                                 (job_ids,)).fetchall())


def lapsed(url: str, job_id: str) -> bool:
    """Whether the primary's clock has passed the job's lease."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT clock_timestamp() > lease_expires_at FROM fenceq.jobs WHERE job_id = %s",
                            (job_id,)).fetchone()[0]


def test_a_lease_spanning_a_failover_holds_on_the_new_primary_and_is_refused_once_lapsed(cluster):
    with fenceq.connect(cluster.url) as client:
        client.create_queue(QUEUE)
        job_ids = [client.submit(QUEUE, "t", {"n": n}) for n in range(2)]
        claims = [client.claim_next([QUEUE], "owner-a", new_claim_token(), lease=timedelta(minutes=5))
                  for _ in job_ids]
        holding, lapsing = (c.fence for c in claims)
        granted = leases(cluster.url, job_ids)

        old = cluster.kill("immediate")
        new = cluster.promote()
        cluster.rebuild()   # a synchronous standby again: commits wait for one
        assert new != old

        # The takeover neither shortened nor lengthened the leases.
        assert leases(cluster.url, job_ids) == granted
        assert resend(lambda: client.heartbeat(holding)) is True
        assert client.complete(holding, {"done": True}) is True
        assert client.get_job(holding.job_id).status == "completed"

        # A heartbeat on the new primary grants a lease by its clock; once
        # that clock has passed it, the owner's writes are refused.
        assert client.heartbeat(lapsing, lease=timedelta(milliseconds=200)) is True
        deadline = time.monotonic() + 60
        while not lapsed(cluster.url, lapsing.job_id):
            assert time.monotonic() < deadline, "the new primary's clock never passed the lease"
            time.sleep(0.05)
        assert client.heartbeat(lapsing) is False
        assert client.complete(lapsing, {"done": True}) is False
        assert client.claim_state(lapsing) is None


async def test_an_async_client_follows_the_primary(cluster):
    async with await fenceq.connect_async(cluster.url) as client:
        await client.create_queue(QUEUE)
        before = await client.submit(QUEUE, "t", submission_id="follow-1")
        cluster.kill("sigkill")
        cluster.promote()
        cluster.rebuild()
        # The producer re-sends with the same submission id: the same job.
        assert await resend_async(lambda: client.submit(QUEUE, "t", submission_id="follow-1")) == before
        assert (await client.get_job(before)).status == "pending"
