"""The thin client: validation before dispatch, error mapping, async, caller transactions (§8)."""

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from fenceq.errors import ErrorCode
from helpers import raises_code


@pytest.mark.parametrize("call, code", [
    (lambda c: c.submit("default", "t", priority=True), "QF104"),
    (lambda c: c.submit("default", "t", priority=2**31), "QF104"),
    (lambda c: c.submit("default", "t", max_attempts=0), "QF104"),
    (lambda c: c.submit("default", "t", payload={"x": float("nan")}), "QF103"),
    (lambda c: c.submit("default", "t", payload={"x": float("inf")}), "QF103"),
    (lambda c: c.submit("default", "t", payload={1: "non-string key"}), "QF103"),
    (lambda c: c.submit("default", "t", payload="\x00"), "QF103"),
    (lambda c: c.submit("default", "t", payload="\ud800"), "QF103"),
    (lambda c: c.submit("default", "t", payload={"x": object()}), "QF103"),
    (lambda c: c.submit("default", "t", payload="x" * (1024 * 1024)), "QF103"),
    (lambda c: c.submit("default", "t", run_at=datetime(2030, 1, 1)), "QF105"),
    (lambda c: c.submit("default", "t", expires_at="2030-01-01T00:00:00Z"), "QF105"),
    (lambda c: c.submit("default", ""), "QF102"),
    (lambda c: c.submit("default", "t", submission_id="s" * 256), "QF102"),
    (lambda c: c.submit("default", "t", job_id="j" * 37), "QF102"),
    (lambda c: c.submit("default", "t", active_key=5), "QF102"),
    (lambda c: c.submit("default", "t\x00"), "QF102"),
    (lambda c: c.submit("default", "t", force=1), "QF100"),
    (lambda c: c.submit_batch("default", [{"task": "t", "run_at": "2030-01-01T00:00:00"}]), "QF105"),
    (lambda c: c.submit_batch("default", [{"payload": 1}]), "QF102"),
    (lambda c: c.submit_batch("default", ["not a dict"]), "QF100"),
    (lambda c: c.submit_batch("default", [{"task": "t"}] * 10_001), "QF100"),
    (lambda c: c.claim_next([], "w", "tok"), "QF100"),
    (lambda c: c.claim_next("default", "w", "tok"), "QF100"),
    (lambda c: c.claim_next(["default"], "", "tok"), "QF102"),
    (lambda c: c.claim_next(["default"], "w", "tok", lease=timedelta(0)), "QF105"),
    (lambda c: c.claim_next(["default"], "w", "tok", budget=timedelta(seconds=-1)), "QF105"),
    (lambda c: c.claim_next(["default"], "w", "tok", lease=30), "QF105"),
    (lambda c: c.claim_next(["default"], "w", "tok", lease=timedelta(days=3_000_000)), "QF105"),
    (lambda c: c.purge(timedelta(days=800_000)), "QF105"),
    (lambda c: c.create_queue("q", backoff_max=timedelta(days=999_999_999)), "QF105"),
    (lambda c: c.claim_batch(["default"], "w", []), "QF100"),
    (lambda c: c.heartbeat(fenceq.Fence("j", "w", 0, "t")), "QF106"),
    (lambda c: c.heartbeat(fenceq.Fence("j", "w", True, "t")), "QF106"),
    (lambda c: c.complete(fenceq.Fence("", "w", 1, "t")), "QF106"),
    (lambda c: c.complete(("j", "w", 1, "t")), "QF106"),
    (lambda c: c.complete(fenceq.Fence("j", "w", 1, "t"), {"x": float("nan")}), "QF103"),
    (lambda c: c.complete_batch([fenceq.Fence("j", "w", 1, "t")], [1, 2]), "QF100"),
    (lambda c: c.fail(fenceq.Fence("j", "w", 1, "t"), None), "QF100"),
    (lambda c: c.fail(fenceq.Fence("j", "w", 1, "t"), "e", retry=None), "QF100"),
    (lambda c: c.release(fenceq.Fence("j", "w", 1, "t"), run_at=datetime(2030, 1, 1)), "QF105"),
    (lambda c: c.checkpoint(fenceq.Fence("j", "w", 1, "t"), "", 1), "QF102"),
    (lambda c: c.set_pid(fenceq.Fence("j", "w", 1, "t"), 0), "QF104"),
    (lambda c: c.set_pid(fenceq.Fence("j", "w", 1, "t"), False), "QF104"),
    (lambda c: c.reap(max_rows=0), "QF104"),
    (lambda c: c.cancel(""), "QF102"),
    (lambda c: c.purge(timedelta(seconds=-1)), "QF105"),
    (lambda c: c.replay_dead_letter("ABC"), "QF102"),
    (lambda c: c.discard_dead_letter("g" * 32), "QF102"),
    (lambda c: c.create_queue("q", max_attempts=True), "QF104"),
    (lambda c: c.set_queue_notify("default", "yes"), "QF100"),
])
def test_bad_input_is_refused_with_a_qf_code_and_changes_nothing(client, queue, call, code):
    job_id = client.submit(queue, "t", job_id="existing")
    with raises_code(code) as info:
        call(client)
    assert info.value.code == ErrorCode.CONFIG
    assert info.value.__cause__ is None  # refused before dispatch
    job = client.get_job(job_id)
    assert (job.status, job.generation) == ("pending", 0)
    assert [s.pending for s in client.stats()] == [1]


