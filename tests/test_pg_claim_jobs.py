"""claim_jobs on PostgreSQL (schema version 8, docs/v8: one nonce per claim
call; docs/guarantees.md §1, §3, §21): the nonce is spent once in one
namespace with claim tokens, also when a call with it is racing in another
session; recover_claim answers every live job of a call; purge keeps a
call's ledger row while one of its jobs remains; the attempts view and the
activity sampler count the claims the job rows keep; a call takes at most
max_jobs and passes over rows other sessions hold. Real PostgreSQL, real
concurrent sessions for the races; the killers of the claim_jobs mutants
(tests/mutants/mutants.toml)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

import fenceq
from helpers import claim, raises_code
from test_pg_activity import at, closed_minute, rows, sample, seed_row

LOCK_WAITS = ("SELECT count(*) FROM pg_stat_activity"
              " WHERE wait_event_type = 'Lock' AND datname = current_database()")


def _statuses(pg, queue: str) -> dict[str, tuple]:
    return {job_id: (status, owner) for job_id, status, owner in
            pg.sql("SELECT job_id, status, owner_id FROM fenceq._jobs WHERE queue = %s", (queue,))}


def _ledger_rows(pg, token: str) -> int:
    return pg.sql("SELECT count(*) FROM fenceq._claims WHERE claim_token = %s", (token,))[0][0]


def _seen_waiting(pg, thread: threading.Thread) -> bool:
    """Whether the thread's session is seen waiting on a lock before it ends
    (a fresh snapshot per poll; no timing assumed)."""
    with psycopg.connect(pg.url, autocommit=True) as watcher:
        while thread.is_alive():
            if watcher.execute(LOCK_WAITS).fetchone()[0] > 0:
                return True
            time.sleep(0.01)
    return False


def test_a_spent_nonce_never_claims_again_whichever_call_spends_it(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": str(i)} for i in range(2)])
        nonce = fenceq.new_claim_token()
        claims = client.claim_jobs(["q"], "w1", nonce, 5)
        assert len(claims) == 2 and {c.claim_token for c in claims} == {nonce}
        assert client.complete_batch([c.fence for c in claims]) == [True, True]
        more = client.submit("q", "more")
        for call in (lambda: client.claim_jobs(["q"], "w2", nonce, 5),
                     lambda: client.claim_next(["q"], "w2", nonce),
                     lambda: client.claim_batch(["q"], "w2", [nonce])):
            with raises_code("QF301"):
                call()
        assert client.get_job(more).status == "pending", "a refused call claims nothing"
        token = fenceq.new_claim_token()
        assert client.claim_next(["q"], "w1", token).job_id == more
        with raises_code("QF301"):
            client.claim_jobs(["q"], "w2", token, 5)
    assert _ledger_rows(pg, nonce) == 1


def test_a_spent_nonce_is_refused_with_nothing_to_claim(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit("q", "t")
        nonce = fenceq.new_claim_token()
        [c] = client.claim_jobs(["q"], "w1", nonce, 5)
        assert client.complete(c.fence)
        with raises_code("QF301"):
            client.claim_jobs(["q"], "w1", nonce, 5)
        unused = fenceq.new_claim_token()
        assert client.claim_jobs(["q"], "w1", unused, 5) == [], "nothing due: zero rows"
        assert _ledger_rows(pg, unused) == 0, "and the nonce is not spent"


@pytest.mark.parametrize("first_commits", [True, False])
def test_one_nonce_from_two_sessions_at_once_claims_once(pg, first_commits):
    """Each session locks different jobs, so they meet on the nonce alone:
    the second waits on the ledger's key, then is refused and claims nothing
    (first commits) or claims (first rolls back)."""
    with pg.connect() as client:
        client.create_queue("q")
        ids = [client.submit("q", str(i), priority=10 - i) for i in range(4)]
    nonce = fenceq.new_claim_token()
    outcome = {}

    def second_call():
        with pg.connect() as second:
            try:
                outcome["claimed"] = [c.job_id for c in second.claim_jobs(["q"], "w2", nonce, 2)]
            except fenceq.FenceqError as refused:
                outcome["refused"] = refused.sqlstate

    with psycopg.connect(pg.url) as first:
        held = [r[0] for r in first.execute("SELECT job_id FROM fenceq.claim_jobs(%s, 'w1', %s, 2)",
                                            (["q"], nonce))]
        assert held == ids[:2]
        thread = threading.Thread(target=second_call)
        thread.start()
        waited = _seen_waiting(pg, thread)
        first.commit() if first_commits else first.rollback()
    thread.join(30)
    assert waited, "the second call waits for the first one's ledger row"
    statuses = _statuses(pg, "q")
    if first_commits:
        assert outcome == {"refused": "QF301"}
        assert statuses == {ids[0]: ("claimed", "w1"), ids[1]: ("claimed", "w1"),
                            ids[2]: ("pending", None), ids[3]: ("pending", None)}
    else:
        assert outcome == {"claimed": ids[2:]}
        assert statuses == {ids[0]: ("pending", None), ids[1]: ("pending", None),
                            ids[2]: ("claimed", "w2"), ids[3]: ("claimed", "w2")}
    assert _ledger_rows(pg, nonce) == 1
    assert pg.sql("SELECT count(*) FROM fenceq._jobs WHERE call_claims IS NOT NULL") == [(2,)]


def test_recover_claim_answers_every_live_job_of_the_call_in_claim_order(pg):
    with pg.connect() as client:
        client.create_queue("q")
        ids = [client.submit("q", str(i), priority=i) for i in range(4)]
        nonce = fenceq.new_claim_token()
        claims = client.claim_jobs(["q"], "w1", nonce, 4)
        assert [c.job_id for c in claims] == ids[::-1]
        assert client.recover_claims("w1", nonce) == claims
        assert client.recover_claim("w1", nonce) == claims[0]
        assert client.recover_claims("w2", nonce) == [], "another owner recovers nothing"
        assert client.complete(claims[1].fence)
        assert client.release(claims[2].fence)
        assert client.recover_claims("w1", nonce) == [claims[0], claims[3]], "settled and released left out"


def test_purge_keeps_a_call_row_while_a_job_of_the_call_remains(pg):
    with pg.connect() as client:
        client.create_queue("q")
        client.submit_batch("q", [{"task": str(i)} for i in range(2)])
        nonce = fenceq.new_claim_token()
        done, running = client.claim_jobs(["q"], "w1", nonce, 2)
        assert client.complete(done.fence)
        assert client.purge(timedelta(0)) == 1
        assert _ledger_rows(pg, nonce) == 1, "one of the call's jobs remains"
        assert client.recover_claims("w1", nonce) == [running]
        client.submit("q", "later")
        with raises_code("QF301"):
            client.claim_jobs(["q"], "w2", nonce, 2)
        assert client.complete(running.fence)
        assert client.purge(timedelta(0)) == 1
        assert _ledger_rows(pg, nonce) == 0, "the last of the call's jobs took the row with it"
        assert [c.task for c in client.claim_jobs(["q"], "w2", nonce, 2)] == ["later"]


def test_attempts_lists_the_claims_of_calls(pg):
    with pg.connect() as client:
        client.create_queue("q", max_attempts=3)
        job = client.submit("q", "t")
        [first] = client.claim_jobs(["q"], "w1", fenceq.new_claim_token(), 2)
        assert client.release(first.fence)
        [second] = client.claim_jobs(["q"], "w2", fenceq.new_claim_token(), 2)
        assert client.release(second.fence)
        third = claim(client, "q", "w3")
        assert third.generation == 3
    assert pg.sql("SELECT generation, owner_id FROM fenceq.attempts WHERE job_id = %s ORDER BY generation",
                  (job,)) == [(1, "w1"), (2, "w2"), (3, "w3")]


def test_the_sampler_counts_the_claims_of_calls(pg):
    m = closed_minute(pg) - timedelta(minutes=2)
    s = timedelta(seconds=1)
    with pg.connect() as client:
        client.create_queue("q")
        ids = client.submit_batch("q", [{"task": str(i)} for i in range(2)])
        claims = client.claim_jobs(["q"], "w1", fenceq.new_claim_token(), 2)
        assert client.complete_batch([c.fence for c in claims]) == [True, True]
    for job_id in ids:
        at(pg, job_id, created_at=m + s, run_at=m + s, finished_at=m + 5 * s)
    pg.sql("UPDATE fenceq._jobs SET call_claims = ARRAY[ROW(1, 'w1', %s, 'n')::fenceq._call_claim]"
           " WHERE queue = 'q'", (m + 3 * s,))
    seed_row(pg, "q", m - timedelta(minutes=1))
    assert sample(pg) >= 2
    row = next(r for r in rows(pg, "q") if r["minute"] == m)
    assert (row["submitted"], row["claimed"], row["completed"]) == (2, 2, 2)


@pytest.mark.parametrize("queues", [["q"], ["q", "empty"]])
def test_a_call_takes_at_most_max_jobs_in_claim_order(pg, queues):
    with pg.connect() as client:
        client.create_queue("q")
        client.create_queue("empty")
        ids = [client.submit("q", str(i), priority=i) for i in range(5)]
        claims = client.claim_jobs(queues, "w1", fenceq.new_claim_token(), 3)
        assert [c.job_id for c in claims] == ids[:1:-1]
        assert client.claim_jobs(queues, "w1", fenceq.new_claim_token(), 1)[0].job_id == ids[1]
    assert sorted(_statuses(pg, "q").values()) == [("claimed", "w1")] * 4 + [("pending", None)]


def test_a_call_skips_the_jobs_another_call_holds(pg):
    """Another session's call holds the head jobs: this call takes the rest
    at once; it is never seen waiting on a lock."""
    with pg.connect() as client:
        client.create_queue("q")
        ids = [client.submit("q", str(i), priority=10 - i) for i in range(4)]
    outcome = {}

    def second_call():
        with pg.connect() as second:
            outcome["claimed"] = [c.job_id for c in second.claim_jobs(["q"], "w2", fenceq.new_claim_token(), 4)]

    with psycopg.connect(pg.url) as first:
        held = [r[0] for r in first.execute("SELECT job_id FROM fenceq.claim_jobs(%s, 'w1', %s, 2)",
                                            (["q"], fenceq.new_claim_token()))]
        thread = threading.Thread(target=second_call)
        thread.start()
        waited = _seen_waiting(pg, thread)
        first.commit()
    thread.join(30)
    assert not waited, "the call waited for a held row instead of skipping it"
    assert held == ids[:2] and outcome == {"claimed": ids[2:]}
