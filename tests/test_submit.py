"""Producers: submit, submit_batch, submission identity, active keys (docs/guarantees.md §3-§5)."""

from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from helpers import claim, raises_code


def test_submit_generates_uuid_job_ids_and_applies_queue_defaults(client):
    client.create_queue("q", max_attempts=4)
    job = client.get_job(client.submit("q", "t"))
    assert len(job.job_id) == 36 and job.status == "pending"
    assert job.max_attempts == 4 and job.priority == 0 and job.generation == 0 and job.attempts == 0
    assert job.submission_id is None and job.fingerprint is None


def test_explicit_job_id_is_kept_and_reserved(client, queue):
    assert client.submit(queue, "t", job_id="job-1") == "job-1"
    with raises_code("QF203"):
        client.submit(queue, "t", job_id="job-1")


def test_exact_replay_returns_the_original_id(client, queue):
    first = client.submit(queue, "t", {"a": 1, "b": [1, 2]}, submission_id="sub-1", priority=3)
    again = client.submit(queue, "t", {"b": [1, 2], "a": 1}, submission_id="sub-1", priority=3)
    assert again == first
    job = client.get_job(first)
    assert job.fingerprint.startswith("fq1:") and len(job.fingerprint) == 68


@pytest.mark.parametrize("change", [
    {"payload": {"a": 2}}, {"task": "other"}, {"priority": 4}, {"job_id": None},
    {"max_attempts": 2}, {"active_key": "k"}, {"force": True},
    {"run_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
])
def test_changed_request_under_same_id_conflicts_and_changes_nothing(client, queue, change):
    request = dict(task="t", payload={"a": 1}, submission_id="sub-1", job_id="j-1", priority=3)
    client.submit(queue, **request)
    with raises_code("QF201"):
        client.submit(queue, **{**request, **change})
    assert [s.pending for s in client.stats()] == [1]


def test_generated_job_id_filled_back_in_conflicts(client, queue):
    job_id = client.submit(queue, "t", submission_id="sub-1")
    with raises_code("QF201"):
        client.submit(queue, "t", submission_id="sub-1", job_id=job_id)


def test_null_payload_and_json_null_are_the_same_request(client, queue):
    first = client.submit(queue, "t", None, submission_id="s")
    assert client.submit(queue, "t", submission_id="s") == first


def test_equal_instants_with_other_offsets_replay(client, queue):
    utc = datetime(2030, 5, 1, 12, 0, tzinfo=timezone.utc)
    plus2 = utc.astimezone(timezone(timedelta(hours=2)))
    first = client.submit(queue, "t", submission_id="s", run_at=utc)
    assert client.submit(queue, "t", submission_id="s", run_at=plus2) == first


@pytest.mark.parametrize("ending", ["complete", "fail", "cancel", "purge"])
def test_replay_after_the_job_ended(client, queue, ending):
    client.alter_queue(queue, max_attempts=1)
    job_id = client.submit(queue, "t", {"x": 1}, submission_id="sub-9")
    if ending == "cancel":
        client.cancel(job_id)
    else:
        c = claim(client, queue)
        if ending == "fail":
            assert client.fail(c.fence, "boom", retry=False)
        else:
            assert client.complete(c.fence)
    if ending == "purge":
        assert client.purge(timedelta(0)) == 1
        assert client.get_job(job_id) is None
    assert client.submit(queue, "t", {"x": 1}, submission_id="sub-9") == job_id
    with raises_code("QF201"):
        client.submit(queue, "t", {"x": 2}, submission_id="sub-9")


def test_purged_job_id_stays_reserved(client, queue):
    job_id = client.submit(queue, "t", submission_id="s", job_id="fixed")
    client.cancel(job_id)
    client.purge(timedelta(0))
    with raises_code("QF203"):
        client.submit(queue, "t", job_id="fixed")


def test_purge_can_forget_identities(client, queue):
    job_id = client.submit(queue, "t", submission_id="s")
    client.cancel(job_id)
    assert client.purge(timedelta(0), submissions_older_than=timedelta(0)) == 1
    assert client.submit(queue, "t", submission_id="s") != job_id


def test_refused_submission_stores_no_identity(client, queue):
    client.submit(queue, "t", active_key="k")
    with raises_code("QF202"):
        client.submit(queue, "t", submission_id="s", active_key="k")
    # The identity was not kept: a different request under it is accepted.
    client.submit(queue, "other", submission_id="s")


def test_active_key_allows_one_active_job(client, queue):
    first = client.submit(queue, "t", active_key="user-1")
    with raises_code("QF202"):
        client.submit(queue, "t", active_key="user-1")
    client.submit(queue, "t", active_key="user-2")
    client.submit("default", "t", active_key="user-3")
    c = claim(client, queue)
    assert c.job_id == first
    with raises_code("QF202"):
        client.submit(queue, "t", active_key="user-1")
    assert client.complete(c.fence)
    client.submit(queue, "t", active_key="user-1")  # a terminal predecessor holds no key


def test_force_replaces_an_active_predecessor_and_kills_its_fence(client, queue):
    first = client.submit(queue, "t", active_key="k")
    c = claim(client, queue)
    second = client.submit(queue, "t", active_key="k", force=True, submission_id="force-1")
    assert client.get_job(first).status == "cancelled"
    assert client.complete(c.fence) is False
    assert client.heartbeat(c.fence) is False
    # Retrying the old force request returns its id and cancels nothing.
    assert client.submit(queue, "t", active_key="k", force=True, submission_id="force-1") == second
    assert client.get_job(second).status == "pending"


def test_submit_batch_returns_ids_in_order(client, queue):
    ids = client.submit_batch(queue, [{"task": "a", "priority": 1}, {"task": "b", "job_id": "jb"},
                                      {"task": "c", "submission_id": "s"}])
    assert ids[1] == "jb" and len(set(ids)) == 3
    assert [client.get_job(i).task for i in ids] == ["a", "b", "c"]


def test_plain_submit_batch_stores_what_submit_would(client, queue):
    """Plain requests (task and payload only) take one INSERT on PostgreSQL;
    the rows must be those submit would write, claimed in input order."""
    client.create_queue("plain", max_attempts=7)
    ids = client.submit_batch("plain", [{"task": "a", "payload": {"n": 1}}, {"task": "b", "payload": None},
                                        {"task": "c"}])
    single = client.get_job(client.submit("plain", "d", {"n": 1}))
    jobs = [client.get_job(i) for i in ids]
    assert [(j.task, j.payload) for j in jobs] == [("a", {"n": 1}), ("b", None), ("c", None)]
    for job in jobs:
        assert (job.status, job.priority, job.max_attempts, job.attempts, job.generation, job.submission_id) == \
            (single.status, single.priority, single.max_attempts, 0, 0, None) == ("pending", 0, 7, 0, 0, None)
    claimed = [client.claim_next(["plain"], "w", fenceq.new_claim_token()).job_id for _ in range(4)]
    assert claimed == ids + [single.job_id]


def test_plain_submit_batch_with_a_bad_element_names_it_and_stores_nothing(client, queue):
    with raises_code("QF102") as info:
        client.submit_batch(queue, [{"task": "a"}, {"task": "x" * 256}, {"task": "c"}])
    assert "index 1" in str(info.value)
    assert [s.pending for s in client.stats()] == [0]


def test_submit_batch_repeats_inside_one_batch(client, queue):
    ids = client.submit_batch(queue, [{"task": "a", "submission_id": "s"}, {"task": "a", "submission_id": "s"}])
    assert ids[0] == ids[1]
    with raises_code("QF201") as info:
        client.submit_batch(queue, [{"task": "x", "submission_id": "z"}, {"task": "y", "submission_id": "z"}])
    assert "index 1" in str(info.value)
    with raises_code("QF202"):
        client.submit_batch(queue, [{"task": "a", "active_key": "k"}, {"task": "b", "active_key": "k"}])
    forced = client.submit_batch(queue, [{"task": "a", "active_key": "k2"},
                                         {"task": "b", "active_key": "k2", "force": True}])
    assert [client.get_job(i).status for i in forced] == ["cancelled", "pending"]


def test_submit_batch_is_all_or_nothing(client, queue):
    client.submit(queue, "t", job_id="taken")
    with raises_code("QF203") as info:
        client.submit_batch(queue, [{"task": "a"}, {"task": "b"}, {"task": "c", "job_id": "taken"}])
    assert "index 2" in str(info.value)
    assert [s.pending for s in client.stats()] == [1]


def test_submit_batch_refuses_unknown_keys(client, queue):
    with raises_code("QF100"):
        client.submit_batch(queue, [{"task": "a", "colour": "red"}])


def test_request_dicts_are_snapshotted(client, queue):
    payload = {"n": 1}
    request = {"task": "a", "payload": payload, "submission_id": "snap"}
    ids = client.submit_batch(queue, [request])
    payload["n"] = 2
    assert client.get_job(ids[0]).payload == {"n": 1}
    request["payload"] = {"n": 1}
    assert client.submit_batch(queue, [request]) == ids


def test_run_at_in_the_future_is_not_claimed_yet(client, queue):
    client.submit(queue, "later", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    assert client.claim_next([queue], "w", fenceq.new_claim_token()) is None
    assert [(s.pending, s.due) for s in client.stats()] == [(1, 0)]


def test_a_generated_job_id_that_collides_is_refused_whole(pg):
    """Forced by making the generator constant: the submission identity is
    not retained for a job it does not name (PostgreSQL)."""
    pg.sql("CREATE OR REPLACE FUNCTION fenceq._new_job_id() RETURNS text LANGUAGE sql VOLATILE"
           " RETURN '00000000-0000-7000-8000-000000000000'")
    with pg.connect() as client:
        client.create_queue("q")
        first = client.submit("q", "first")
        with raises_code("QF203"):
            client.submit("q", "second", submission_id="S")
        with raises_code("QF203"):
            client.submit_batch("q", [{"task": "a", "submission_id": "A"}, {"task": "b", "submission_id": "B"}])
        assert pg.sql("SELECT count(*) FROM fenceq._submissions") == [(0,)]
        assert [j.job_id for j in [client.get_job(first)]] == [first]
