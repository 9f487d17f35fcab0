"""The bulk actions on PostgreSQL (schema version 7, docs/design-v7.md §4,
guarantees.md §21): one event per change with who and which filter, where
the queue keeps history and where it does not; a dependent of the
selection cancelled once; concurrent actions in real sessions that neither
deadlock nor change a job twice; a job claimed while an action waits for its
row, judged as the claim left it; notifications; and who may call what."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from helpers import claim, payloads_until_barrier
from test_pg_plans import _nested_plans
from test_pg_roles import login  # noqa: F401 - the fixture
from test_time_flow import PATIENCE, _waiting_on_a_lock


def call(url: str, name: str, **args) -> int:
    """One bulk action in SQL (jsonb given as JSON text, arrays as lists)."""
    named = ", ".join(f"{arg} => %({arg})s" for arg in args)
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(f"SELECT fenceq.{name}({named})", args).fetchone()[0]


def events(pg, job_id: str) -> list[tuple[str, dict]]:
    return pg.sql("SELECT event, detail FROM fenceq._events WHERE job_id = %s ORDER BY seq", (job_id,))


@pytest.mark.parametrize("history", [True, False])
def test_each_change_is_one_event_with_who_and_which_filter(pg, history):
    with pg.connect() as client:
        client.create_queue("q", max_attempts=3, backoff_base=timedelta(hours=1))
        assert client.set_queue_history("q", history) is history
        client.submit("q", "t", {"customer": 1})
        client.submit("q", "t", {"customer": 1})
        asked, forced = claim(client, "q"), claim(client, "q")
        retrying = client.submit("q", "t", {"customer": 2})
        assert client.fail(claim(client, "q").fence, "Temporary glitch")  # back-off: an hour
        failing = client.submit("q", "t", {"customer": 3}, max_attempts=1)
        assert client.fail(claim(client, "q").fence, "fatal: bad input", retry=False)
        untouched = client.submit("q", "t", {"customer": 1})
    jobs = (asked.job_id, forced.job_id, retrying, failing, untouched)
    before = {j: len(events(pg, j)) for j in jobs}

    assert call(pg.url, "retry_jobs", queue="q", error_contains="GLITCH") == 1
    assert call(pg.url, "cancel_jobs", queue="q", job_ids=[asked.job_id], payload_contains='{"customer": 1}',
                include_claimed=True) == 1
    assert call(pg.url, "cancel_jobs", queue="q", job_ids=[forced.job_id, "no-such-job"], include_claimed=True,
                force=True) == 1
    assert call(pg.url, "replay_dead_letters", queue="q", task="t") == 1
    who = pg.sql("SELECT session_user::text")[0][0]
    for job_id, event, action, extra in [
            (retrying, "retry_forced", "retry_jobs", {"filter": {"error_contains": "GLITCH"}}),
            (asked.job_id, "cancel_requested", "cancel_jobs",
             {"filter": {"job_ids": 1, "payload_contains": {"customer": 1}, "include_claimed": True, "force": False}}),
            (forced.job_id, "cancelled", "cancel_jobs",
             {"reason": "force", "filter": {"job_ids": 2, "include_claimed": True, "force": True}}),
            (failing, "replayed", "replay_dead_letters", {"filter": {"task": "t"}})]:
        new = events(pg, job_id)[before[job_id]:]
        assert [e for e, _ in new] == [event], (job_id, new)
        detail = new[0][1]
        assert detail["by"] == who and detail["action"] == action
        assert {k: detail[k] for k in extra} == extra
    assert events(pg, failing)[-1][1]["dlq_id"]
    assert events(pg, untouched)[before[untouched]:] == [], "not selected: no event"
    with pg.connect() as client:
        assert client.get_job(retrying).run_at <= datetime.now(timezone.utc)
        assert client.get_job(forced.job_id).status == "cancelled"
        assert client.get_job(asked.job_id).cancel_requested
        assert client.get_job(failing).status == "pending"
        assert client.get_job(untouched).status == "pending"


def test_a_dependent_in_the_selection_is_cancelled_once_and_not_counted(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.set_queue_history("q", True)
        first = client.submit("q", "t", job_id="a-first")
        dependent = client.submit("q", "t", job_id="b-dependent", depends_on=[first])
    assert call(pg.url, "cancel_jobs", queue="q", job_ids=[dependent, first]) == 1
    assert [(e, d.get("reason")) for e, d in events(pg, dependent)] == [
        ("submitted", None), ("cancelled", "dependency_failed")]
    assert [e for e, _ in events(pg, first)] == ["submitted", "cancelled"]


@pytest.mark.parametrize("include_claimed", [False, True])
def test_a_job_claimed_while_cancel_jobs_waits_for_its_row_is_judged_as_claimed(pg, include_claimed):
    """cancel_jobs chooses the job while it is pending; a claim in flight
    holds its row, so the action is seen waiting for the lock
    (pg_stat_activity), then judges the row as the claim left it: without
    include_claimed the job no longer matches and is left alone, not counted."""
    with pg.connect() as client:
        client.create_queue("q")
        job_id = client.submit("q", "t")
    answers: list[int] = []
    name = f"cancel-jobs-{include_claimed}"

    def cancel() -> None:
        with psycopg.connect(pg.url, autocommit=True, application_name=name) as conn:
            answers.append(conn.execute("SELECT fenceq.cancel_jobs('q', job_ids => %s, include_claimed => %s)",
                                        ([job_id], include_claimed)).fetchone()[0])

    canceller = threading.Thread(target=cancel)
    with psycopg.connect(pg.url) as claimer:  # its transaction stays open: the claim holds the row
        claimed = claimer.execute("SELECT job_id FROM fenceq.claim_next('{q}', 'w', 'nonce-in-flight')").fetchone()
        assert claimed == (job_id,)
        canceller.start()
        deadline = time.monotonic() + PATIENCE
        while not _waiting_on_a_lock(pg, name):
            assert time.monotonic() < deadline, "cancel_jobs never waited for the claimed row"
            time.sleep(0.01)
        assert answers == [], "it waits"
        claimer.commit()
    canceller.join(PATIENCE)
    with pg.connect() as client:
        job = client.get_job(job_id)
    assert (job.status, job.generation, job.cancel_requested) == ("claimed", 1, include_claimed)
    assert answers == [1 if include_claimed else 0]
    assert [e for e, _ in events(pg, job_id)] == (["cancel_requested"] if include_claimed else [])


def test_a_retry_notifies_and_the_job_is_claimed_at_once(pg):
    with pg.connect() as client:
        client.create_queue("q", backoff_base=timedelta(hours=1))
        client.submit("q", "t")
        assert client.fail(claim(client, "q").fence, "later")
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None
    with psycopg.connect(pg.url, autocommit=True) as listener:
        listener.execute("LISTEN fenceq_jobs")
        assert call(pg.url, "retry_jobs", queue="q", task="t") == 1
        assert payloads_until_barrier(listener, "fenceq_jobs", "barrier") == ["q"]
    with pg.connect() as client:
        assert claim(client, "q").attempt == 2
    assert call(pg.url, "retry_jobs", queue="q", task="t") == 0, "nothing waits for a retry now"


def test_replays_racing_in_two_sessions_replay_each_active_key_once(pg):
    """Failed runs of one schedule share an active key: two callers replay
    overlapping selections at once; neither deadlocks nor raises, and one
    job per key is active afterwards."""
    keys = [f"key-{k}" for k in range(5)]
    with pg.connect() as client:
        client.create_queue("q", max_attempts=1)
        for _ in range(4):
            for key in keys:
                client.submit("q", "t", {"key": key}, active_key=key)
            for _ in keys:
                assert client.fail(claim(client, "q").fence, "boom")
    answers: list[int] = []
    start = threading.Barrier(2)

    def replay(args: dict) -> None:
        start.wait()
        answers.append(call(pg.url, "replay_dead_letters", queue="q", **args))

    threads = [threading.Thread(target=replay, args=(args,)) for args in ({"task": "t"}, {"error_contains": "boom"})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(answers) == 5, answers
    active = pg.sql("SELECT active_key, count(*) FROM fenceq._jobs WHERE status = 'pending' GROUP BY 1 ORDER BY 1")
    assert active == [(key, 1) for key in keys]
    assert pg.sql("SELECT count(*) FROM fenceq._dead_letters WHERE replayed_at IS NOT NULL")[0][0] == 5


def test_bulk_actions_racing_each_other_and_cancel_matching_neither_deadlock_nor_double_count(pg):
    with pg.connect() as client:
        client.create_queue("q", backoff_base=timedelta(hours=1))
        ids = client.submit_batch("q", [{"task": "t", "payload": {"n": n}} for n in range(300)])
        for c in client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(100)]):
            assert client.fail(c.fence, "later")
    changed: dict[str, int] = {}
    start = threading.Barrier(4)

    def run(name: str, statement: str, args: dict) -> None:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            start.wait()
            changed[name] = conn.execute(statement, args).fetchone()[0]

    half = ids[::2]
    runs = [("cancel_jobs", "SELECT fenceq.cancel_jobs('q', job_ids => %(ids)s, max_rows => 100000)", {"ids": half}),
            ("cancel_jobs all", "SELECT fenceq.cancel_jobs('q', task => 't')", {}),
            ("cancel_matching", "SELECT fenceq.cancel_matching('q', task => 't')", {}),
            ("retry_jobs", "SELECT fenceq.retry_jobs('q', task => 't')", {})]
    threads = [threading.Thread(target=run, args=r) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(changed) == 4
    cancels = changed["cancel_jobs"] + changed["cancel_jobs all"] + changed["cancel_matching"]
    assert cancels == 300, changed
    assert pg.sql("SELECT count(*) FROM fenceq._jobs WHERE status = 'cancelled'")[0][0] == 300
    assert pg.sql("SELECT count(*) FROM fenceq._events WHERE event = 'cancelled'")[0][0] == \
        changed["cancel_jobs"] + changed["cancel_jobs all"], "history off: only the bulk actions wrote events"


def test_admins_act_workers_search_and_sample_producers_neither(pg, login):  # noqa: F811
    with pg.connect() as client:
        client.create_queue("q")
        job = client.submit("q", "t")
    admin, worker, producer = login("fenceq_admin"), login("fenceq_worker"), login("fenceq_producer")
    for name, args in [("retry_jobs", {"task": "t"}), ("cancel_jobs", {"task": "x"}),
                       ("replay_dead_letters", {"task": "t"})]:
        for url in (worker, producer):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                call(url, name, queue="q", **args)
    assert call(admin, "cancel_jobs", queue="q", job_ids=[job]) == 1
    role = admin.split("://", 1)[1].split("@", 1)[0]
    assert events(pg, job)[-1][1]["by"] == role, "the login role, not the functions' owner"
    with psycopg.connect(worker, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM fenceq.search_jobs(status => 'cancelled')").fetchone()[0] == 1
        assert conn.execute("SELECT fenceq.sample_activity()").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM fenceq.activity()").fetchone()[0] == 60
    with psycopg.connect(producer, autocommit=True) as conn:
        for statement in ("SELECT fenceq.search_jobs(status => 'failed')", "SELECT fenceq.sample_activity()",
                          "SELECT fenceq.activity()"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


@pytest.mark.parametrize("name, args, code", [
    ("retry_jobs", {}, "QF100"), ("cancel_jobs", {"include_claimed": True}, "QF100"),
    ("replay_dead_letters", {}, "QF100"), ("retry_jobs", {"task": "t", "max_rows": 0}, "QF104"),
    ("cancel_jobs", {"task": "t", "max_rows": 100001}, "QF104"), ("retry_jobs", {"job_ids": []}, "QF100"),
    ("cancel_jobs", {"job_ids": [""]}, "QF102"), ("cancel_jobs", {"task": "t", "force": True}, "QF100"),
    ("replay_dead_letters", {"payload_contains": '"x"'}, "QF100"),
    ("replay_dead_letters", {"error_contains": ""}, "QF100"), ("retry_jobs", {"queue": "nope", "task": "t"}, "QF101")])
def test_bulk_actions_refuse_bad_input_before_changing_anything(pg, name, args, code):
    with pg.connect() as client:
        client.create_queue("q")
        job = client.submit("q", "t")
    with pytest.raises(psycopg.Error) as info:
        call(pg.url, name, **{"queue": "q", **args})
    assert info.value.sqlstate == code
    with pg.connect() as client:
        assert client.get_job(job).status == "pending"
    assert pg.sql("SELECT count(*) FROM fenceq._events")[0][0] == 0


@pytest.mark.parametrize("statement, index", [
    ("SELECT fenceq.retry_jobs('q', task => 'later')", "_jobs_later_idx"),
    ("SELECT fenceq.cancel_jobs('q', task => 'nothing', include_claimed => true)", "_jobs_pending_idx"),
    ("SELECT fenceq.replay_dead_letters('q', task => 'nothing')", "_dead_letters_unhandled_idx")])
def test_a_filter_reads_its_queues_index_not_the_history(pg, statement, index):
    """Planned while the tables were empty, run once they hold a history
    of finished jobs and handled letters: the filter's index range, never
    a scan of a whole table."""
    with pg.connect() as client:
        client.create_queue("q", max_attempts=1)
    with psycopg.connect(pg.url, autocommit=True) as admin:
        for table in ("_jobs", "_dead_letters"):
            admin.execute(f"VACUUM ANALYZE fenceq.{table}")
    with psycopg.connect(pg.url, autocommit=True) as session:
        for _ in range(6):
            session.execute(statement).fetchall()
        with pg.connect() as client:
            client.submit_batch("q", [{"task": "t"} for _ in range(2000)])
            for c in client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(2000)]):
                client.fail(c.fence, "boom", retry=False)
        pg.sql("UPDATE fenceq._dead_letters SET discarded_at = clock_timestamp()")
        plans = _nested_plans(session, statement)
    assert index in plans, plans
    for table in ("_jobs", "_dead_letters"):
        assert f"Seq Scan on {table}" not in plans, plans
