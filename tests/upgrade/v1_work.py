"""Run by tests/test_upgrade_from_v1.py with version 1's own package on the
path: installs fenceq 1 the way a v1 user did (its `migrate`) and leaves
live work behind, then prints what it made as JSON."""

import json
import sys
from datetime import timedelta

import fenceq
from fenceq.migrate import migrate

url = sys.argv[1]
migrate(url)


def fence_of(claim):
    return {"job_id": claim.job_id, "owner_id": claim.owner_id, "generation": claim.generation,
            "claim_token": claim.claim_token, "queue": claim.queue}


with fenceq.connect(url) as client:
    assert client.version() == "1"
    client.create_queue("work", lease=timedelta(minutes=10))
    client.create_queue("doomed", max_attempts=1)
    owned = client.submit("work", "owned", {"n": 1}, submission_id="sub-owned")
    live = client.claim_next(["work"], "v1-worker", fenceq.new_claim_token())
    assert live.job_id == owned
    client.checkpoint(live.fence, "step", {"done": 1})
    finished = client.submit("work", "finished", submission_id="sub-finished")
    done = client.claim_next(["work"], "v1-worker", fenceq.new_claim_token())
    assert done.job_id == finished and client.complete(done.fence, {"ok": True})
    pending = [client.submit("work", "pending", {"n": n}) for n in range(3)]
    dead = client.submit("doomed", "fails")
    failing = client.claim_next(["doomed"], "v1-worker", fenceq.new_claim_token())
    assert client.fail(failing.fence, "boom", retry=False)
    (letter,) = client.dead_letters()

print(json.dumps({"live": fence_of(live), "done_token": done.claim_token, "finished": finished,
                  "pending": pending, "dead": dead, "dead_token": failing.claim_token,
                  "dlq_id": letter.dlq_id}))
