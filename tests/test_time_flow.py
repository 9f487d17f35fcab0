"""next_due, extend and cancel_matching (docs/guarantees.md §13), on both
engines: what each answers, the bounds on its input (a QF code and nothing
changed), and on PostgreSQL the notifications, the row locks and the grants."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from fenceq.ops import Arg, Op, Shape
from helpers import claim, raises_code
from test_pg_roles import login  # noqa: F401 - the fixture

PATIENCE = 60.0  # seconds: bounds a failure only


def jobs_table(db) -> str:
    return "fenceq._jobs" if db.backend == "postgres" else "fenceq__jobs"


def unchecked(client, name: str, shape: Shape, *args: Arg):
    """Run an operation built by hand, so that its values reach the SQL
    without the client's own checks."""
    return client._backend.run(Op(name, args, shape))


def fence_args(fence: fenceq.Fence) -> tuple[Arg, ...]:
    return (Arg("job_id", "text", fence.job_id), Arg("owner_id", "text", fence.owner_id),
            Arg("generation", "bigint", fence.generation), Arg("claim_token", "text", fence.claim_token))


def snapshot(client, job_ids):
    return [client.get_job(j) for j in job_ids]


# next_due ---------------------------------------------------------------------

def test_next_due_is_null_without_pending_work(client, queue):
    assert client.next_due([queue]) is None
    client.submit(queue, "t")
    done = claim(client, queue)
    assert client.next_due([queue]) is None, "a claimed job is not due"
    client.complete(done.fence)
    assert client.next_due([queue]) is None, "nor a finished one"


def test_next_due_is_the_earliest_run_at_whatever_its_priority(client, queue):
    now = datetime.now(timezone.utc)
    client.create_queue("other")
    client.submit(queue, "t", run_at=now + timedelta(hours=3), priority=9)
    earliest = now + timedelta(hours=2, microseconds=123456)
    client.submit(queue, "t", run_at=earliest, priority=-5)
    client.submit(queue, "t", run_at=now + timedelta(hours=4), priority=0)
    assert client.next_due([queue]) == earliest
    sooner = now + timedelta(hours=1)
    client.submit("other", "t", run_at=sooner, priority=100)
    assert client.next_due([queue, "other"]) == sooner
    assert client.next_due([queue]) == earliest


