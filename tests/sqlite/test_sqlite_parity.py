"""SQLite answers as PostgreSQL does: the same QF codes for bad input that
reaches the SQL (past the client's own checks), and the same submission
fingerprints for every request (docs/guarantees.md §4)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fenceq
import fenceq.backends.sqlite
from fenceq import canonical
from fenceq.ops import Arg, Op, submit_request

GOLDEN = json.loads((Path(__file__).parents[1] / "golden_fingerprints.json").read_text())

FENCE = (Arg("job_id", "text", "j"), Arg("owner_id", "text", "w"), Arg("generation", "bigint", 1),
         Arg("claim_token", "text", "t"))
BAD_FENCE = (Arg("job_id", "text", "j"), Arg("owner_id", "text", "w"), Arg("generation", "bigint", 0),
             Arg("claim_token", "text", "t"))


def op(name: str, result: str, *args: Arg) -> Op:
    return Op(name, args, result)


# Operations built by hand, so that the values reach the SQL unchecked.
BAD_INPUT = [
    ("QF102", op("create_queue", "scalar", Arg("queue", "text", ""))),
    ("QF105", op("create_queue", "scalar", Arg("queue", "text", "n"), Arg("lease", "interval", timedelta(0)))),
    ("QF104", op("create_queue", "scalar", Arg("queue", "text", "n"), Arg("backoff_factor", "double", 0.5))),
    ("QF104", op("create_queue", "scalar", Arg("queue", "text", "n"), Arg("max_attempts", "integer", 0))),
    ("QF105", op("create_queue", "scalar", Arg("queue", "text", "n"),
                 Arg("backoff_base", "interval", timedelta(seconds=9)),
                 Arg("backoff_max", "interval", timedelta(seconds=1)))),
    ("QF101", op("alter_queue", "void", Arg("queue", "text", "nope"))),
    ("QF101", op("pause_queue", "scalar", Arg("queue", "text", "nope"))),
    ("QF102", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", ""))),
    ("QF102", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("job_id", "text", "x" * 37))),
    ("QF102", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("active_key", "text", "k" * 256))),
    ("QF104", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("max_attempts", "integer", 0))),
    ("QF101", op("submit", "scalar", Arg("queue", "text", "nope"), Arg("task", "text", "t"))),
    ("QF102", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("depends_on", "text[]", ["x" * 37]))),
    ("QF100", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("depends_on", "text[]", [f"j{i}" for i in range(101)]))),
    ("QF100", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("job_id", "text", "me"), Arg("depends_on", "text[]", ["me"]))),
    ("QF100", op("submit", "scalar", Arg("queue", "text", "q"), Arg("task", "text", "t"),
                 Arg("depends_on", "text[]", ["nowhere"]))),
    ("QF100", op("claim_next", "row", Arg("queues", "text[]", []), Arg("owner_id", "text", "w"),
                 Arg("claim_token", "text", "t"))),
    ("QF102", op("claim_next", "row", Arg("queues", "text[]", [""]), Arg("owner_id", "text", "w"),
                 Arg("claim_token", "text", "t"))),
    ("QF102", op("claim_next", "row", Arg("queues", "text[]", ["q"]), Arg("owner_id", "text", ""),
                 Arg("claim_token", "text", "t"))),
    ("QF101", op("claim_next", "row", Arg("queues", "text[]", ["q", "nope"]), Arg("owner_id", "text", "w"),
                 Arg("claim_token", "text", "t"))),
    ("QF105", op("claim_next", "row", Arg("queues", "text[]", ["q"]), Arg("owner_id", "text", "w"),
                 Arg("claim_token", "text", "t"), Arg("lease", "interval", timedelta(seconds=-1)))),
    ("QF301", op("claim_batch", "rows", Arg("queues", "text[]", ["q"]), Arg("owner_id", "text", "w"),
                 Arg("claim_tokens", "text[]", ["a", "a"]))),
    ("QF102", op("recover_claim", "row", Arg("owner_id", "text", "w"), Arg("claim_token", "text", ""))),
    ("QF106", op("heartbeat", "scalar", *BAD_FENCE)),
    ("QF106", op("complete", "scalar", *BAD_FENCE)),
    ("QF106", op("claim_state", "row", *BAD_FENCE)),
    ("QF100", op("fail", "scalar", *FENCE, Arg("error", "text", None), Arg("retry", "boolean", True))),
    ("QF104", op("set_pid", "scalar", *FENCE, Arg("pid", "integer", 0))),
    ("QF103", op("checkpoint", "scalar", *FENCE, Arg("step", "text", "s"), Arg("value", "jsonb", "null"))),
    ("QF102", op("checkpoint", "scalar", *FENCE, Arg("step", "text", ""), Arg("value", "jsonb", "1"))),
    ("QF100", op("heartbeat_batch", "scalar", Arg("job_ids", "text[]", ["a"]), Arg("owner_ids", "text[]", []),
                 Arg("generations", "bigint[]", [1]), Arg("claim_tokens", "text[]", ["t"]))),
    ("QF106", op("complete_batch", "scalar", Arg("job_ids", "text[]", ["a"]), Arg("owner_ids", "text[]", ["w"]),
                 Arg("generations", "bigint[]", [0]), Arg("claim_tokens", "text[]", ["t"]))),
    ("QF104", op("reap", "row", Arg("max_rows", "integer", 0))),
    ("QF102", op("cancel", "scalar", Arg("job_id", "text", ""), Arg("force", "boolean", False))),
    ("QF105", op("purge", "scalar", Arg("older_than", "interval", timedelta(seconds=-1)))),
    ("QF104", op("purge", "scalar", Arg("older_than", "interval", timedelta(0)), Arg("max_rows", "integer", 0))),
    ("QF102", op("replay_dead_letter", "scalar", Arg("dlq_id", "text", "ABC"))),
    ("QF102", op("discard_dead_letter", "scalar", Arg("dlq_id", "text", "0" * 31))),
    ("QF102", op("get_job", "row", Arg("job_id", "text", "x" * 37))),
]


@pytest.mark.parametrize("sqlstate, bad", BAD_INPUT, ids=[f"{b.name}-{s}" for s, b in BAD_INPUT])
def test_bad_input_gets_the_same_code(client, sqlstate, bad):
    client.create_queue("q")
    with pytest.raises(fenceq.FenceqError) as info:
        client._backend.run(bad)
    assert info.value.sqlstate == sqlstate, str(info.value)
    assert info.value.__cause__ is not None


def test_submit_batch_names_the_failing_index(client):
    client.create_queue("q")
    client.submit("q", "t", submission_id="taken")
    requests = tuple(submit_request(**r) for r in [{"task": "a"}, {"task": "b", "submission_id": "taken"}])
    with pytest.raises(fenceq.SubmissionConflict) as info:
        client._backend.run(Op("submit_batch", (Arg("queue", "text", "q"), Arg("requests", "requests", requests)),
                               "scalar", list))
    assert info.value.sqlstate == "QF201" and "request index 1" in str(info.value)
    assert [s.pending for s in client.stats()] == [1]  # all or nothing


def test_golden_fingerprints_through_submit_batch(client):
    client.create_queue("default")
    requests = [{k: v for k, v in vector["request"].items() if k != "queue"} for vector in GOLDEN]
    for request in requests:
        for key in ("run_at", "expires_at"):
            if key in request:
                request[key] = datetime.fromisoformat(request[key].replace("Z", "+00:00"))
    job_ids = client.submit_batch("default", requests)
    assert [client.get_job(j).fingerprint for j in job_ids] == [v["fingerprint"] for v in GOLDEN]


# Fingerprints: PostgreSQL computes them in SQL, the SQLite path in the client.

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12)
_moments = st.builds(
    lambda moment, minutes: moment.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    st.integers(-14 * 60, 14 * 60))
_int32 = st.integers(-(2**31), 2**31 - 1)
_requests = st.fixed_dictionaries({
    "queue": st.just("fp"), "task": _names, "payload": _json, "submission_id": _names,
    "job_id": st.none() | st.just("job"), "priority": st.none() | _int32,
    "run_at": st.none() | _moments, "expires_at": st.none() | _moments,
    "max_attempts": st.none() | st.integers(1, 2**31 - 1), "active_key": st.none() | _names,
    "concurrency_key": st.none() | _names,
    "force": st.booleans()})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=_requests)
def test_both_backends_store_the_same_fingerprint(pg, sqlite_db, request):
    # One database serves every example: identities must be fresh.
    request = dict(request, submission_id=f"{request['submission_id']}-{uuid.uuid4()}")
    if request["job_id"] is not None:
        request["job_id"] = str(uuid.uuid4())
    if request["active_key"] is not None:
        request["active_key"] = f"{request['active_key']}-{uuid.uuid4()}"
    expected = canonical.fingerprint(**request)
    with psycopg.connect(pg.url, autocommit=True) as conn:
        (in_postgres,) = conn.execute(
            "SELECT fenceq._fingerprint(%(queue)s, %(task)s, %(payload)s::jsonb, %(submission_id)s,"
            " %(job_id)s, %(priority)s, %(run_at)s, %(expires_at)s, %(max_attempts)s, %(active_key)s,"
            " %(force)s, %(concurrency_key)s, NULL)",
            dict(request, payload=canonical.canonical_json(request["payload"]))).fetchone()
    with sqlite_db.connect() as client:
        client.create_queue("fp")
        job_id = client.submit(**request)
        in_sqlite = client.get_job(job_id).fingerprint
    assert in_postgres == expected == in_sqlite


# Any driver: the statement files run with nothing but sqlite3, as
# sql/sqlite/README.md describes.

def run_file(path: str, name: str, params: dict) -> list[dict]:
    text = (Path(__file__).parents[2] / "sql" / "sqlite" / f"{name}.sql").read_text()
    statements, current = [], []
    for line in text.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current))
            current = []
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in statements:
            cursor = conn.execute(statement, params)
            rows = cursor.fetchall()
        answer = [dict(zip([d[0] for d in cursor.description], row)) for row in rows]
        conn.execute("ROLLBACK" if answer and answer[0]["sqlstate"] else "COMMIT")
    return answer



def test_submit_batch_reads_timestamps_with_offsets_as_postgresql_does(sqlite_db):
    path = fenceq.backends.sqlite.database_path(sqlite_db.url)
    assert run_file(path, "create_queue", dict.fromkeys(
        ["queue", "lease", "max_attempts", "backoff_base", "backoff_factor", "backoff_max", "dead_letter",
         "requeue_priority"])
        | {"queue": "q"})[0]["value"] == 1
    spellings = ["2024-05-01T12:00:00+02:00", "2024-05-01 10:00Z", "2024-05-01T10:00:00.5z",
                 "2024-05-01T13:30:00.000001+0330", "2024-05-01T05:00:00-05"]
    requests = json.dumps([{"task": "t", "run_at": text} for text in spellings])
    (answer,) = run_file(path, "submit_batch", {"queue": "q", "requests": requests})
    assert answer["sqlstate"] is None
    with sqlite_db.connect() as client:
        run_ats = [client.get_job(job_id).run_at for job_id in json.loads(answer["value"])]
    utc = datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert run_ats == [utc, utc, utc + timedelta(milliseconds=500), utc + timedelta(microseconds=1), utc]
    for index, bad in enumerate(["2024-02-30T00:00:00Z", "2024-05-01T10:00:00", "2024-05-01T24:00:00Z",
                                 "0000-12-31T23:00:00-02:00", "2024-05-01T10:00:00+16:00"]):
        requests = json.dumps([{"task": "t"}] * index + [{"task": "t", "expires_at": bad}])
        (answer,) = run_file(path, "submit_batch", {"queue": "q", "requests": requests})
        assert (answer["sqlstate"], answer["detail"]) == ("QF105", f"request index {index}"), bad


def test_a_driver_sees_error_rows_not_exceptions_for_malformed_arguments(sqlite_db):
    path = fenceq.backends.sqlite.database_path(sqlite_db.url)
    claim = {"queues": "not json", "owner_id": "w", "claim_token": "t", "lease": None, "budget": None}
    assert run_file(path, "claim_next", claim)[0]["sqlstate"] == "QF100"
    assert run_file(path, "claim_next", claim | {"queues": '["q"]', "owner_id": 7})[0]["sqlstate"] == "QF102"
    assert run_file(path, "claim_next", claim | {"queues": '["q"]', "lease": "30s"})[0]["sqlstate"] == "QF105"
    fence = {"job_ids": '["a"]', "owner_ids": "{}", "generations": "[1]", "claim_tokens": '["t"]', "lease": None}
    assert run_file(path, "heartbeat_batch", fence)[0]["sqlstate"] == "QF100"


def _every_row(path: str) -> dict[str, list[str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name")]
        return {t: sorted(repr(row) for row in conn.execute(f'SELECT * FROM "{t}"')) for t in tables}


def _jobs_for_every_limit(sqlite_db) -> str:
    """Rows each file below would take: pending jobs, an expired claim, a
    completed job and a due schedule."""
    path = fenceq.backends.sqlite.database_path(sqlite_db.url)
    with sqlite_db.connect() as client:
        client.create_queue("q")
        for n in range(4):
            client.submit("q", "t", {"n": n})
        expired = client.claim_next(["q"], "w", fenceq.new_claim_token())
        done = client.claim_next(["q"], "w", fenceq.new_claim_token())
        client.complete(done.fence)
        client.set_schedule("s", "q", "t", "* * * * *")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE fenceq__jobs SET lease_expires_at = 0 WHERE job_id = ?", (expired.job_id,))
        conn.execute("UPDATE fenceq__schedules SET next_run_at = 0")
    return path


# Found by the fuzzer (docs/fuzzing.md): a LIMIT bound from a parameter
# that is not an integer made SQLite raise 'datatype mismatch' before the
# file's guard could stop the statement; the answer is the file's own code.
LIMIT_PARAMETERS = [
    ("purge", {"older_than": 0, "submissions_older_than": None}, "max_rows", "QF104"),
    ("reap", {}, "max_rows", "QF104"),
    ("cancel_matching", {"queue": "q", "task": None, "payload_contains": None, "include_claimed": 1,
                         "force": None}, "max_rows", "QF104"),
    ("tick_due", {}, "max_rows", "QF104"),
]


@pytest.mark.parametrize("bad", ["x", "", 1.5, 2.5, b"\x01"], ids=repr)  # a driver may bind a BLOB
@pytest.mark.parametrize("name, params, limit, sqlstate", LIMIT_PARAMETERS, ids=[p[0] for p in LIMIT_PARAMETERS])
def test_a_limit_that_is_not_an_integer_is_refused_and_changes_nothing(sqlite_db, name, params, limit, sqlstate,
                                                                        bad):
    path = _jobs_for_every_limit(sqlite_db)
    before = _every_row(path)
    (answer,) = run_file(path, name, params | {limit: bad})
    assert answer["sqlstate"] == sqlstate
    assert _every_row(path) == before
    assert run_file(path, name, params | {limit: None})[0]["sqlstate"] is None  # the same call with a good value


@pytest.mark.parametrize("tokens", [None, b"[]", "t-1", 5], ids=repr)
def test_claim_batch_with_claim_tokens_not_an_array_is_refused_and_changes_nothing(sqlite_db, tokens):
    path = _jobs_for_every_limit(sqlite_db)
    before = _every_row(path)
    claim = {"queues": '["q"]', "owner_id": "w", "claim_tokens": tokens, "lease": None, "budget": None}
    (answer,) = run_file(path, "claim_batch", claim)
    assert answer["sqlstate"] == "QF100"
    assert _every_row(path) == before
    assert run_file(path, "claim_batch", claim | {"claim_tokens": '["t-1"]'})[0]["sqlstate"] is None


@pytest.mark.parametrize("ticks", ['["s"]', '["s", true]', '["s", {"schedule": "s"}]'])
def test_tick_with_an_element_that_is_not_an_object_is_refused_and_changes_nothing(sqlite_db, ticks):
    """Found by the fuzzer: a string element was read as JSON ('malformed JSON')."""
    path = _jobs_for_every_limit(sqlite_db)
    before = _every_row(path)
    (answer,) = run_file(path, "tick", {"max_rows": 10, "ticks": ticks})
    assert answer["sqlstate"] == "QF100"
    assert _every_row(path) == before
