"""Submission fingerprints: golden vectors shared by every backend (docs/guarantees.md §4)."""

import json
from datetime import datetime
from pathlib import Path

import pytest

import fenceq
from fenceq.canonical import canonical_json, fingerprint

GOLDEN = json.loads((Path(__file__).parent / "golden_fingerprints.json").read_text())


def _arguments(request: dict) -> dict:
    args = {k: v for k, v in request.items() if k != "queue"}
    for key in ("run_at", "expires_at"):
        if key in args:
            args[key] = datetime.fromisoformat(args[key].replace("Z", "+00:00"))
    return args


@pytest.mark.parametrize("vector", GOLDEN, ids=[v["request"]["submission_id"] for v in GOLDEN])
def test_python_fingerprint_matches_golden_vector(vector):
    args = _arguments(vector["request"])
    computed = fingerprint(queue=vector["request"]["queue"], task=args["task"], payload=args.get("payload"),
                           submission_id=args["submission_id"], job_id=args.get("job_id"),
                           priority=args.get("priority"), run_at=args.get("run_at"),
                           expires_at=args.get("expires_at"), max_attempts=args.get("max_attempts"),
                           active_key=args.get("active_key"), force=args.get("force", False))
    assert computed == vector["fingerprint"]


def test_backend_stores_the_golden_fingerprints(client, queue):
    for vector in GOLDEN:
        job_id = client.submit(queue, **_arguments(vector["request"]))
        assert client.get_job(job_id).fingerprint == vector["fingerprint"], vector["request"]


def test_canonical_json_spelling():
    assert canonical_json({"b": 1, "a": [1.50, None, True], "é": "\n", "B": 1e16}) == \
        '{"B":10000000000000000,"a":[1.5,null,true],"b":1,"é":"\\n"}'
    assert canonical_json(-0.0) == "0.0"
    assert canonical_json("\x01\x7f\u2028") == '"\\u0001\x7f\u2028"'


def _nested(depth: int) -> object:
    value: object = {"leaf": 1}  # one container
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return value


def test_json_nested_128_deep_is_fingerprinted_and_129_is_refused(client, queue):
    """The depth bound keeps every canonicaliser (client, PostgreSQL) far
    from its recursion limit; PostgreSQL's _fingerprint agrees at the bound."""
    deepest = _nested(128)
    job_id = client.submit(queue, "t", deepest, submission_id="deep")
    job = client.get_job(job_id)
    assert job.payload == deepest
    assert job.fingerprint == fingerprint(queue=queue, task="t", payload=deepest, submission_id="deep",
                                          job_id=None, priority=None, run_at=None, expires_at=None,
                                          max_attempts=None, active_key=None, force=False)
    for call in (lambda: client.submit(queue, "t", _nested(129), submission_id="deeper"),
                 lambda: client.submit_batch(queue, [{"task": "t", "payload": _nested(129)}])):
        with pytest.raises(fenceq.ConfigError) as info:
            call()
        assert info.value.sqlstate == "QF103"
    assert [s.pending for s in client.stats()] == [1]


def test_submit_batch_stores_the_golden_fingerprints(client, queue):
    """A batch stores the fingerprints submit would, whichever path it takes
    (PostgreSQL's set-based owned path serves the vectors without job ids,
    active keys, times or force)."""
    for vector in GOLDEN:
        (job_id,) = client.submit_batch(queue, [_arguments(vector["request"])])
        assert client.get_job(job_id).fingerprint == vector["fingerprint"], vector["request"]


def test_owned_batch_replays_and_conflicts_like_submit(client, queue):
    first = client.submit(queue, "t", {"b": [1, {"z": 2, "a": None}], "a": "é"}, submission_id="s1")
    ids = client.submit_batch(queue, [
        {"task": "t", "payload": {"a": "é", "b": [1, {"a": None, "z": 2}]}, "submission_id": "s1"},  # replay
        {"task": "t", "submission_id": "s2", "priority": 5, "max_attempts": 2},
        {"task": "u"},
        {"task": "t", "submission_id": "s2", "priority": 5, "max_attempts": 2},  # repeated in the batch
    ])
    assert ids[0] == first and ids[1] == ids[3] and len(set(ids)) == 3
    job = client.get_job(ids[1])
    assert (job.priority, job.max_attempts, job.submission_id) == (5, 2, "s2")
    assert client.submit(queue, "t", submission_id="s2", priority=5, max_attempts=2) == ids[1]
    before = [s.pending for s in client.stats()]
    with pytest.raises(fenceq.SubmissionConflict) as info:
        client.submit_batch(queue, [{"task": "t", "submission_id": "s3"},
                                    {"task": "t", "submission_id": "s1"}])  # s1 holds another request
    assert info.value.sqlstate == "QF201" and "index 1" in str(info.value)
    assert [s.pending for s in client.stats()] == before
    assert client.submit(queue, "other", submission_id="s3") != first  # s3 was not retained