def test_error_classes_codes_and_reasons(client, queue):
    client.submit(queue, "t", submission_id="s")
    with pytest.raises(fenceq.SubmissionConflict) as info:
        client.submit(queue, "u", submission_id="s")
    error = info.value
    assert (error.code, error.reason, error.sqlstate) == (ErrorCode.QUEUE_SUBMISSION_CONFLICT,
                                                          "fingerprint_mismatch", "QF201")
    assert error.__cause__ is not None  # the driver error is kept
    assert str(error) == "fenceq: the submission id is retained for a different request"
    token = fenceq.new_claim_token()
    client.claim_next([queue], "w", token)
    with pytest.raises(fenceq.ClaimConflict) as info:
        client.claim_next([queue], "w", token)
    assert (info.value.reason, info.value.sqlstate) == ("claim_token_reused", "QF301")
    assert token not in str(info.value)


def test_lost_connection_is_persistence_failed(pg):
    client = pg.connect()
    pid = client._backend._connection.info.backend_pid
    pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(fenceq.PersistenceFailed) as info:
        client.version()
    assert info.value.sqlstate is None and info.value.reason == "unavailable"
    assert info.value.code == ErrorCode.QUEUE_PERSISTENCE_FAILED
    assert pg.url not in str(info.value)


def test_calls_join_the_callers_transaction(pg):
    with pg.connect() as setup:
        setup.create_queue("q")
    with psycopg.connect(pg.url) as conn:
        client = fenceq.connect(connection=conn)
        job_id = client.submit("q", "t")
        conn.rollback()
        assert client.get_job(job_id) is None
        job_id = client.submit("q", "t")
        conn.commit()
    with pg.connect() as other:
        assert other.get_job(job_id).status == "pending"


def test_pool_connections(pg):
    from psycopg_pool import ConnectionPool

    with ConnectionPool(pg.url, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
        client = fenceq.connect(pool=pool)
        client.create_queue("q")
        job_id = client.submit("q", "t")
        assert client.get_job(job_id).task == "t"


async def test_async_client_mirrors_the_sync_one(db):
    async with await db.connect_async() as client:
        assert await client.create_queue("q") is True
        job_id = await client.submit("q", "t", {"n": 1}, submission_id="s")
        assert await client.submit("q", "t", {"n": 1}, submission_id="s") == job_id
        claimed = await client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claimed.job_id == job_id
        assert await client.heartbeat_batch([claimed.fence]) == [True]
        assert await client.complete_batch([claimed.fence], [{"ok": 1}]) == [True]
        assert (await client.get_job(job_id)).result == {"ok": 1}
        with pytest.raises(fenceq.SubmissionConflict):
            await client.submit("q", "t", {"n": 2}, submission_id="s")


def test_batch_fenced_calls_answer_per_element(client, queue):
    client.submit_batch(queue, [{"task": "a"}, {"task": "b"}])
    a, b = client.claim_batch([queue], "w", [fenceq.new_claim_token(), fenceq.new_claim_token()])
    stale = fenceq.Fence(a.job_id, "w", a.generation, "wrong")
    assert client.heartbeat_batch([b.fence, stale, a.fence]) == [True, False, True]
    assert client.complete_batch([b.fence, stale, a.fence], [1, 2, 3]) == [True, False, True]
    assert client.complete_batch([a.fence]) == [False]
    assert (client.get_job(a.job_id).result, client.get_job(b.job_id).result) == (3, 1)
    assert client.complete_batch([]) == []


def test_fence_is_frozen_and_slotted():
    fence = fenceq.Fence("j", "w", 1, "secret-token", "q")
    with pytest.raises(AttributeError):
        fence.generation = 2  # type: ignore[misc]
    assert not hasattr(fence, "__dict__")
    assert "secret-token" not in repr(fence)


def test_timestamps_round_trip_as_aware_utc(client, queue):
    moment = datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=timezone(timedelta(hours=-7)))
    job = client.get_job(client.submit(queue, "t", run_at=moment))
    assert job.run_at == moment and job.run_at.utcoffset() == timedelta(0)


def test_batch_calls_naming_one_job_twice_answer_as_calls_in_order(client, queue):
    client.submit(queue, "t")
    c = client.claim_next([queue], "w", fenceq.new_claim_token())
    stale = fenceq.Fence(c.job_id, "w", c.generation, "not-the-token")
    assert client.heartbeat_batch([stale, c.fence, c.fence]) == [False, True, True]
    assert client.complete_batch([stale, c.fence, c.fence], ["a", "b", "c"]) == [False, True, False]
    assert client.get_job(c.job_id).result == "b"


def test_complete_batch_keeps_every_result_exactly(client, queue):
    results = [12345678901234567890123, 1.5, 0.1, -2, 0.00000025, -1.75, "é\n\"x\\\u0001😀", None, True, False,
               [], {}, {"b": [1.25, 10**25], "a": {"z": None}}, "", 7]
    client.submit_batch(queue, [{"task": "t"} for _ in results])
    claims = client.claim_batch([queue], "w", [fenceq.new_claim_token() for _ in results])
    assert client.complete_batch([c.fence for c in claims], results) == [True] * len(results)
    assert [client.get_job(c.job_id).result for c in claims] == results
