"""The fence rule, written once (issue 29, item 6; docs/guarantees.md §1).

A fence holds a job only while the job is claimed by exactly that fence and
its lease runs. On PostgreSQL (version 9) the rule lives in one inlined
helper, fenceq._holds_fence, and every fenced write and every read that
answers for a live claim judges with it; on SQLite it is one macro of the
statement templates (sql/sqlite/templates/macros.sql). The conformance tests
here refuse each half of the rule through every fenced write; the
PostgreSQL ones check that nothing else spells the rule out and that the
planner inlines it.
"""

import re
from datetime import timedelta
from pathlib import Path

import psycopg

import fenceq
from helpers import claim, wait_until_past


def fenced_calls(client: fenceq.Client) -> dict:
    """Every fenced call of the client, each answering True when it wrote
    (or, for the reads, found the live claim)."""
    return {
        "heartbeat": lambda f: client.heartbeat(f),
        "complete": lambda f: client.complete(f),
        "fail": lambda f: client.fail(f, "x"),
        "release": lambda f: client.release(f),
        "set_pid": lambda f: client.set_pid(f, 42),
        "acknowledge_cancel": lambda f: client.acknowledge_cancel(f),
        "extend": lambda f: client.extend(f, timedelta(hours=1)),
        "progress": lambda f: client.progress(f, {"p": 1}),
        "heartbeat_batch": lambda f: client.heartbeat_batch([f])[0],
        "complete_batch": lambda f: client.complete_batch([f])[0],
        "checkpoint": lambda f: client.checkpoint(f, "s", 1) is not None,
        "reserve_dispatch": lambda f: client.reserve_dispatch(f, "external", "ref-1"),
        "claim_state": lambda f: client.claim_state(f) is not None,
        "recover_claim": lambda f: client.recover_claim(f.owner_id, f.claim_token) is not None,
    }


def test_a_settled_claim_fence_writes_nothing_more(client, queue):
    """Completing a claim leaves its owner, generation, token and lease on
    the row; only the status says the fence no longer holds."""
    client.submit(queue, "t")
    c = claim(client, queue)
    assert client.complete(c.fence, {"done": True}) is True
    before = client.get_job(c.job_id)
    for name, call in fenced_calls(client).items():
        assert call(c.fence) is False, name
    after = client.get_job(c.job_id)
    assert after == before, "a refused call changes nothing"
    assert client.checkpoints(c.job_id) == []


def test_every_fenced_write_refuses_an_expired_lease(client, queue):
    """Each call judges the lease at its own clock reading: once the lease
    has run out, nothing holds, even before reap has seen the job."""
    client.submit(queue, "t")
    c = claim(client, queue, lease=timedelta(seconds=1))
    wait_until_past(c.lease_expires_at)
    before = client.get_job(c.job_id)
    for name, call in fenced_calls(client).items():
        assert call(c.fence) is False, name
    assert client.get_job(c.job_id) == before, "a refused call changes nothing"
    assert client.reap().requeued == 1, "still claimed, for reap to take back"


# The functions that judge a fence: the one-statement fenced writes and the
# batches call the rule in their statement, the others lock through
# _lock_live, which calls it.
JUDGE_WITH_THE_RULE = {"_lock_live", "heartbeat", "heartbeat_batch", "complete", "complete_batch",
                       "progress", "claim_state", "recover_claim"}
LOCK_THROUGH_LOCK_LIVE = {"fail", "release", "acknowledge_cancel", "extend", "checkpoint", "set_pid",
                          "reserve_dispatch", "finalize_dispatch", "release_dispatch", "replace_dispatch_ref"}


def _bodies(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc AS p"
            " WHERE p.pronamespace = 'fenceq'::regnamespace AND p.prosqlbody IS NULL").fetchall())


