"""Jobs due later wait apart (version 5, PostgreSQL's part 1c; docs/design-v5.md
§3): every way a job becomes pending says where it waits, a claim moves
jobs in as they fall due and keeps the claim order across the two sets, and
an empty claim or next_due reads one probe of the jobs due later, not all
of them. The claim-order test runs on both engines; the storage tests are
PostgreSQL's (SQLite keeps version 4's single claim index)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

import psycopg

import fenceq


def wait_for_db_clock(db, moment: datetime) -> None:
    """Until the database's clock (SQLite's is the machine's) is past ``moment``."""
    deadline = time.monotonic() + 60
    while (db.sql("SELECT clock_timestamp()")[0][0] if db.backend == "postgres"
           else datetime.now(timezone.utc)) <= moment:
        assert time.monotonic() < deadline, "the clock never passed the moment"
        time.sleep(0.05)


def scheduled(pg, job_id: str) -> bool:
    [(flag,)] = pg.sql("SELECT scheduled FROM fenceq._jobs WHERE job_id = %s", (job_id,))
    return flag


def test_each_way_a_job_becomes_pending_says_where_it_waits(pg):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    with pg.connect() as client:
        client.create_queue("q", backoff_base=timedelta(hours=1))
        now_job = client.submit("q", "t")
        later_job = client.submit("q", "t", run_at=soon)
        parent = client.submit("q", "parent", priority=10)
        blocked = client.submit("q", "child", depends_on=[parent])
        [batch_job] = client.submit_batch("q", [{"task": "t"}])
        [owned_job] = client.submit_batch("q", [{"task": "t", "submission_id": "s-1"}])
        assert [scheduled(pg, j) for j in (now_job, later_job, blocked, batch_job, owned_job)] == [
            False, True, True, False, False]

        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claim.job_id == parent
        assert client.complete(claim.fence)
        assert scheduled(pg, blocked) is False, "freed, due now: ready"

        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.fail(claim.fence, "boom")  # backoff of an hour: waits apart
        assert scheduled(pg, claim.job_id) is True
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.release(claim.fence, run_at=soon)
        assert scheduled(pg, claim.job_id) is True
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.release(claim.fence)
        assert scheduled(pg, claim.job_id) is False


def test_a_claim_moves_jobs_in_as_they_fall_due_in_claim_order(db):
    with db.connect() as client:
        client.create_queue("q")
        low = client.submit("q", "low", priority=0)
        high = client.submit("q", "high", priority=5,
                             run_at=datetime.now(timezone.utc) + timedelta(milliseconds=300))
        assert client.next_due(["q"]) == client.get_job(low).run_at
        wait_for_db_clock(db, client.get_job(high).run_at)
        # The job that fell due waited apart until now; it still comes first.
        order = [client.claim_next(["q"], "w", fenceq.new_claim_token()).job_id for _ in range(2)]
        assert order == [high, low]
        assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None
        assert client.next_due(["q"]) is None


def _index_pages_read(plans: str, index: str) -> list[int]:
    """Shared buffers each scan of ``index`` touched, from auto_explain's output."""
    pages = []
    for node in plans.split("->"):
        if f"using {index}" in node:
            found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", node)
            pages.append(int(found.group(1)) + int(found.group(2) or 0) if found else 0)
    return pages


def test_an_empty_claim_and_next_due_read_one_probe_past_jobs_due_later(pg):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": "t", "run_at": later + timedelta(seconds=n),
                                   "priority": n} for n in range(5000)])
    pg.sql("VACUUM ANALYZE fenceq._jobs")
    with psycopg.connect(pg.url, autocommit=True) as session:
        notices: list[str] = []
        session.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        session.execute("LOAD 'auto_explain'")
        session.execute("SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
                        " SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on;"
                        " SET auto_explain.log_level = notice; SET client_min_messages = notice")
        assert session.execute("SELECT * FROM fenceq.claim_next('{q}', 'w', %s)",
                               (fenceq.new_claim_token(),)).fetchall() == []
        assert session.execute("SELECT fenceq.next_due('{q}')").fetchone()[0] == later
    plans = "\n".join(notices)
    pending, due_later = _index_pages_read(plans, "_jobs_pending_idx"), _index_pages_read(plans, "_jobs_later_idx")
    assert pending and due_later, plans
    # 5,000 index entries span dozens of leaf pages; a probe reads the root and a leaf or two.
    assert max(pending + due_later) <= 4, plans


def test_a_claim_passes_over_a_due_job_another_claim_is_moving(pg):
    """Two claims of a job that fell due while waiting apart: the first
    moves and claims it in an open transaction; the second meets the row it
    holds and passes over it without waiting (under a lock timeout, a wait
    would raise 55P03), then claims it once the first rolls back."""
    with pg.connect() as client:
        client.create_queue("q")
        job = client.submit("q", "t", run_at=datetime.now(timezone.utc) + timedelta(milliseconds=200))
        wait_for_db_clock(pg, client.get_job(job).run_at)
    claim = "SELECT job_id FROM fenceq.claim_next('{q}', %s, %s)"
    with psycopg.connect(pg.url) as first, psycopg.connect(pg.url, autocommit=True) as second:
        assert first.execute(claim, ("w1", fenceq.new_claim_token())).fetchall() == [(job,)]
        second.execute("SET lock_timeout = '5s'")
        assert second.execute(claim, ("w2", fenceq.new_claim_token())).fetchall() == []
        first.rollback()
        assert second.execute(claim, ("w2", fenceq.new_claim_token())).fetchall() == [(job,)]
