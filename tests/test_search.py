"""Bounded search (schema version 7, issue 27; docs/design-v7.md §3), on
both engines: each filter, newest first, paging by seq, the two bounds
(max_rows, max_scan), and the refusal of a search no index bounds.

Written from the design, before the SQL. Finished times are moved with SQL
(tests/test_activity.py's helpers), never waited for.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from fenceq.ops import Arg, Shape
from helpers import claim, raises_code
from test_activity import db_now, set_jobs, unchecked
from test_time_flow import CONTAINMENT

HOUR = timedelta(hours=1)
NOW = datetime.now(timezone.utc)


def found(page) -> list[str]:
    return [job.job_id for job in page.jobs]


def as_job(searched) -> fenceq.Job:
    return fenceq.Job(**{f.name: getattr(searched, f.name) for f in dataclasses.fields(fenceq.Job)})


def failed_job(client, queue: str, error: str, task: str = "t", payload=None) -> str:
    """A job claimed and failed with ``error``: failed for good (with a dead
    letter, if its queue keeps them) when the queue allows one attempt,
    else waiting for its retry."""
    job_id = client.submit(queue, task, payload)
    c = claim(client, queue)
    assert c.job_id == job_id and client.fail(c.fence, error)
    return job_id


# Filters -------------------------------------------------------------------------------------

def test_a_submission_prefix_finds_its_jobs_newest_first_whole(client):
    client.create_queue("q")
    acme = [client.submit("q", "t", {"n": n}, submission_id=f"acme/{n}") for n in range(3)]
    for other in ("acmex/1", "ACME/1", "acm"):
        client.submit("q", "t", submission_id=other)
    page = client.search_jobs(submission_prefix="acme/")
    assert found(page) == acme[::-1]
    assert [job.seq for job in page.jobs] == sorted((job.seq for job in page.jobs), reverse=True)
    assert page.next_before_seq == page.jobs[-1].seq
    assert [as_job(job) for job in page.jobs] == [client.get_job(j) for j in acme[::-1]]


def test_a_prefix_is_text_not_a_pattern(client):
    client.create_queue("q")
    percent = client.submit("q", "t", submission_id="a%b/1")
    client.submit("q", "t", submission_id="axb/1")
    underscore = client.submit("q", "t", submission_id="a_b/1")
    assert found(client.search_jobs(submission_prefix="a%")) == [percent]
    assert found(client.search_jobs(submission_prefix="a_")) == [underscore]
    assert found(client.search_jobs(submission_prefix="a\\")) == []


def test_a_prefix_finds_jobs_in_any_status_but_not_purged_ones(client):
    client.create_queue("q")
    done = client.submit("q", "t", submission_id="s/done")
    assert client.complete(claim(client, "q").fence)
    assert client.purge(timedelta(0)) == 1                    # its identity outlives it
    running = client.submit("q", "t", submission_id="s/running")
    claim(client, "q")
    waiting = client.submit("q", "t", submission_id="s/waiting")
    assert found(client.search_jobs(submission_prefix="s/")) == [waiting, running]
    assert done not in found(client.search_jobs(submission_prefix="s/done"))


def test_a_live_status_searches_the_backlog(client):
    client.create_queue("q", lease=HOUR)
    client.create_queue("other", lease=HOUR)
    first = client.submit("q", "send", {"tenant": "acme"})
    second = client.submit("q", "bill", {"tenant": "beta"})
    elsewhere = client.submit("other", "send", {"tenant": "acme"})
    held = claim(client, "q")
    assert held.job_id == first
    assert found(client.search_jobs(status="pending")) == [elsewhere, second]
    assert found(client.search_jobs(status="pending", queue="q")) == [second]
    assert found(client.search_jobs(status="claimed")) == [first]
    assert found(client.search_jobs(status="pending", task="send")) == [elsewhere]
    assert found(client.search_jobs(status="pending", payload_contains={"tenant": "beta"})) == [second]
    assert found(client.search_jobs(status="claimed", queue="other")) == []


def test_a_window_of_finished_jobs(db, client):
    client.create_queue("q", lease=HOUR, max_attempts=1)
    old = failed_job(client, "q", "old failure")
    recent = failed_job(client, "q", "recent failure")
    done = client.submit("q", "t")
    assert client.complete(claim(client, "q").fence)
    cancelled = client.submit("q", "t")
    assert client.cancel(cancelled) == "cancelled"
    now = db_now(db)
    set_jobs(db, [old], finished_at=now - 3 * HOUR)
    set_jobs(db, [recent, done, cancelled], finished_at=now - HOUR / 2)
    assert found(client.search_jobs(status="failed", since=now - HOUR)) == [recent]
    assert found(client.search_jobs(status="failed", since=now - 4 * HOUR)) == [recent, old]
    assert found(client.search_jobs(status="failed", since=now - 4 * HOUR, until=now - 2 * HOUR)) == [old]
    assert found(client.search_jobs(status="failed", until=now - 2 * HOUR)) == [old]
    assert found(client.search_jobs(status="completed", since=now - HOUR)) == [done]
    assert found(client.search_jobs(status="cancelled", since=now - HOUR)) == [cancelled]
    assert found(client.search_jobs(status="expired", since=now - 4 * HOUR)) == []


def test_a_terminal_status_or_error_contains_alone_reads_the_finished_jobs(db, client):
    """design-v7 "Changes from the draft" 5: the most recently finished
    first, at most max_scan of them; the page itself newest (seq) first."""
    client.create_queue("q", lease=HOUR, max_attempts=1)
    first = failed_job(client, "q", "boom one")
    second = failed_job(client, "q", "boom two")
    done = client.submit("q", "t")
    assert client.complete(claim(client, "q").fence)
    now = db_now(db)
    set_jobs(db, [first], finished_at=now - 2 * HOUR)
    set_jobs(db, [second, done], finished_at=now - 3 * HOUR)
    assert found(client.search_jobs(status="failed")) == [second, first]
    assert found(client.search_jobs(error_contains="BOOM")) == [second, first]
    assert found(client.search_jobs(status="failed", max_scan=1)) == [first], "the most recently finished"
    assert found(client.search_jobs(since=now - 4 * HOUR)) == [done, second, first]


def test_error_contains_is_a_case_insensitive_substring_of_the_last_error(db, client):
    client.create_queue("q", lease=HOUR, max_attempts=1)
    timeout = failed_job(client, "q", "Upstream TIMEOUT after 30s")
    percent = failed_job(client, "q", "100% of retries used")
    other = failed_job(client, "q", "1000 retries used")
    since = db_now(db) - HOUR
    assert found(client.search_jobs(error_contains="timeout", since=since)) == [timeout]
    assert found(client.search_jobs(error_contains="0% ", since=since)) == [percent]
    assert found(client.search_jobs(error_contains="retries used", since=since)) == [other, percent]
    assert found(client.search_jobs(error_contains="0_ ", since=since)) == []
    assert found(client.search_jobs(error_contains="Timeout", status="failed", since=since)) == [timeout]
    assert found(client.search_jobs(error_contains="timeout", status="completed", since=since)) == []


def containment_mismatches(client, matched) -> list[tuple]:
    """The cases of CONTAINMENT (tests/test_time_flow.py: jsonb @>, as
    cancel_matching decides it) where ``matched(queue, job_id, contained)``
    answers otherwise; each case has a queue of its own with one job."""
    wrong = []
    for case, (payload, contained, matches) in enumerate(CONTAINMENT):
        queue = f"containment-{case}"
        client.create_queue(queue)
        job_id = client.submit(queue, "t", payload)
        if matched(queue, job_id, contained) is not matches:
            wrong.append((case, payload, contained, matches))
    return wrong


def test_payload_contains_matches_as_cancel_matching_does(client):
    def matched(queue, job_id, contained):
        answer = found(client.search_jobs(queue=queue, status="pending", payload_contains=contained))
        return {(): False, (job_id,): True}.get(tuple(answer))

    assert containment_mismatches(client, matched) == []


def test_an_object_inside_an_array_is_matched_on_postgresql_and_refused_on_sqlite(db, client):
    client.create_queue("q")
    job_id = client.submit("q", "t", {"items": [{"sku": 1, "n": 2}, {"sku": 7}]})
    if db.backend == "postgres":
        assert found(client.search_jobs(status="pending", payload_contains={"items": [{"sku": 7}]})) == [job_id]
    else:
        with raises_code("QF100"):
            client.search_jobs(status="pending", payload_contains={"items": [{"sku": 7}]})


# Paging and bounds ---------------------------------------------------------------------------

def test_pages_follow_seq_down_to_an_empty_page(client):
    client.create_queue("q")
    jobs = [client.submit("q", "t") for _ in range(7)]
    pages, before = [], None
    while True:
        page = client.search_jobs(status="pending", max_rows=3, before_seq=before)
        pages.append(found(page))
        if page.next_before_seq is None:
            break
        before = page.next_before_seq
    assert pages == [jobs[6:3:-1], jobs[3:0:-1], jobs[:1], []]


def test_before_seq_starts_below_the_given_seq(client):
    client.create_queue("q")
    jobs = [client.submit("q", "t", submission_id=f"p/{n}") for n in range(4)]
    seqs = {job.job_id: job.seq for job in client.search_jobs(submission_prefix="p/").jobs}
    assert found(client.search_jobs(submission_prefix="p/", before_seq=seqs[jobs[2]])) == [jobs[1], jobs[0]]
    assert found(client.search_jobs(submission_prefix="p/", before_seq=seqs[jobs[0]])) == []


@pytest.mark.parametrize("shape", ["prefix", "pending", "window"])
def test_max_scan_bounds_the_candidates_a_page_examines(db, client, shape):
    client.create_queue("q", lease=HOUR, max_attempts=1)
    if shape == "window":
        for n in range(5):
            failed_job(client, "q", f"failure {n}")
        search = {"status": "failed", "since": db_now(db) - HOUR}
    else:
        for n in range(5):
            client.submit("q", "t", submission_id=f"scan/{n}")
        search = {"submission_prefix": "scan/"} if shape == "prefix" else {"status": "pending"}
    assert len(client.search_jobs(**search, max_scan=2).jobs) == 2
    assert len(client.search_jobs(**search, max_scan=5).jobs) == 5
    assert len(client.search_jobs(**search, max_scan=5, max_rows=4).jobs) == 4


# Refusals ------------------------------------------------------------------------------------

KINDS = {"queue": "text", "status": "text", "task": "text", "payload_contains": "jsonb", "error_contains": "text",
         "submission_prefix": "text", "since": "timestamptz", "until": "timestamptz", "before_seq": "bigint",
         "max_rows": "integer", "max_scan": "integer"}


@pytest.mark.parametrize("arguments, code", [
    ({}, "QF100"),
    ({"queue": "q", "task": "t", "payload_contains": '{"a":1}'}, "QF100"),
    ({"status": "pending", "since": NOW}, "QF100"),          # a window bounds when a job finished
    ({"status": "claimed", "until": NOW}, "QF100"),
    ({"status": "pending", "queue": "nope"}, "QF101"),
    ({"status": "done"}, "QF100"),
    ({"status": "pending", "payload_contains": "1"}, "QF100"),
    ({"status": "pending", "max_rows": 0}, "QF104"),
    ({"status": "pending", "max_rows": 1001}, "QF104"),
    ({"status": "pending", "max_scan": 0}, "QF104"),
    ({"status": "pending", "max_scan": 1_000_001}, "QF104"),
], ids=str)
def test_the_sql_refuses_an_unbounded_or_malformed_search(client, arguments, code):
    client.create_queue("q")
    client.submit("q", "t", {"a": 1})
    values = {"max_rows": 50, "max_scan": 10_000, **arguments}
    with raises_code(code):
        unchecked(client, "search_jobs", Shape.ROWS, *(Arg(name, KINDS[name], value) for name, value in values.items()))


def test_the_client_refuses_before_sending(client):
    with raises_code("QF100"):
        client.search_jobs(queue="q", task="t")
