import fenceq
from helpers import schema_version


def test_submit_claim_complete_round_trip(client, queue):
    job_id = client.submit(queue, "send_email", {"to": "a@example.com"})
    claim = client.claim_next([queue], "worker-1", fenceq.new_claim_token())
    assert claim is not None and claim.job_id == job_id and claim.generation == 1
    assert client.complete(claim.fence, {"sent": True}) is True
    assert client.complete(claim.fence, {"sent": True}) is False
    job = client.get_job(job_id)
    assert job.status == "completed" and job.result == {"sent": True}


def test_schema_verifies(db, client):
    assert all(check.ok for check in client.verify_schema())
    assert client.version() == schema_version(db.backend)
