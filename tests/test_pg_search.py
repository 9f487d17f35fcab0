"""search_jobs on PostgreSQL (schema version 7, docs/design-v7.md §3,
guarantees.md §21): the plan of each range the filters choose reads an
index range, also when the session planned it while the tables were empty
(no Seq Scan on _jobs or _submissions: never a scan of all history); the
submission prefix is a literal range of code points; max_scan bounds what
is read before the other filters."""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg
import pytest

import fenceq
from helpers import claim
from test_pg_plans import _nested_plans

SHAPES = {
    "prefix": ("SELECT * FROM fenceq.search_jobs(submission_prefix => 'order-1')", "_submissions_pkey"),
    "prefix and payload": ("SELECT * FROM fenceq.search_jobs(submission_prefix => 'order-', payload_contains => "
                           "'{\"customer\": 7}')", "_submissions_pkey"),
    "pending of a queue": ("SELECT * FROM fenceq.search_jobs(queue => 'q', status => 'pending', task => 't')",
                           "_jobs_pending_idx"),
    "pending of all queues": ("SELECT * FROM fenceq.search_jobs(status => 'pending', payload_contains => "
                              "'{\"customer\": 7}')", "_jobs_pending_idx"),
    "claimed of a queue": ("SELECT * FROM fenceq.search_jobs(queue => 'q', status => 'claimed')",
                           "_jobs_claimed_idx"),
    "claimed of all queues": ("SELECT * FROM fenceq.search_jobs(status => 'claimed')", "_jobs_claimed_idx"),
    "failed in a window": ("SELECT * FROM fenceq.search_jobs(queue => 'q', status => 'failed', since => "
                           "clock_timestamp() - interval '1 hour')", "_jobs_finished_idx"),
    "error text": ("SELECT * FROM fenceq.search_jobs(error_contains => 'refused')", "_jobs_finished_idx"),
    "a window": ("SELECT * FROM fenceq.search_jobs(since => clock_timestamp() - interval '1 hour', "
                 "until => clock_timestamp(), max_scan => 500)", "_jobs_finished_idx"),
    "a page": ("SELECT * FROM fenceq.search_jobs(status => 'completed', before_seq => 2000, max_rows => 10)",
               "_jobs_finished_idx"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_range_reads_an_index_even_when_planned_on_empty_tables(pg, shape):
    sql, index = SHAPES[shape]
    with pg.connect() as client:
        client.create_queue("q")
    with psycopg.connect(pg.url, autocommit=True) as admin:
        for table in ("_jobs", "_submissions"):
            admin.execute(f"VACUUM ANALYZE fenceq.{table}")  # empty: the planner expects no rows
    with psycopg.connect(pg.url, autocommit=True) as session:
        for _ in range(6):  # past PL/pgSQL's custom plans: the cached generic one
            session.execute(sql).fetchall()
        with pg.connect() as client:
            client.submit_batch("q", [{"task": "t", "payload": {"customer": n % 10}, "submission_id": f"order-{n}"}
                                      for n in range(3000)])
            claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(1500)])
            for c in claims[:1000]:
                client.complete(c.fence)
            for c in claims[1000:1200]:
                client.fail(c.fence, "connection refused", retry=False)
        plans = _nested_plans(session, sql)
    assert index in plans, plans
    for table in ("_jobs", "_submissions"):
        assert f"Seq Scan on {table}" not in plans, plans


