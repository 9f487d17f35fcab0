"""Dependencies between jobs (docs/guarantees.md §16), on both engines."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import fenceq
from helpers import claim, raises_code


def run_next(client, queue="default", owner="w"):
    c = client.claim_next([queue], owner, fenceq.new_claim_token())
    if c is not None:
        assert client.complete(c.fence)
    return None if c is None else c.job_id


def diamond(client, queue="default", prefix=""):
    return client.submit_batch(queue, [
        {"task": "d", "job_id": f"{prefix}D", "depends_on": [f"{prefix}B", f"{prefix}C"]},
        {"task": "b", "job_id": f"{prefix}B", "depends_on": [f"{prefix}A"]},
        {"task": "c", "job_id": f"{prefix}C", "depends_on": [f"{prefix}A"]},
        {"task": "a", "job_id": f"{prefix}A", "max_attempts": 1, "submission_id": f"{prefix}graph-a"}])


def edges(db):
    view = "fenceq.dependencies" if db.backend == "postgres" else "fenceq_dependencies"
    return [(j, d, bool(s)) for j, d, s in db.sql(f"SELECT job_id, depends_on, satisfied FROM {view} ORDER BY 1, 2")]


def job_count(db):
    return db.sql("SELECT count(*) FROM " + ("fenceq.jobs" if db.backend == "postgres" else "fenceq_jobs"))[0][0]


def test_a_diamond_runs_in_order(db):
    with db.connect() as client:
        client.create_queue("default")
        assert diamond(client) == ["D", "B", "C", "A"]
        assert [client.get_job(j).blocked_by for j in "ABCD"] == [0, 1, 1, 2]
        stats = next(s for s in client.stats() if s.queue == "default")
        assert (stats.pending, stats.due, stats.blocked) == (4, 1, 3)
        assert [run_next(client) for _ in range(5)] == ["A", "B", "C", "D", None]
        assert edges(db) == [("B", "A", True), ("C", "A", True), ("D", "B", True), ("D", "C", True)]


def test_a_blocked_job_keeps_the_run_at_it_asked_for(db):
    with db.connect() as client:
        client.create_queue("default")
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        a = client.submit("default", "a")
        b = client.submit("default", "b", run_at=later, depends_on=[a])
        assert client.get_job(b).run_at == later
        assert client.next_due(["default"]) <= datetime.now(timezone.utc)
        run_next(client)
        job = client.get_job(b)
        assert (job.blocked_by, job.run_at) == (0, later)
        assert client.next_due(["default"]) == later
        assert run_next(client) is None


def test_a_failed_dependency_cancels_every_dependent_at_once(db):
    with db.connect() as client:
        client.create_queue("default")
        diamond(client)
        a = claim(client)
        assert client.fail(a.fence, "boom")
        for job_id in "BCD":
            job = client.get_job(job_id)
            assert (job.status, job.last_error) == ("cancelled", "dependency_failed")
        assert run_next(client) is None


@pytest.mark.parametrize("ending", ["cancel", "expire", "lease", "force"])
def test_every_other_ending_cancels_the_dependents(db, ending):
    with db.connect() as client:
        client.create_queue("default", lease=timedelta(milliseconds=1), max_attempts=1)
        expires = datetime.now(timezone.utc) + timedelta(milliseconds=50) if ending == "expire" else None
        client.submit("default", "a", job_id="A", expires_at=expires, active_key="k")
        client.submit("default", "b", job_id="B", depends_on=["A"])
        client.submit("default", "c", job_id="C", depends_on=["B"])
        if ending == "cancel":
            assert client.cancel("A") == "cancelled"
        elif ending == "force":
            client.submit("default", "a2", active_key="k", force=True)
        else:
            if ending == "lease":
                claim(client)
            while client.get_job("A").status in ("pending", "claimed"):
                client.reap()
        assert [client.get_job(j).status for j in "BC"] == ["cancelled", "cancelled"]
        assert client.get_job("C").last_error == "dependency_failed"


def test_a_dependency_that_already_failed_cancels_the_new_job(db):
    with db.connect() as client:
        client.create_queue("default")
        client.submit("default", "a", job_id="A")
        client.cancel("A")
        job = client.get_job(client.submit("default", "b", depends_on=["A"], active_key="k"))
        assert (job.status, job.last_error, job.active_key) == ("cancelled", "dependency_failed", None)
        # Inside a batch, an element that waits on it is cancelled with it.
        ids = client.submit_batch("default", [{"task": "d", "depends_on": ["X"]},
                                              {"task": "x", "job_id": "X", "depends_on": ["A"]}])
        assert [client.get_job(j).status for j in ids] == ["cancelled", "cancelled"]


def test_a_claimed_dependent_loses_its_fence(db):
    with db.connect() as client:
        client.create_queue("default")
        first = client.submit("default", "a", job_id="A")
        client.submit("default", "b", job_id="B", depends_on=[first])
        a = claim(client)
        # B is not eligible while A runs; cancelling A with force cancels B.
        assert client.claim_next(["default"], "w", fenceq.new_claim_token()) is None
        assert client.cancel(a.job_id, force=True) == "cancelled"
        assert client.get_job("B").status == "cancelled"
        assert not client.heartbeat(a.fence)


def test_a_replayed_graph_returns_the_same_ids_and_a_changed_one_conflicts(db):
    with db.connect() as client:
        client.create_queue("default")
        graph = [{"task": "a", "submission_id": "g-a"},
                 {"task": "b", "submission_id": "g-b", "job_id": "gb"}]
        first = client.submit_batch("default", graph)
        dependent = [{"task": "c", "submission_id": "g-c", "depends_on": [first[0], "gb"]}]
        ids = client.submit_batch("default", dependent)
        assert client.submit_batch("default", dependent) == ids
        assert client.submit("default", "c", submission_id="g-c", depends_on=["gb", first[0], "gb"]) == ids[0]
        with raises_code("QF201"):
            client.submit("default", "c", submission_id="g-c", depends_on=[first[0]])
        # The whole diamond, replayed under its submission ids after its
        # first job completed, answers with the same ids and adds nothing.
        whole = [{"task": "a", "submission_id": "w-a"},
                 {"task": "b", "submission_id": "w-b", "job_id": "wb", "depends_on": ["wa"]},
                 {"task": "a", "submission_id": "w-a2", "job_id": "wa"}]
        assert client.submit_batch("default", whole) == client.submit_batch("default", whole)
        assert len(edges(db)) == 3


@pytest.mark.parametrize("batch, index", [
    ([{"task": "x", "job_id": "X", "depends_on": ["Y"]}, {"task": "y", "job_id": "Y", "depends_on": ["X"]}], 0),
    ([{"task": "ok"}, {"task": "x", "job_id": "X", "depends_on": ["X"]}], 1),
    ([{"task": "ok"}, {"task": "ok"}, {"task": "x", "depends_on": ["nowhere"]}], 2),
    ([{"task": "ok"}, {"task": "x", "job_id": "X", "depends_on": ["Z"]}, {"task": "y", "job_id": "Y"},
      {"task": "z", "job_id": "Z", "depends_on": ["Y", "X"]}], 1)])
def test_cycles_self_and_unknown_dependencies_are_refused_with_the_index(db, batch, index):
    with db.connect() as client:
        client.create_queue("default")
        with raises_code("QF100") as refused:
            client.submit_batch("default", batch)
        assert f"index {index}" in str(refused.value)
        assert job_count(db) == 0 and edges(db) == []


def test_an_unknown_dependency_is_refused_by_submit(db):
    with db.connect() as client:
        client.create_queue("default")
        with raises_code("QF100"):
            client.submit("default", "t", depends_on=["nowhere"])
        with raises_code("QF100"):
            client.submit("default", "t", job_id="me", depends_on=["me"])
        assert job_count(db) == 0


def test_graphs_past_the_depth_bound_are_refused(db):
    with db.connect() as client:
        client.create_queue("default")
        previous = client.submit("default", "t")
        for _ in range(16):
            previous = client.submit("default", "t", depends_on=[previous])
        with raises_code("QF100"):
            client.submit("default", "t", depends_on=[previous])
        with raises_code("QF100"):
            client.submit_batch("default", [{"task": "t", "depends_on": [previous]}])
        assert job_count(db) == 17


def test_racing_completions_release_the_join_exactly_once(db):
    with db.connect() as client:
        client.create_queue("default")
        client.submit("default", "b", job_id="B")
        client.submit("default", "c", job_id="C")
        client.submit("default", "d", job_id="D", depends_on=["B", "C"])
        b, c = claim(client), claim(client)
    # Two sessions complete B and C at once (on PostgreSQL each holding its
    # row first; on SQLite each waiting for the write lock).
    barrier = threading.Barrier(2)

    def finish(fence):
        if db.backend == "postgres":
            with psycopg.connect(db.url, autocommit=False) as conn:
                conn.execute("SELECT 1 FROM fenceq.jobs WHERE job_id = %s", (fence.job_id,))
                barrier.wait()
                conn.execute("SELECT fenceq.complete(%s, %s, %s, %s)",
                             (fence.job_id, fence.owner_id, fence.generation, fence.claim_token))
                conn.commit()
        else:
            with db.connect() as own:
                barrier.wait()
                assert own.complete(fence)

    threads = [threading.Thread(target=finish, args=(x.fence,)) for x in (b, c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.connect() as client:
        job = client.get_job("D")
        assert (job.status, job.blocked_by) == ("pending", 0)
        assert run_next(client) == "D" and run_next(client) is None


def test_complete_batch_releases_dependents(db):
    with db.connect() as client:
        client.create_queue("default")
        client.submit_batch("default", [{"task": "a", "job_id": "A"}, {"task": "b", "job_id": "B"},
                                        {"task": "c", "job_id": "C", "depends_on": ["A", "B"]}])
        fences = [claim(client).fence, claim(client).fence]
        assert client.complete_batch(fences) == [True, True]
        assert run_next(client) == "C"


def test_purge_takes_the_edges_of_purged_jobs(db):
    with db.connect() as client:
        client.create_queue("default")
        client.submit("default", "a", job_id="A")
        client.submit("default", "b", job_id="B", depends_on=["A"])
        client.submit("default", "c", job_id="C", depends_on=["A"])
        assert run_next(client) == "A" and run_next(client) == "B"
        assert client.purge(timedelta(0)) == 2
        assert edges(db) == []
        assert client.get_job("C").blocked_by == 0
        # A purged job's id named later is a dependency that names no job.
        with raises_code("QF100"):
            client.submit("default", "d", depends_on=["A"])


def test_sqlite_rollback_to_3_refuses_while_a_job_waits_then_frees_it(sqlite_db):
    from fenceq.migrate import migrate, rollback

    with sqlite_db.connect() as client:
        client.create_queue("default")
        a = client.submit("default", "a")
        b = client.submit("default", "b", depends_on=[a])
    with raises_code("QF901"):
        rollback(sqlite_db.url, to_version=3)
    assert rollback(sqlite_db.url, to_version=3, allow_data_loss=True) == ["0004_fenceq_v4"]
    assert sqlite_db.sql("SELECT count(*) FROM fenceq__jobs WHERE run_at > 253402300799999999") == [(0,)]
    assert sqlite_db.sql("PRAGMA user_version") == [(3,)]
    assert all(check.ok for check in migrate(sqlite_db.url))
    with sqlite_db.connect() as client:
        job = client.get_job(b)
        assert (job.status, job.blocked_by) == ("pending", 0)
        assert sorted(filter(None, (run_next(client), run_next(client)))) == sorted([a, b])


def test_pending_pages_list_a_waiting_job_once_at_the_run_at_it_asked_for(db):
    with db.connect() as client:
        client.create_queue("default")
        soon = datetime.now(timezone.utc) + timedelta(hours=1)
        first = client.submit("default", "a", run_at=soon + timedelta(minutes=5))
        waiting = [client.submit("default", "b", run_at=soon, depends_on=[first]) for _ in range(3)]
        later = client.submit("default", "c", run_at=soon + timedelta(minutes=10))
        seen, after = [], None
        while page := client.pending_jobs("default", after=after, limit=2):
            seen += [j.job_id for j in page]
            last = page[-1]
            after = (last.priority, last.run_at, last.job_id)
        assert seen == sorted(waiting) + [first, later]
