"""Plans that must not depend on how big a table was when a session first
planned a statement (PostgreSQL). Hot functions cache generic plans; a plan
made while a table looked empty must not scan the whole table on every
later call once it has grown."""

from __future__ import annotations

import psycopg
import pytest

import fenceq


def _nested_plans(conn: psycopg.Connection, sql: str, params: tuple = ()) -> str:
    """The plans of every statement ``sql`` runs inside fenceq (auto_explain)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; "
                 "SET auto_explain.log_level = notice; SET client_min_messages = notice")
    conn.execute(sql, params).fetchall()
    conn.execute("RESET auto_explain.log_min_duration; RESET client_min_messages")
    return "\n".join(notices)


def test_used_token_lookup_follows_the_ledger_as_it_grows(pg):
    with pg.connect() as client:
        client.create_queue("idle")
        client.create_queue("busy")
    with psycopg.connect(pg.url, autocommit=True) as admin:
        admin.execute("VACUUM ANALYZE fenceq._claims")  # empty: plans made now expect no rows
    claim_idle = "SELECT * FROM fenceq.claim_next(ARRAY['idle'], 'w', %s)"
    with psycopg.connect(pg.url, autocommit=True) as worker:
        for _ in range(3):  # this session plans its statements against the empty ledger
            assert worker.execute(claim_idle, (fenceq.new_claim_token(),)).fetchall() == []
        with pg.connect() as client:
            client.submit_batch("busy", [{"task": "t"} for _ in range(3000)])
            assert len(client.claim_batch(["busy"], "filler", [fenceq.new_claim_token()
                                                                for _ in range(3000)])) == 3000
        plans = _nested_plans(worker, claim_idle, (fenceq.new_claim_token(),))
    assert "fenceq._claims" in plans, "the used-token lookup ran"
    assert "Index Only Scan using _claims_pkey" in plans or "Index Scan using _claims_pkey" in plans, plans
    assert "Seq Scan on _claims" not in plans, plans


FENCE = "'no-such-job', 'w', 1, 'no-such-token'"
PLANNED_WHILE_EMPTY = {
    "claim_next": ("SELECT * FROM fenceq.claim_next(ARRAY['busy'], 'w', %s)", lambda: (fenceq.new_claim_token(),)),
    "complete": (f"SELECT fenceq.complete({FENCE})", tuple),
    "heartbeat": (f"SELECT fenceq.heartbeat({FENCE})", tuple),
    "complete_batch": ("SELECT fenceq.complete_batch('{no-such-job}', '{w}', '{1}', '{no-such-token}')", tuple),
    "owned submit": ("SELECT fenceq.submit('other', 't', submission_id => %s)", lambda: (fenceq.new_claim_token(),)),
}


@pytest.mark.parametrize("call", sorted(PLANNED_WHILE_EMPTY))
def test_plans_made_while_tables_were_empty_use_indexes_once_they_grow(pg, call):
    sql, params = PLANNED_WHILE_EMPTY[call]
    with pg.connect() as client:
        client.create_queue("busy")
        client.create_queue("other")
    with psycopg.connect(pg.url, autocommit=True) as admin:
        for table in ("_jobs", "_claims", "_submissions"):
            admin.execute(f"VACUUM ANALYZE fenceq.{table}")  # empty: the planner expects no rows
    with psycopg.connect(pg.url, autocommit=True) as session:
        for _ in range(3):  # this session plans its statements against the empty tables
            session.execute(sql, params()).fetchall()
        with pg.connect() as client:
            client.submit_batch("busy", [{"task": "t"} for _ in range(3000)])
            for n in range(300):
                client.submit("other", "t", submission_id=f"s-{n}")
        plans = _nested_plans(session, sql, params())
    assert "Index" in plans, plans
    for table in ("_jobs", "_claims", "_submissions"):
        assert f"Seq Scan on {table}" not in plans, plans


def test_claim_batch_renumbers_arrays_with_other_bounds(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": "a"}, {"task": "b"}])
    with psycopg.connect(pg.url, autocommit=True) as conn:
        rows = conn.execute("SELECT claim_token FROM fenceq.claim_batch('[5:5]={q}'::text[], 'w', "
                            "'[0:1]={tok-a,tok-b}'::text[])").fetchall()
    assert sorted(r[0] for r in rows) == ["tok-a", "tok-b"]


@pytest.mark.parametrize("call", ["complete_batch", "heartbeat_batch"])
def test_batch_writes_probe_their_fences_not_every_claim_in_flight(pg, call):
    """With thousands of claims in flight, a batch of fences is answered by
    primary-key probes, not by reading every claimed job."""
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": "t"} for _ in range(3000)])
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute("VACUUM ANALYZE fenceq._jobs")  # no claim yet: the planner expects none
        claims = client.claim_batch(["q"], "w", [fenceq.new_claim_token() for _ in range(3000)])
    mine = claims[:2]
    with psycopg.connect(pg.url, autocommit=True) as session:
        plans = _nested_plans(session, f"SELECT fenceq.{call}(%s, %s, %s, %s)",
                              ([c.job_id for c in mine], [c.owner_id for c in mine],
                               [c.generation for c in mine], [c.claim_token for c in mine]))
    assert "_jobs_pkey" in plans, plans
    assert "_jobs_claimed_idx" not in plans and "Hash Join" not in plans, plans