def test_next_due_is_in_the_past_when_a_job_is_due_now(client, queue):
    client.submit(queue, "t", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    job_id = client.submit(queue, "t")
    assert client.next_due([queue]) == client.get_job(job_id).run_at <= datetime.now(timezone.utc)


def test_next_due_reads_past_many_priority_levels(client, queue):
    """More distinct priorities than the levels read one by one: the rest of
    the queue is still read."""
    now = datetime.now(timezone.utc)
    for level in range(40):
        client.submit(queue, "t", run_at=now + timedelta(hours=100 - level), priority=level)
    earliest = now + timedelta(minutes=5)
    client.submit(queue, "t", run_at=earliest, priority=-1000)
    assert client.next_due([queue]) == earliest
    client.submit(queue, "t", run_at=earliest - timedelta(minutes=1), priority=3)
    assert client.next_due([queue]) == earliest - timedelta(minutes=1)


def test_next_due_leaves_out_paused_queues_expired_jobs_and_jobs_never_due(db, client, queue):
    now = datetime.now(timezone.utc)
    client.create_queue("paused")
    client.submit("paused", "t", run_at=now + timedelta(minutes=1))
    client.pause_queue("paused")
    assert client.next_due(["paused"]) is None
    client.submit(queue, "t", run_at=now - timedelta(minutes=1), expires_at=now - timedelta(seconds=1))
    assert client.next_due([queue, "paused"]) is None, "expired, though not reaped yet"
    waiting = client.submit(queue, "t")
    never = "'infinity'" if db.backend == "postgres" else "9223372036854775807"
    db.sql(f"UPDATE {jobs_table(db)} SET run_at = {never} WHERE job_id = '{waiting}'")
    assert client.next_due([queue]) is None, "a job that waits for something else is never due"
    later = client.submit(queue, "t", run_at=now + timedelta(hours=1))
    assert client.next_due([queue]) == client.get_job(later).run_at
    client.resume_queue("paused")
    assert client.next_due([queue, "paused"]) == now + timedelta(minutes=1)


@pytest.mark.parametrize("queues, code", [([], "QF100"), ([""], "QF102"), (["nope"], "QF101"),
                                          (["default", "nope"], "QF101")])
def test_next_due_refuses_bad_queues(client, queue, queues, code):
    with raises_code(code):
        client.next_due(queues)
    with raises_code(code):
        unchecked(client, "next_due", Shape.SCALAR, Arg("queues", "text[]", queues))


async def test_the_async_client_has_the_same_methods(db, queue):
    aclient = await db.connect_async()
    try:
        job_id = await aclient.submit(queue, "t", {"k": 1}, run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        assert await aclient.next_due([queue]) == (await aclient.get_job(job_id)).run_at
        assert await aclient.cancel_matching(queue, payload_contains={"k": 1}) == 1
        await aclient.submit(queue, "t")
        fence = (await aclient.claim_next([queue], "w", fenceq.new_claim_token())).fence
        assert await aclient.extend(fence, timedelta(minutes=5)) is True
    finally:
        await aclient.close()


# extend -----------------------------------------------------------------------

def test_extend_grows_the_budget_and_never_shrinks_it(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue, budget=timedelta(seconds=10))
    assert client.extend(c.fence, timedelta(hours=1)) is True
    grown = client.get_job(c.job_id).budget_expires_at
    assert grown >= c.budget_expires_at + timedelta(minutes=59)
    assert client.extend(c.fence, timedelta(seconds=1)) is True, "live: a shorter budget is no error"
    assert client.get_job(c.job_id).budget_expires_at == grown, "and takes nothing away"


def test_extend_sets_a_budget_on_a_claim_without_one_and_clamps_the_lease_to_it(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)  # the queue's lease: 30 s
    assert c.budget_expires_at is None
    assert client.extend(c.fence, timedelta(seconds=5)) is True
    job = client.get_job(c.job_id)
    assert job.budget_expires_at is not None and job.lease_expires_at == job.budget_expires_at
    assert job.budget_expires_at < c.lease_expires_at


def test_extend_renews_the_lease_as_a_heartbeat_would(db, client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    # Bring the lease closer, still live: a renewal must move it on again.
    if db.backend == "postgres":
        db.sql("UPDATE fenceq._jobs SET lease_expires_at = clock_timestamp() + interval '5 seconds'")
    else:
        db.sql("UPDATE fenceq__jobs SET lease_expires_at = lease_expires_at - 25000000")
    shortened = client.get_job(c.job_id).lease_expires_at
    assert client.extend(c.fence, timedelta(hours=1)) is True
    job = client.get_job(c.job_id)
    assert job.lease_expires_at > shortened + timedelta(seconds=20)
    assert job.lease_expires_at < job.budget_expires_at


def test_extend_is_false_for_a_fence_that_is_not_live(client, queue):
    client.submit(queue, "t")
    old = claim(client, queue)
    assert client.release(old.fence)
    new = claim(client, queue, owner="worker-2")
    assert new.generation == old.generation + 1
    assert client.extend(old.fence, timedelta(hours=1)) is False, "a later generation holds the job"
    assert client.get_job(new.job_id).budget_expires_at is None, "nothing changed"
    assert client.complete(new.fence)
    assert client.extend(new.fence, timedelta(hours=1)) is False, "terminal"
    assert client.get_job(new.job_id).budget_expires_at is None


def test_extend_of_a_cancel_requested_claim_is_allowed_as_a_heartbeat_is(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.cancel(c.job_id) == "cancel_requested"
    assert client.extend(c.fence, timedelta(minutes=1)) is True


@pytest.mark.parametrize("budget, code", [(None, "QF100"), (timedelta(0), "QF105"),
                                          (timedelta(seconds=-1), "QF105")])
def test_extend_refuses_a_bad_budget_and_changes_nothing(client, queue, budget, code):
    client.submit(queue, "t")
    c = claim(client, queue, budget=timedelta(minutes=1))
    before = snapshot(client, [c.job_id])
    with raises_code(code):
        client.extend(c.fence, budget)
    with raises_code(code):
        unchecked(client, "extend", Shape.SCALAR, *fence_args(c.fence), Arg("budget", "interval", budget))
    assert snapshot(client, [c.job_id]) == before


def test_extend_refuses_a_malformed_fence(client, queue):
    client.submit(queue, "t")
    c = claim(client, queue)
    bad = (Arg("job_id", "text", c.job_id), Arg("owner_id", "text", c.owner_id), Arg("generation", "bigint", 0),
           Arg("claim_token", "text", c.claim_token))
    with raises_code("QF106"):
        unchecked(client, "extend", Shape.SCALAR, *bad, Arg("budget", "interval", timedelta(minutes=1)))
    assert client.get_job(c.job_id).budget_expires_at is None


# cancel_matching ----------------------------------------------------------------

def statuses(client, job_ids):
    return [client.get_job(j).status for j in job_ids]


def test_cancel_matching_filters_by_task_and_payload(client, queue):
    client.create_queue("other")
    ids = [client.submit(queue, "mail", {"tenant": "a", "n": 1}),
           client.submit(queue, "mail", {"tenant": "b"}),
           client.submit(queue, "sms", {"tenant": "a"}),
           client.submit(queue, "mail", {"tenant": "a", "tags": ["x", "y"]}),
           client.submit(queue, "mail"),
           client.submit("other", "mail", {"tenant": "a"})]
    assert client.cancel_matching(queue, task="mail", payload_contains={"tenant": "a"}) == 2
    assert statuses(client, ids) == ["cancelled", "pending", "pending", "cancelled", "pending", "pending"]
    assert client.cancel_matching(queue, payload_contains={"tags": ["y"]}) == 0, "already cancelled"
    assert client.cancel_matching(queue, task="sms") == 1
    assert client.cancel_matching(queue) == 2, "no filter: the rest of the queue"
    assert statuses(client, ids)[-1] == "pending", "another queue is untouched"


# (payload, payload_contains, matches): jsonb @> on PostgreSQL, and the same
# answers from SQLite's statement file.
CONTAINMENT = [
    ({"a": 1, "b": 2}, {"a": 1}, True),
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ({"a": {"b": {"c": 1}, "d": 2}}, {"a": {"b": {}}}, True),
    ({"a": {"b": 1}}, {"a": {"b": "1"}}, False),
    ({"a": [1, 2, 3]}, {"a": [3, 1, 1]}, True),
    ({"a": [1, 2, 3]}, {"a": [4]}, False),
    ({"a": [1, 2]}, {"a": 1}, False),
    ({"a": 1}, {"a": [1]}, False),
    ({"a": [[1], 2]}, {"a": [1]}, False),
    ({"a": [{"b": 1}]}, {"a": []}, True),
    ({"a": 1.0}, {"a": 1}, True),
    ({"a": 1.5}, {"a": 1}, False),
    ({"a": True}, {"a": True}, True),
    ({"a": False}, {"a": True}, False),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {"a": False}, False),
    ({"a": "x"}, {"a": "X"}, False),
    ({"a": "\u00e9"}, {"a": "e\u0301"}, False),
    ({"a.b": 1}, {"a": {"b": 1}}, False),
    ({"a": {"b": 1}}, {"a.b": 1}, False),
    ({'q"k': 1, "": 2}, {'q"k': 1, "": 2}, True),
    ([1, 2, "x"], ["x", 1], True),
    ([1, 2], {}, False),
    ({"a": 1}, {}, True),
    ([{"a": 1}], {"a": 1}, False),
    (None, {}, False),
    ("s", ["s"], False),
    (5, [], False),
]


def test_payload_containment_is_jsonb_containment(client):
    wrong = []
    for case, (payload, contained, matches) in enumerate(CONTAINMENT):
        queue = f"containment-{case}"  # one queue per case: each cancel sees its own job only
        client.create_queue(queue)
        job_id = client.submit(queue, "t", payload)
        answered = client.cancel_matching(queue, payload_contains=contained)
        if (answered, client.get_job(job_id).status) != (int(matches), "cancelled" if matches else "pending"):
            wrong.append((case, payload, contained, matches))
    assert wrong == []


def test_an_object_inside_an_array_is_matched_on_postgresql_and_refused_on_sqlite(db, client, queue):
    job_id = client.submit(queue, "t", {"items": [{"sku": 1, "n": 2}, {"sku": 7}]})
    if db.backend == "postgres":
        assert client.cancel_matching(queue, payload_contains={"items": [{"sku": 7}]}) == 1
    else:
        with raises_code("QF100"):
            client.cancel_matching(queue, payload_contains={"items": [{"sku": 7}]})
        assert client.get_job(job_id).status == "pending"


def test_claimed_jobs_are_left_alone_unless_included(client, queue):
    client.submit(queue, "t")
    pending = client.submit(queue, "t")
    held = claim(client, queue)  # the older one
    assert client.cancel_matching(queue) == 1
    assert client.get_job(pending).status == "cancelled"
    assert client.get_job(held.job_id).status == "claimed"
    assert client.cancel_matching(queue, include_claimed=True) == 1
    job = client.get_job(held.job_id)
    assert (job.status, job.cancel_requested) == ("claimed", True)
    assert client.cancel_matching(queue, include_claimed=True) == 0, "already requested: nothing changes"
    assert client.heartbeat(held.fence), "a requested cancel leaves the fence live"
    assert client.acknowledge_cancel(held.fence)


def test_force_kills_the_fence_of_a_claimed_job(client, queue):
    client.submit(queue, "t", {"k": 1})
    held = claim(client, queue)
    assert client.cancel_matching(queue, payload_contains={"k": 1}, include_claimed=True, force=True) == 1
    assert client.get_job(held.job_id).status == "cancelled"
    assert client.heartbeat(held.fence) is False, "a stale heartbeat after force is refused"
    assert client.complete(held.fence) is False
    assert client.cancel_matching(queue, include_claimed=True, force=True) == 0


def test_force_cancels_a_cancel_requested_claim(client, queue):
    client.submit(queue, "t")
    held = claim(client, queue)
    client.cancel(held.job_id)
    assert client.cancel_matching(queue, include_claimed=True) == 0
    assert client.cancel_matching(queue, include_claimed=True, force=True) == 1
    assert client.get_job(held.job_id).status == "cancelled"


def test_max_rows_cancels_the_oldest_first(client, queue):
    ids = [client.submit(queue, "t", priority=p) for p in (0, 9, 0, 5, 0)]
    assert client.cancel_matching(queue, max_rows=2) == 2
    assert statuses(client, ids) == ["cancelled", "cancelled", "pending", "pending", "pending"]
    assert client.cancel_matching(queue, max_rows=2) == 2
    assert client.cancel_matching(queue, max_rows=2) == 1
    assert client.cancel_matching(queue, max_rows=2) == 0


@pytest.mark.parametrize("arguments, code", [
    ({"queue": ""}, "QF102"),
    ({"queue": "nope"}, "QF101"),
    ({"task": ""}, "QF102"),
    ({"payload_contains": "1"}, "QF100"),
    ({"payload_contains": '"tenant"'}, "QF100"),
    ({"payload_contains": "null"}, "QF100"),
    ({"include_claimed": False, "force": True}, "QF100"),
    ({"max_rows": 0}, "QF104"),
    ({"max_rows": 100001}, "QF104"),
], ids=lambda value: str(value))
def test_cancel_matching_refuses_bad_input_and_changes_nothing(client, queue, arguments, code):
    ids = [client.submit(queue, "t", {"n": 1}), client.submit(queue, "t")]
    held = claim(client, queue)
    before = snapshot(client, ids)
    values = {"queue": queue, "task": None, "payload_contains": None, "include_claimed": True, "force": False,
              "max_rows": 10, **arguments}
    kinds = {"queue": "text", "task": "text", "payload_contains": "jsonb", "include_claimed": "boolean",
             "force": "boolean", "max_rows": "integer"}
    with raises_code(code):
        unchecked(client, "cancel_matching", Shape.SCALAR,
                  *(Arg(name, kinds[name], value) for name, value in values.items()))
    assert snapshot(client, ids) == before and client.heartbeat(held.fence)


@pytest.mark.parametrize("arguments, code", [
    ({"payload_contains": 1}, "QF100"), ({"payload_contains": "x"}, "QF100"),
    ({"force": True}, "QF100"), ({"max_rows": 0}, "QF104"), ({"max_rows": None}, "QF104"),
    ({"include_claimed": 1}, "QF100"), ({"payload_contains": {"a": float("nan")}}, "QF103"),
], ids=lambda value: str(value))
def test_the_client_refuses_what_the_sql_would(client, queue, arguments, code):
    with raises_code(code):
        client.cancel_matching(queue, **arguments)


# PostgreSQL: notifications, row locks, grants ----------------------------------

def test_cancel_matching_notifies_each_claimed_job_it_touched(pg):
    with pg.connect() as client, psycopg.connect(pg.url, autocommit=True) as listener:
        client.create_queue("q")
        client.submit("q", "t")
        client.submit("q", "t")
        client.submit("q", "t")
        first, second, requested = claim(client, "q"), claim(client, "q"), claim(client, "q")
        client.cancel(requested.job_id)
        pending = client.submit("q", "t")
        listener.execute("LISTEN fenceq_control")
        assert client.cancel_matching("q", include_claimed=True) == 3
        notes = {(n.channel, n.payload) for n in listener.notifies(timeout=0.5, stop_after=10)}
        assert notes == {("fenceq_control", first.job_id), ("fenceq_control", second.job_id)}
        assert client.get_job(pending).status == "cancelled"


def _waiting_on_a_lock(pg, application_name: str) -> bool:
    rows = pg.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                  (application_name,))
    return rows[0][0] == 1


@pytest.mark.parametrize("include_claimed", [True, False])
def test_cancel_matching_waits_for_a_job_being_claimed_and_judges_it_after(pg, include_claimed):
    """A claim in flight holds the job's row: the bulk cancel waits for it
    rather than skip the job, then judges the row as the claim left it."""
    with pg.connect() as client:
        client.create_queue("q")
        job_id = client.submit("q", "t")
    claimer = psycopg.connect(pg.url)  # a transaction left open: the claim holds the row
    claimed = claimer.execute("SELECT job_id, generation FROM fenceq.claim_next('{q}', 'w', 'nonce-in-flight')"
                              ).fetchone()
    assert claimed == (job_id, 1)
    answers = []
    name = f"cancel-{include_claimed}"
    canceller = threading.Thread(target=lambda: answers.append(
        _cancel_matching_as(pg.url, name, include_claimed)))
    canceller.start()
    try:
        deadline = time.monotonic() + PATIENCE
        while not _waiting_on_a_lock(pg, name):
            assert time.monotonic() < deadline, "cancel_matching never waited for the claimed row"
            time.sleep(0.01)
        assert answers == [], "it waits"
    finally:
        claimer.commit()
        claimer.close()
        canceller.join(60)
    with pg.connect() as client:
        job = client.get_job(job_id)
    if include_claimed:
        assert answers == [1] and (job.status, job.generation, job.cancel_requested) == ("claimed", 1, True)
    else:
        assert answers == [0] and (job.status, job.cancel_requested) == ("claimed", False)


def _cancel_matching_as(url: str, application_name: str, include_claimed: bool) -> int:
    with psycopg.connect(url, autocommit=True, application_name=application_name) as conn:
        return conn.execute("SELECT fenceq.cancel_matching('q', include_claimed => %s)", (include_claimed,)
                            ).fetchone()[0]


def test_only_admins_cancel_matching_and_workers_use_next_due_and_extend(pg, login):  # noqa: F811
    with pg.connect() as admin:
        admin.create_queue("q")
        admin.submit("q", "t")
        admin.submit("q", "t", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    with fenceq.connect(login("fenceq_worker")) as worker:
        c = claim(worker, "q")
        assert worker.extend(c.fence, timedelta(minutes=1)) is True
        assert worker.next_due(["q"]) is not None
        with raises_code("42501"):
            worker.cancel_matching("q")
    with fenceq.connect(login("fenceq_producer")) as producer:
        for forbidden in (lambda: producer.cancel_matching("q"), lambda: producer.next_due(["q"]),
                          lambda: producer.extend(c.fence, timedelta(minutes=1))):
            with raises_code("42501"):
                forbidden()
    with fenceq.connect(login("fenceq_admin")) as admin:
        assert admin.cancel_matching("q", include_claimed=True) == 2


@pytest.mark.parametrize("statement, code", [
    ("SELECT fenceq.next_due(NULL)", "QF100"),
    ("SELECT fenceq.next_due('{{q},{r}}')", "QF102"),
    ("SELECT fenceq.extend('job-1', 'w', 1, 'nonce-secret', NULL)", "QF100"),
    ("SELECT fenceq.extend('job-1', 'w', 1, 'nonce-secret', '2 days')", "QF105"),
    ("SELECT fenceq.extend('job-1', 'w', 0, 'nonce-secret', '1 minute')", "QF106"),
    ("SELECT fenceq.cancel_matching(NULL)", "QF102"),
    ("SELECT fenceq.cancel_matching('q', include_claimed => NULL)", "QF100"),
    ("SELECT fenceq.cancel_matching('q', force => NULL)", "QF100"),
    ("SELECT fenceq.cancel_matching('q', max_rows => NULL)", "QF104"),
    ("SELECT fenceq.cancel_matching('q', payload_contains => '\"secret\"')", "QF100"),
], ids=lambda value: str(value))
def test_bad_sql_calls_raise_their_code_quietly(pg, statement, code):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t", job_id="job-1")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(statement)
    assert info.value.sqlstate == code, info.value.diag.message_primary
    assert not {"secret", "job-1"} & set((info.value.diag.message_primary or "").split())
    with pg.connect() as client:
        assert client.get_job("job-1").status == "pending"
