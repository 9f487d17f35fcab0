"""Run by tests/sqlite/test_sqlite_upgrade_v5.py with version 4's own package
on the path (its statement files need a file at version 4).

    v4_sqlite_work.py make URL        migrate to version 4 and leave work in
                                      every pending state and a live claim;
                                      print what it made as JSON
    v4_sqlite_work.py check URL JSON  after a rollback to version 4: the
                                      live claim still heartbeats, nothing is
                                      claimed early; print next_due
"""

import json
import sys
from datetime import datetime, timedelta, timezone

import fenceq
from fenceq.migrate import migrate

mode, url = sys.argv[1], sys.argv[2]


def fence_of(claim):
    return {"job_id": claim.job_id, "owner_id": claim.owner_id, "generation": claim.generation,
            "claim_token": claim.claim_token, "queue": claim.queue}


if mode == "make":
    migrate(url)
    later_at = datetime.now(timezone.utc) + timedelta(hours=1)
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        client.create_queue("q", backoff_base=timedelta(hours=1))
        parent = client.submit("q", "parent", priority=9)
        retried = client.submit("q", "retried", priority=8)
        running = client.submit("q", "running", priority=7)
        due = client.submit("q", "due")
        later = client.submit("q", "later", submission_id="s-later", run_at=later_at)
        child = client.submit("q", "child", depends_on=[parent])
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claim.job_id == parent
        backing_off = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert backing_off.job_id == retried and client.fail(backing_off.fence, "boom")  # an hour of back-off
        live = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert live.job_id == running
    print(json.dumps({"parent": fence_of(claim), "live": fence_of(live), "retried": retried, "due": due,
                      "later": later, "later_at": later_at.isoformat(), "child": child}))
else:
    made = json.loads(sys.argv[3])
    with fenceq.connect(url) as client:
        assert client.version() == "4"
        assert client.heartbeat(fenceq.Fence(**made["live"]))
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None, "nothing is due"
        print(json.dumps({"next_due": client.next_due(["q"]).isoformat()}))
