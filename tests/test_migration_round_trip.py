"""Every migration is reversible: up, down, up on every backend; a downgrade
that would lose identities or live claims refuses unless allowed."""

import pytest

import fenceq
from fenceq.errors import FenceqError
from fenceq.migrate import migrate, rollback
from helpers import schema_version, steps_above


def test_up_down_up_round_trip(db):
    assert rollback(db.url) == steps_above(db.backend, 0)
    with pytest.raises(FenceqError):
        with db.connect() as client:
            client.create_queue("gone")
    assert all(check.ok for check in migrate(db.url))
    with db.connect() as client:
        assert client.version() == schema_version(db.backend)
        client.create_queue("q")


@pytest.mark.parametrize("at_risk", ["identity", "live claim"])
def test_downgrade_refuses_to_lose_data_unless_allowed(db, at_risk):
    with db.connect() as client:
        client.create_queue("q")
        if at_risk == "identity":
            job_id = client.submit("q", "t", submission_id="keep-me")
        else:
            job_id = client.submit("q", "t")
            client.claim_next(["q"], "w", fenceq.new_claim_token())
    with pytest.raises(FenceqError) as info:
        rollback(db.url)
    assert info.value.sqlstate == "QF901"
    with db.connect() as client:
        table = "fenceq._jobs" if db.backend == "postgres" else "fenceq__jobs"
        assert db.sql(f"SELECT queue FROM {table} WHERE job_id = '{job_id}'") == [("q",)]  # nothing dropped
        # Each step is its own transaction: v2 -> v1 loses nothing and went
        # through; only the step that would drop the data refused.
        assert client.version() == "1"
    assert rollback(db.url, allow_data_loss=True) == ["0001_fenceq_v1"]
    assert all(check.ok for check in migrate(db.url))
