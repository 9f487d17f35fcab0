"""Jobs due later wait apart (version 5, PostgreSQL's part 1c and SQLite's
step 0005; docs/design-v5.md §3): every way a job becomes pending says
where it waits, a claim moves jobs in as they fall due and keeps the claim
order across the two sets, and an empty claim or next_due reads one probe
of the jobs due later, not all of them. The flag and claim-order tests run
on both engines; each engine's cost test reads its own evidence
(PostgreSQL: buffers per index scan; SQLite: the query plans and the
virtual machine steps of the call)."""

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


def scheduled(db, job_id: str) -> bool:
    if db.backend == "postgres":
        [(flag,)] = db.sql("SELECT scheduled FROM fenceq._jobs WHERE job_id = %s", (job_id,))
        return flag
    [(flag,)] = db.sql("SELECT scheduled FROM fenceq__jobs WHERE job_id = ?", (job_id,))
    return bool(flag)


def test_each_way_a_job_becomes_pending_says_where_it_waits(db):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    with db.connect() as client:
        client.create_queue("q", backoff_base=timedelta(hours=1))
        now_job = client.submit("q", "t")
        later_job = client.submit("q", "t", run_at=soon)
        parent = client.submit("q", "parent", priority=10)
        blocked = client.submit("q", "child", depends_on=[parent])
        blocked_later = client.submit("q", "child", depends_on=[parent], run_at=soon)
        [batch_job, batch_later] = client.submit_batch("q", [{"task": "t"}, {"task": "t", "run_at": soon}])
        [owned_job] = client.submit_batch("q", [{"task": "t", "submission_id": "s-1"}])
        assert [scheduled(db, j) for j in (now_job, later_job, blocked, blocked_later, batch_job, batch_later,
                                           owned_job)] == [False, True, True, True, False, True, False]

        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert claim.job_id == parent
        assert client.complete(claim.fence)
        assert scheduled(db, blocked) is False, "freed, due now: ready"
        assert scheduled(db, blocked_later) is True, "freed, due later: still waits apart"

        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.fail(claim.fence, "boom")  # backoff of an hour: waits apart
        assert scheduled(db, claim.job_id) is True
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.release(claim.fence, run_at=soon)
        assert scheduled(db, claim.job_id) is True
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.release(claim.fence)
        assert scheduled(db, claim.job_id) is False
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.fail(claim.fence, "boom", retry_at=datetime.now(timezone.utc) - timedelta(seconds=1))
        assert scheduled(db, claim.job_id) is False, "retried at a time already past: ready"
        claim = client.claim_next(["q"], "w", fenceq.new_claim_token())
        assert client.fail(claim.fence, "fatal", retry=False)
        assert client.replay_dead_letter(client.get_job(claim.job_id).dlq_id) == claim.job_id
        assert scheduled(db, claim.job_id) is False, "replayed: due now"

        client.create_queue("reaped", backoff_base=timedelta(hours=1))
        reaped = client.submit("reaped", "t")
        claim = client.claim_next(["reaped"], "w", fenceq.new_claim_token(), lease=timedelta(milliseconds=100))
        wait_for_db_clock(db, claim.lease_expires_at)
        assert client.reap().requeued == 1
        assert scheduled(db, reaped) is True, "requeued by reap into an hour of back-off"

        client.create_queue("ticked")
        client.set_schedule("yearly", "ticked", "t", "0 0 1 1 *")
        if db.backend == "postgres":  # the occurrence came and went
            db.sql("UPDATE fenceq._schedules SET next_run_at = next_run_at - interval '400 days'")
        else:
            db.sql("UPDATE fenceq__schedules SET next_run_at = next_run_at - ?",
                   (timedelta(days=400) // timedelta(microseconds=1),))
        assert client.tick() == 1
        [ticked] = [s.last_job_id for s in client.schedules() if s.schedule == "yearly"]
        assert scheduled(db, ticked) is False, "a schedule's occurrence is due when tick submits it"


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


def _sqlite_plan(connection, name: str, op) -> list[str]:
    """EXPLAIN QUERY PLAN of every statement of a SQLite statement file."""
    from fenceq.backends.sqlite import load_script, parameters

    bound = parameters(op)
    details = []
    for statement in load_script(name):
        if statement.setup:
            connection.execute(statement.sql)
            continue
        rows = connection.execute("EXPLAIN QUERY PLAN " + statement.sql,
                                  {p: bound.get(p) for p in statement.parameters}).fetchall()
        details += [row[3] for row in rows]
    return details


def _sqlite_steps(connection, op) -> int:
    """Virtual machine instructions SQLite ran for one call: a count of the
    work done, which does not depend on the machine's speed."""
    from fenceq.backends.sqlite import execute

    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.set_progress_handler(count, 1)
    try:
        execute(connection, op, set())
    finally:
        connection.set_progress_handler(None, 1)
    return steps


def test_an_empty_sqlite_claim_and_next_due_read_one_probe_past_jobs_due_later(sqlite_db):
    """Differs from the PostgreSQL test above in its evidence: the plans
    read the jobs due later only through fenceq__jobs_later_idx bounded by
    the clock, and the ready jobs through the claim index with scheduled in
    its key; and adding 2,000 jobs due later leaves the work of an empty
    claim, a claim_batch and next_due as it was (version 4's claim index
    made an empty claim walk all of them: 12,000 more instructions)."""
    from fenceq import ops
    from fenceq.backends.sqlite import database_path, open_connection

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    calls = {"claim_next": lambda: ops.claim_next(["q"], "w", fenceq.new_claim_token()),
             "claim_batch": lambda: ops.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(3)]),
             "next_due": lambda: ops.next_due(["q"])}
    with sqlite_db.connect() as client:
        client.create_queue("q")
        client.submit("q", "t", run_at=later)
    connection = open_connection(database_path(sqlite_db.url))
    try:
        for name in ("claim_next", "claim_batch"):
            plan = _sqlite_plan(connection, name, calls[name]())
            reads = [d for d in plan if "fenceq__jobs_" in d and "claimed_idx" not in d]
            assert any(d.endswith("USING INDEX fenceq__jobs_later_idx (queue=? AND run_at<?)") for d in reads), plan
            assert any(d.endswith("USING INDEX fenceq__jobs_pending_idx (queue=? AND scheduled=?)")
                       for d in reads), plan
            assert all(d.startswith("SEARCH ") for d in reads), plan
        plan = _sqlite_plan(connection, "next_due", calls["next_due"]())
        assert any(d.endswith("USING INDEX fenceq__jobs_later_idx (queue=? AND run_at<?)") for d in plan), plan

        before = {name: _sqlite_steps(connection, call()) for name, call in calls.items()}
        with sqlite_db.connect() as client:
            client.submit_batch("q", [{"task": "t", "run_at": later + timedelta(seconds=n), "priority": n % 7}
                                      for n in range(2000)])
            assert client.claim_next(["q"], "w", fenceq.new_claim_token()) is None
            assert client.next_due(["q"]) == later
        after = {name: _sqlite_steps(connection, call()) for name, call in calls.items()}
    finally:
        connection.close()
    # A probe one level deeper in a B-tree costs a few instructions; reading
    # past the jobs due later would cost several per job.
    assert all(after[name] <= before[name] + 100 for name in calls), (before, after)
