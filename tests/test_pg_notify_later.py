"""Version 4's `fenceq_jobs` hints for work due later (docs/dba.md §6): a
job that becomes pending and free to run, due now or later, notifies its
queue when the queue's notify flag is on, so that an idle worker re-reads
next_due; a job waiting on a dependency does not. Each case reads the
listener up to a barrier notification sent after it (commit order), so an
absent hint is seen without waiting for a timeout."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from fenceq.backends.protocol import JOBS_CHANNEL
from helpers import payloads_until_barrier


@pytest.fixture
def listening(pg):
    """(client, hints): hints() is what fenceq_jobs carried since the last call."""
    with pg.connect() as client, psycopg.connect(pg.url, autocommit=True) as listener:
        client.create_queue("q", backoff_base=timedelta(hours=1), backoff_max=timedelta(hours=1))
        listener.execute(f"LISTEN {JOBS_CHANNEL}")

        def hints() -> list[str]:
            return payloads_until_barrier(listener, JOBS_CHANNEL, "barrier")

        hints()  # the queue's creation is not under test
        yield client, hints


def later(hours: float = 1) -> datetime:
    return datetime.now(timezone.utc) + timedelta(hours=hours)


def test_a_submit_due_later_notifies_its_queue_unless_notify_is_off(listening):
    client, hints = listening
    client.submit("q", "t", run_at=later())
    assert hints() == ["q"]
    client.submit("q", "t", run_at=later(), active_key="k")  # the general path (_submit)
    assert hints() == ["q"]
    client.set_queue_notify("q", False)
    client.submit("q", "t", run_at=later())
    client.submit("q", "t", run_at=later(), active_key="k2")
    assert hints() == []


def test_a_batch_due_later_notifies_once(listening):
    client, hints = listening
    client.submit_batch("q", [{"task": "t", "run_at": later()} for _ in range(3)])
    assert hints() == ["q"], "identical notifications of one transaction fold into one"


def test_a_dependent_notifies_when_freed_not_while_blocked(listening):
    client, hints = listening
    first = client.submit("q", "first")
    hints()
    client.submit("q", "second", depends_on=[first], run_at=later())
    assert hints() == [], "blocked by its dependency"
    claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
    assert client.complete(claim.fence)
    assert hints() == ["q"], "freed, due later"


def test_a_retry_and_a_release_due_later_notify(pg, listening):
    client, hints = listening
    for _ in range(3):
        client.submit("q", "t")
    hints()
    claims = [client.claim_next(["q"], "w", fenceq.new_claim_token()) for _ in range(3)]
    assert client.fail(claims[0].fence, "boom")  # backoff: an hour
    assert hints() == ["q"]
    assert client.release(claims[1].fence, run_at=later())
    assert hints() == ["q"]
    pg.sql("UPDATE fenceq._jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id = %s",
           (claims[2].job_id,))
    client.reap()
    assert client.get_job(claims[2].job_id).status == "pending"
    assert hints() == ["q"], "reap's retry, due after the backoff"
