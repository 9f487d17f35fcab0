"""Dependencies between jobs (docs/guarantees.md §16). PostgreSQL only for
now: SQLite refuses depends_on with QF100 (a test below holds it to that)."""

from __future__ import annotations

import threading

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


def test_a_diamond_runs_in_order(pg):
    with pg.connect() as client:
        client.create_queue("default")
        assert diamond(client) == ["D", "B", "C", "A"]
        assert [client.get_job(j).blocked_by for j in "ABCD"] == [0, 1, 1, 2]
        stats = next(s for s in client.stats() if s.queue == "default")
        assert (stats.pending, stats.due, stats.blocked) == (4, 1, 3)
        assert [run_next(client) for _ in range(5)] == ["A", "B", "C", "D", None]
        rows = pg.sql("SELECT job_id, depends_on, satisfied FROM fenceq.dependencies ORDER BY 1, 2")
        assert rows == [("B", "A", True), ("C", "A", True), ("D", "B", True), ("D", "C", True)]


def test_a_failed_dependency_cancels_every_dependent_at_once(pg):
    with pg.connect() as client:
        client.create_queue("default")
        diamond(client)
        a = claim(client)
        assert client.fail(a.fence, "boom")
        for job_id in "BCD":
            job = client.get_job(job_id)
            assert (job.status, job.last_error) == ("cancelled", "dependency_failed")
        assert run_next(client) is None


def test_a_claimed_dependent_loses_its_fence(pg):
    with pg.connect() as client:
        client.create_queue("default")
        first = client.submit("default", "a", job_id="A")
        client.submit("default", "b", job_id="B", depends_on=[first])
        a = claim(client)
        # B is not eligible while A runs; cancelling A with force cancels B.
        assert client.claim_next(["default"], "w", fenceq.new_claim_token()) is None
        assert client.cancel(a.job_id, force=True) == "cancelled"
        assert client.get_job("B").status == "cancelled"
        assert not client.heartbeat(a.fence)


def test_a_replayed_graph_returns_the_same_ids_and_a_changed_one_conflicts(pg):
    with pg.connect() as client:
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


@pytest.mark.parametrize("batch, index", [
    ([{"task": "x", "job_id": "X", "depends_on": ["Y"]}, {"task": "y", "job_id": "Y", "depends_on": ["X"]}], 0),
    ([{"task": "ok"}, {"task": "x", "job_id": "X", "depends_on": ["X"]}], 1),
    ([{"task": "ok"}, {"task": "ok"}, {"task": "x", "depends_on": ["nowhere"]}], 2)])
def test_cycles_self_and_unknown_dependencies_are_refused_with_the_index(pg, batch, index):
    with pg.connect() as client:
        client.create_queue("default")
        with raises_code("QF100") as refused:
            client.submit_batch("default", batch)
        assert f"index {index}" in str(refused.value)
        assert pg.sql("SELECT count(*) FROM fenceq.jobs") == [(0,)]


def test_graphs_past_the_depth_bound_are_refused(pg):
    with pg.connect() as client:
        client.create_queue("default")
        previous = client.submit("default", "t")
        for _ in range(16):
            previous = client.submit("default", "t", depends_on=[previous])
        with raises_code("QF100"):
            client.submit("default", "t", depends_on=[previous])


def test_racing_completions_release_the_join_exactly_once(pg):
    with pg.connect() as client:
        client.create_queue("default")
        client.submit("default", "b", job_id="B")
        client.submit("default", "c", job_id="C")
        client.submit("default", "d", job_id="D", depends_on=["B", "C"])
        b, c = claim(client), claim(client)
    # Two sessions complete B and C at once, each holding its row first.
    barrier = threading.Barrier(2)

    def finish(fence):
        with psycopg.connect(pg.url, autocommit=False) as conn:
            conn.execute("SELECT 1 FROM fenceq.jobs WHERE job_id = %s", (fence.job_id,))
            barrier.wait()
            conn.execute("SELECT fenceq.complete(%s, %s, %s, %s)",
                         (fence.job_id, fence.owner_id, fence.generation, fence.claim_token))
            conn.commit()

    threads = [threading.Thread(target=finish, args=(x.fence,)) for x in (b, c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with pg.connect() as client:
        job = client.get_job("D")
        assert (job.status, job.blocked_by) == ("pending", 0)
        assert run_next(client) == "D" and run_next(client) is None


def test_sqlite_refuses_dependencies_and_changes_nothing(sqlite_db):
    with sqlite_db.connect() as client:
        client.create_queue("default")
        with raises_code("QF100"):
            client.submit("default", "t", depends_on=["x"])
        assert client.stats()[0].pending == 0