def test_the_fence_rule_is_written_once(pg):
    bodies = _bodies(pg.url)
    assert {name for name, body in bodies.items() if "fenceq._holds_fence(" in body} == JUDGE_WITH_THE_RULE
    assert {name for name, body in bodies.items() if "fenceq._lock_live(" in body} == LOCK_THROUGH_LOCK_LIVE
    # Only reap and adopt_dispatch compare a lease end with a clock reading
    # themselves: both look for a claim whose lease has run out.
    assert {name for name, body in bodies.items()
            if "lease_expires_at >" in body and name != "_holds_fence"} == {"reap", "adopt_dispatch"}
    assert not any("claim_token = " in body and "AND" in body.split("claim_token = ", 1)[1][:80]
                   and name not in {"claim_next", "_claim_picked", "claim_batch", "claim_jobs",
                                    "recover_claim", "purge", "adopt_dispatch"}
                   for name, body in bodies.items()), "a token compared outside the rule"


def _parts(fence: fenceq.Fence) -> tuple:
    return fence.job_id, fence.owner_id, fence.generation, fence.claim_token


def test_the_planner_inlines_the_rule(pg):
    """_holds_fence costs no call: each fenced write runs the rule inside its
    own statement, so PostgreSQL's function statistics never see it called."""
    with fenceq.connect(pg.url) as client:
        client.create_queue("q", lease=timedelta(seconds=30))
        for _ in range(3):
            client.submit("q", "t")
        first, second, third = (claim(client, "q") for _ in range(3))
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("SET track_functions = 'all'")
            conn.execute("SELECT pg_stat_reset()")
            conn.execute("SELECT fenceq.heartbeat(%s, %s, %s, %s)", _parts(first.fence))
            conn.execute("SELECT fenceq.progress(%s, %s, %s, %s, '1')", _parts(first.fence))
            conn.execute("SELECT * FROM fenceq.claim_state(%s, %s, %s, %s)", _parts(first.fence))
            conn.execute("SELECT * FROM fenceq.recover_claim(%s, %s)", (first.owner_id, first.claim_token))
            conn.execute("SELECT fenceq.heartbeat_batch(%s, %s, %s, %s)",
                         tuple([value] for value in _parts(second.fence)))
            conn.execute("SELECT fenceq.fail(%s, %s, %s, %s, 'x')", _parts(second.fence))
            conn.execute("SELECT fenceq.complete(%s, %s, %s, %s)", _parts(first.fence))
            conn.execute("SELECT fenceq.complete_batch(%s, %s, %s, %s)",
                         tuple([value] for value in _parts(third.fence)))
            conn.execute("SELECT pg_stat_force_next_flush()")
            conn.execute("SELECT 1")  # the backend reports its statistics before this one
        with psycopg.connect(pg.url, autocommit=True) as reader:
            calls = dict(reader.execute(
                "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'fenceq'").fetchall())
    assert {"heartbeat", "progress", "complete", "fail", "_lock_live"} <= calls.keys(), \
        "the statistics saw the fenced writes"
    assert "_holds_fence" not in calls


SQLITE_TEMPLATES = Path(__file__).resolve().parents[1] / "sql" / "sqlite" / "templates"
SQLITE_JUDGES = {"acknowledge_cancel", "checkpoint", "claim_state", "complete", "complete_batch", "extend", "fail",
                 "finalize_dispatch", "heartbeat", "heartbeat_batch", "progress", "recover_claim", "release",
                 "release_dispatch", "replace_dispatch_ref", "reserve_dispatch", "set_pid"}


def test_the_sqlite_fence_rule_is_one_macro():
    """SQLite's statement files are generated from templates: the rule is
    the holds_fence macro, which fence_decision and the files that decide in
    their own statement call; no template compares a lease end itself."""
    templates = {path.stem: path.read_text(encoding="utf-8") for path in SQLITE_TEMPLATES.glob("*.sql")}
    assert {name for name, text in templates.items()
            if re.search(r"lease_expires_at\s*>(?!=)", text)} == {"macros"}
    assert {name for name, text in templates.items() if name != "macros"
            and ("{{holds_fence(" in text or "{{fence_decision}}" in text)} == SQLITE_JUDGES
