"""Bulk actions (schema version 7, issue 27; docs/design-v7.md §4), on both
engines: retry_jobs, cancel_jobs and replay_dead_letters each change at most
max_rows jobs of one queue, chosen by a selection (job_ids), a filter or
both, answer how many changed, write one event per changed job whatever the
queue's history setting (detail: by, action, filter), and change nothing
when refused.

Written from the design, before the SQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import fenceq
from fenceq.ops import Arg, Shape
from helpers import claim, raises_code
from test_activity import db_now, unchecked
from test_search import containment_mismatches, failed_job

HOUR = timedelta(hours=1)
FILTERS = ("task", "payload_contains", "error_contains")


def session_user(db) -> str | None:
    """Who an event says acted: the database user on PostgreSQL; SQLite has none."""
    return db.sql("SELECT session_user")[0][0] if db.backend == "postgres" else None


def events(client, job_id: str, name: str | None = None):
    return [e for e in client.get_job_events(job_id) if name is None or e.event == name]


def assert_recorded(db, event, action: str, **filters) -> None:
    """The bulk action's part of an event's detail: who, which action, which
    filter (the arguments given; job_ids as their number)."""
    assert event.detail["by"] == session_user(db)
    assert event.detail["action"] == action
    given = {name: value for name, value in event.detail["filter"].items() if value is not None}
    if action == "cancel_jobs":
        filters = {"include_claimed": False, "force": False, **filters}
    assert given == filters


def retry_queue(client, queue: str = "q") -> str:
    """A queue whose failed jobs wait an hour for their retry."""
    client.create_queue(queue, lease=HOUR, max_attempts=5, backoff_base=HOUR)
    return queue


def letters(client, queue: str = "q"):
    return {d.job_id: d for d in client.dead_letters(queue=queue, include_handled=True, limit=1000)}


def state(client, job_ids):
    """What a refused call must leave as it was: the jobs, their events, the letters."""
    return ([client.get_job(j) for j in job_ids], [client.get_job_events(j) for j in job_ids],
            sorted(client.dead_letters(include_handled=True, limit=1000), key=lambda d: d.dlq_id))


# retry_jobs ----------------------------------------------------------------------------------

def test_retry_jobs_makes_jobs_waiting_for_a_retry_due_now(db, client):
    retry_queue(client)
    running = client.submit("q", "t")
    held = claim(client, "q")
    boom = failed_job(client, "q", "Boom")
    crash = failed_job(client, "q", "crash")
    fresh = client.submit("q", "t")                                       # never tried
    later = client.submit("q", "t", run_at=db_now(db) + HOUR)              # due later, never tried
    untouched = {j: client.get_job(j) for j in (running, fresh, later)}
    assert client.get_job(boom).run_at > db_now(db)

    assert client.retry_jobs("q", task="t") == 2
    now = db_now(db)
    for job_id in (boom, crash):
        job = client.get_job(job_id)
        assert (job.status, job.attempts) == ("pending", 1) and job.run_at <= now
        [forced] = events(client, job_id)                                 # history is off: this one only
        assert (forced.event, forced.generation, forced.owner_id) == ("retry_forced", None, None)
        assert_recorded(db, forced, "retry_jobs", task="t")
    assert {j: client.get_job(j) for j in untouched} == untouched
    assert {claim(client, "q").job_id for _ in range(3)} == {boom, crash, fresh}, "due now: claimed now"
    assert client.retry_jobs("q", task="t") == 0
    assert client.heartbeat(held.fence)


def test_retry_jobs_selection_filters_and_max_rows(db, client):
    retry_queue(client)
    retry_queue(client, "other")
    boom = failed_job(client, "q", "Boom: upstream", payload={"tenant": "acme"})
    crash = failed_job(client, "q", "crash", payload={"tenant": "beta"})
    third = failed_job(client, "q", "boom again", task="u", payload={"tenant": "acme"})
    elsewhere = failed_job(client, "other", "boom")

    assert client.retry_jobs("q", job_ids=[boom, crash, elsewhere, "no-such-job"], error_contains="BOOM") == 1
    [forced] = events(client, boom, "retry_forced")
    assert_recorded(db, forced, "retry_jobs", error_contains="BOOM", job_ids=4)
    assert client.get_job(boom).run_at <= db_now(db) < client.get_job(crash).run_at
    assert client.get_job(elsewhere).run_at > db_now(db), "a job of another queue is ignored"

    assert client.retry_jobs("q", payload_contains={"tenant": "acme"}, task="u") == 1
    assert_recorded(db, events(client, third, "retry_forced")[0], "retry_jobs", task="u",
                    payload_contains={"tenant": "acme"})
    assert client.retry_jobs("q", job_ids=[crash, elsewhere], max_rows=1) == 1
    assert_recorded(db, events(client, crash, "retry_forced")[0], "retry_jobs", job_ids=2)
    assert client.retry_jobs("q", job_ids=[boom, crash, third]) == 0, "none waits any more"


def test_retry_jobs_takes_the_soonest_due_first(db, client):
    retry_queue(client)
    now = db_now(db)
    jobs = []
    for hours in (3, 1, 2):                                    # submitted in this order, due in another
        jobs.append(client.submit("q", "t"))
        assert client.fail(claim(client, "q").fence, "e", retry_at=now + hours * HOUR)
    assert client.retry_jobs("q", task="t", max_rows=2) == 2
    assert [bool(events(client, j, "retry_forced")) for j in jobs] == [False, True, True]
    assert client.retry_jobs("q", task="t", max_rows=2) == 1


# cancel_jobs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("history", [False, True])
def test_cancel_jobs_follows_cancel_matching_and_records_each_change_once(db, client, history):
    client.create_queue("q", lease=HOUR)
    client.set_queue_history("q", history)
    held_id = client.submit("q", "t")
    held = claim(client, "q")
    first, second = client.submit("q", "t"), client.submit("q", "t")
    other_task = client.submit("q", "u")
    start = len(client.get_job_events(held_id))

    assert client.cancel_jobs("q", task="t") == 2, "pending jobs only"
    for job_id in (first, second):
        assert client.get_job(job_id).status == "cancelled"
        [cancelled] = events(client, job_id, "cancelled")
        assert cancelled.detail["reason"] == "cancel"
        assert_recorded(db, cancelled, "cancel_jobs", task="t")
    assert client.cancel_jobs("q", task="t", include_claimed=True) == 1
    assert client.get_job(held_id).cancel_requested and client.heartbeat(held.fence)
    assert client.cancel_jobs("q", task="t", include_claimed=True) == 0, "already requested: not counted"
    assert client.cancel_jobs("q", task="t", include_claimed=True, force=True) == 1
    assert client.get_job(held_id).status == "cancelled" and not client.heartbeat(held.fence)
    written = client.get_job_events(held_id)[start:]
    assert [e.event for e in written] == ["cancel_requested", "cancelled"]
    assert written[1].detail["reason"] == "force"
    assert_recorded(db, written[0], "cancel_jobs", task="t", include_claimed=True)
    assert_recorded(db, written[1], "cancel_jobs", task="t", include_claimed=True, force=True)
    assert client.get_job(other_task).status == "pending"
    assert [e.event for e in client.get_job_events(first)] == (["submitted", "cancelled"] if history
                                                              else ["cancelled"])


def test_cancel_jobs_selection_narrowed_by_a_filter(db, client):
    client.create_queue("q")
    client.create_queue("other")
    acme = client.submit("q", "t", {"tenant": "acme"})
    beta = client.submit("q", "t", {"tenant": "beta"})
    elsewhere = client.submit("other", "t", {"tenant": "acme"})
    assert client.cancel_jobs("q", job_ids=[acme, beta, elsewhere], payload_contains={"tenant": "acme"}) == 1
    assert [client.get_job(j).status for j in (acme, beta, elsewhere)] == ["cancelled", "pending", "pending"]
    assert_recorded(db, events(client, acme, "cancelled")[0], "cancel_jobs", payload_contains={"tenant": "acme"},
                    job_ids=3)
    assert client.cancel_jobs("q", job_ids=[beta, elsewhere]) == 1
    assert client.get_job(elsewhere).status == "pending"


def test_cancel_jobs_takes_the_oldest_first(client):
    client.create_queue("q")
    jobs = [client.submit("q", "t", priority=p) for p in (0, 9, 5)]
    assert client.cancel_jobs("q", task="t", max_rows=2) == 2
    assert [client.get_job(j).status for j in jobs] == ["cancelled", "cancelled", "pending"]


def test_cancel_jobs_matches_payloads_as_cancel_matching_does(client):
    def matched(queue, job_id, contained):
        answered = (client.cancel_jobs(queue, payload_contains=contained), client.get_job(job_id).status)
        return {(0, "pending"): False, (1, "cancelled"): True}.get(answered)

    assert containment_mismatches(client, matched) == []


# replay_dead_letters -------------------------------------------------------------------------

def test_replay_dead_letters_replays_each_open_letter_once(db, client):
    client.create_queue("q", lease=HOUR, max_attempts=1)
    client.create_queue("other", lease=HOUR, max_attempts=1)
    boom = failed_job(client, "q", "Boom")
    crash = failed_job(client, "q", "crash")
    discarded = failed_job(client, "q", "boom, discarded")
    elsewhere = failed_job(client, "other", "boom")
    assert client.discard_dead_letter(letters(client)[discarded].dlq_id)

    assert client.replay_dead_letters("q", error_contains="boom") == 1
    job = client.get_job(boom)
    assert (job.status, job.attempts) == ("pending", 0)
    letter = letters(client)[boom]
    assert letter.replayed_at is not None
    [replayed] = events(client, boom, "replayed")
    assert replayed.detail["dlq_id"] == letter.dlq_id and (replayed.generation, replayed.owner_id) == (None, None)
    assert_recorded(db, replayed, "replay_dead_letters", error_contains="boom")
    assert client.get_job(discarded).status == "failed", "a discarded letter is handled"
    assert client.replay_dead_letters("q", error_contains="boom") == 0, "replayed once"

    assert client.replay_dead_letters("q", job_ids=[crash, elsewhere, boom]) == 1
    assert client.get_job(crash).status == "pending"
    assert client.get_job(elsewhere).status == "failed", "a job of another queue is ignored"
    assert_recorded(db, events(client, crash, "replayed")[0], "replay_dead_letters", job_ids=3)


def test_replay_dead_letters_filters_and_max_rows(db, client):
    client.create_queue("q", lease=HOUR, max_attempts=1)
    client.create_queue("quiet", lease=HOUR, max_attempts=1, dead_letter=False)
    acme = [failed_job(client, "q", "e", payload={"tenant": "acme"}) for _ in range(3)]
    beta = failed_job(client, "q", "e", task="u", payload={"tenant": "beta"})
    unlettered = failed_job(client, "quiet", "e")
    assert client.replay_dead_letters("q", payload_contains={"tenant": "acme"}, max_rows=2) == 2
    assert [client.get_job(j).status for j in acme] == ["pending", "pending", "failed"], "oldest first"
    assert client.replay_dead_letters("q", job_ids=acme + [beta], task="u") == 1
    assert client.get_job(beta).status == "pending"
    assert client.replay_dead_letters("quiet", task="t") == 0, "a failed job without a letter stays"
    assert client.get_job(unlettered).status == "failed"


# Refusals ------------------------------------------------------------------------------------

KINDS = {"queue": "text", "job_ids": "text[]", "task": "text", "payload_contains": "jsonb",
         "error_contains": "text", "include_claimed": "boolean", "force": "boolean", "max_rows": "integer"}
ACTIONS = ("retry_jobs", "cancel_jobs", "replay_dead_letters")


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("arguments, code", [
    ({}, "QF100"),                                              # neither a selection nor a filter
    ({"queue": "", "task": "t"}, "QF102"),
    ({"queue": "nope", "task": "t"}, "QF101"),
    ({"task": "t", "max_rows": 0}, "QF104"),
    ({"task": "t", "max_rows": 100_001}, "QF104"),
    ({"payload_contains": "1"}, "QF100"),
    ({"job_ids": ["j" * 256]}, "QF102"),
    ({"job_ids": []}, "QF100"),
], ids=str)
def test_a_refused_call_changes_nothing(db, client, action, arguments, code):
    retry_queue(client)
    client.set_queue_history("q", True)
    waiting = failed_job(client, "q", "boom")
    pending = client.submit("q", "t")
    client.create_queue("dead", lease=HOUR, max_attempts=1)
    lettered = failed_job(client, "dead", "boom")
    jobs = [waiting, pending, lettered]
    before = state(client, jobs)
    values = {"queue": "dead" if action == "replay_dead_letters" else "q", "max_rows": 10, **arguments}
    with raises_code(code):
        unchecked(client, action, Shape.SCALAR, *(Arg(name, KINDS[name], value) for name, value in values.items()))
    assert state(client, jobs) == before


@pytest.mark.parametrize("call", [
    lambda c: c.retry_jobs("q"), lambda c: c.cancel_jobs("q"), lambda c: c.replay_dead_letters("q"),
    lambda c: c.cancel_jobs("q", task="t", force=True),
])
def test_the_client_refuses_before_sending(client, call):
    with raises_code("QF100") as info:
        call(client)
    assert info.value.__cause__ is None


def test_events_are_written_with_history_off(db, client):
    """design-v7 §4: one event per changed job whatever the queue's history setting."""
    retry_queue(client)
    waiting = failed_job(client, "q", "boom")
    assert client.get_job_events(waiting) == []
    assert client.retry_jobs("q", job_ids=[waiting]) == 1
    assert [e.event for e in client.get_job_events(waiting)] == ["retry_forced"]
    assert isinstance(client.get_job_events(waiting)[0].detail["filter"], dict)


async def test_the_async_client_has_the_same_operations(db):
    aclient = await db.connect_async()
    try:
        await aclient.create_queue("q", lease=HOUR, max_attempts=5, backoff_base=HOUR)
        job_id = await aclient.submit("q", "t")
        c = await aclient.claim_next(["q"], "w", fenceq.new_claim_token())
        assert await aclient.fail(c.fence, "boom")
        page = await aclient.search_jobs(status="pending")
        assert [j.job_id for j in page.jobs] == [job_id] and page.next_before_seq == page.jobs[0].seq
        assert await aclient.retry_jobs("q", job_ids=[job_id]) == 1
        assert await aclient.cancel_jobs("q", job_ids=[job_id]) == 1
        assert await aclient.replay_dead_letters("q", task="t") == 0
        assert await aclient.sample_activity() == 1
        assert len(await aclient.activity(queue="q")) == 60
    finally:
        await aclient.close()