def search(pg, **args) -> list[dict]:
    call = ", ".join(f"{name} => %({name})s" for name in args)
    with psycopg.connect(pg.url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(f"SELECT * FROM fenceq.search_jobs({call})", args).fetchall()


def test_a_submission_prefix_is_taken_literally_to_the_greatest_code_point(pg):
    ids = ["a%b", "a%c", "axb", "a_b", "a", "ab", "a\U0010ffff", "a\U0010ffff\U0010ffffz", "b", "\U0010ffff"]
    with pg.connect() as client:
        client.create_queue("q")
        for n, sid in enumerate(ids):
            client.submit("q", "t", {"n": n}, submission_id=sid)

    def found(prefix: str) -> set[str]:
        return {r["submission_id"] for r in search(pg, submission_prefix=prefix)}

    assert found("a%") == {"a%b", "a%c"}, "no LIKE metacharacters"
    assert found("a_") == {"a_b"}
    assert found("a") == {"a%b", "a%c", "axb", "a_b", "a", "ab", "a\U0010ffff", "a\U0010ffff\U0010ffffz"}
    assert found("a\U0010ffff") == {"a\U0010ffff", "a\U0010ffff\U0010ffffz"}
    assert found("\U0010ffff") == {"\U0010ffff"}
    longest = "p" * 255
    with pg.connect() as client:
        client.submit("q", "t", submission_id=longest)
    assert found("p" * 200) == {longest}, "an id of 255 characters is inside the range"


def test_max_scan_bounds_what_is_read_and_pages_go_by_seq(pg):
    """Of 30 failed jobs, a window read with max_scan 10 sees the 10 most
    recently finished, whatever the filters keep; pages by before_seq."""
    with pg.connect() as client:
        client.create_queue("q", max_attempts=1)
        client.submit_batch("q", [{"task": "t", "payload": {"n": n}} for n in range(30)])
        for n in range(30):
            c = claim(client, "q")
            assert client.fail(c.fence, f"Error number {n}")
    # Finished in submission order, one second apart: the newest finished last.
    pg.sql("UPDATE fenceq._jobs SET finished_at = created_at + (payload ->> 'n')::integer * interval '1 second'")
    seen = search(pg, status="failed", max_scan=10)
    assert sorted(r["payload"]["n"] for r in seen) == list(range(20, 30))
    assert [r["seq"] for r in seen] == sorted((r["seq"] for r in seen), reverse=True)
    assert search(pg, status="failed", max_scan=10, payload_contains='{"n": 3}') == [], "n=3 lies beyond the bound"
    first = search(pg, status="failed", max_rows=12)
    second = search(pg, status="failed", max_rows=12, before_seq=first[-1]["seq"])
    assert len(first) == 12 and len(second) == 12
    assert {r["job_id"] for r in first}.isdisjoint(r["job_id"] for r in second)
    assert [r["payload"]["n"] for r in search(pg, error_contains="NUMBER 2", max_rows=1000)] == \
        [29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 2], "case-insensitive substring"
    until = search(pg, status="failed", max_rows=1)[0]["finished_at"]
    assert len(search(pg, status="failed", until=until, max_rows=1000)) == 29


@pytest.mark.parametrize("args, code", [
    ({"queue": "q"}, "QF100"), ({"task": "t"}, "QF100"), ({"payload_contains": '{"n": 1}'}, "QF100"),
    ({"status": "claimed", "since": datetime.now(timezone.utc)}, "QF100"), ({"status": "done"}, "QF100"),
    ({"error_contains": ""}, "QF100"), ({"error_contains": "x" * 1001}, "QF100"),
    ({"submission_prefix": ""}, "QF102"), ({"submission_prefix": "x" * 256}, "QF102"),
    ({"status": "failed", "payload_contains": '"x"'}, "QF100"), ({"status": "failed", "queue": "nope"}, "QF101"),
    ({"status": "failed", "max_rows": 1001}, "QF104"), ({"status": "failed", "max_rows": 0}, "QF104"),
    ({"status": "failed", "max_scan": 1000001}, "QF104"), ({"status": "failed", "max_scan": 0}, "QF104"),
    ({"status": "failed", "since": "infinity"}, "QF105")])
def test_search_refuses_what_has_no_bounded_range(pg, args, code):
    with pg.connect() as client:
        client.create_queue("q")
    with pytest.raises(psycopg.Error) as info:
        search(pg, **args)
    assert info.value.sqlstate == code
