"""reap and purge (docs/guarantees.md §3)."""

from datetime import datetime, timedelta, timezone

import fenceq
from helpers import claim, wait_until_past


def test_reap_settles_expired_claims(client):
    client.create_queue("q", max_attempts=1, backoff_base=timedelta(0))
    client.create_queue("r", max_attempts=3, backoff_base=timedelta(0))
    exhausted = client.submit("q", "t")
    retried = client.submit("r", "t")
    cancelling = client.submit("r", "t")
    claims = [claim(client, "q", lease=timedelta(milliseconds=300)),
              claim(client, "r", lease=timedelta(milliseconds=300)),
              claim(client, "r", lease=timedelta(milliseconds=300))]
    client.cancel(cancelling)
    wait_until_past(max(c.lease_expires_at for c in claims))
    assert client.reap() == fenceq.ReapResult(requeued=1, failed=1, cancelled=1, expired=0)
    assert client.reap() == fenceq.ReapResult(0, 0, 0, 0)
    assert client.get_job(exhausted).status == "failed"
    assert client.get_job(exhausted).dlq_id is not None
    job = client.get_job(retried)
    assert (job.status, job.last_error, job.owner_id) == ("pending", "lease_expired", None)
    assert client.get_job(cancelling).status == "cancelled"
    assert all(client.complete(c.fence) is False for c in claims)


def test_reap_leaves_live_claims_alone(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.reap() == fenceq.ReapResult(0, 0, 0, 0)
    assert client.complete(c.fence)


def test_reap_expires_overdue_pending_jobs_and_claim_skips_them(client, queue):
    soon = datetime.now(timezone.utc) + timedelta(milliseconds=200)
    overdue = client.submit(queue, "t", expires_at=soon, active_key="k")
    wait_until_past(soon)
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    assert client.reap() == fenceq.ReapResult(0, 0, 0, 1)
    assert client.get_job(overdue).status == "expired"
    client.submit(queue, "t", active_key="k")  # an expired job holds no key


def test_reap_is_bounded(client):
    client.create_queue("q", backoff_base=timedelta(0))
    client.submit_batch("q", [{"task": "t"} for _ in range(5)])
    claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(5)],
                                lease=timedelta(milliseconds=200))
    wait_until_past(max(c.lease_expires_at for c in claims))
    assert client.reap(max_rows=2).requeued == 2
    assert client.reap(max_rows=10).requeued == 3


def test_purge_deletes_old_terminal_jobs_oldest_first(client, queue):
    ids = client.submit_batch(queue, [{"task": str(i)} for i in range(3)])
    for job_id in ids:
        client.cancel(job_id)
    live = client.submit(queue, "t")
    assert client.purge(timedelta(hours=1)) == 0
    assert client.purge(timedelta(0), max_rows=2) == 2
    assert [client.get_job(i) is None for i in ids] == [True, True, False]
    assert client.purge(timedelta(0)) == 1
    assert client.get_job(live).status == "pending"


def test_purge_keeps_jobs_with_unhandled_dead_letters(client):
    client.create_queue("q", max_attempts=1)
    job_id = client.submit("q", "t")
    token = fenceq.new_claim_token()
    client.fail(client.claim_next(["q"], "w", token).fence, "boom")
    assert client.purge(timedelta(0)) == 0
    dlq_id = client.get_job(job_id).dlq_id
    client.discard_dead_letter(dlq_id)
    assert client.purge(timedelta(0)) == 1
    # The claim ledger went with the job: its token is forgotten too.
    assert client.attempts(job_id) == []
