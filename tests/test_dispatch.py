"""External execution under a fence (schema version 6, issue 26;
docs/design-v6.md "The dispatch functions", docs/guarantees.md §19), on both
engines through the Python client.

Written from the design's dispatch table, row by row. A refusal answers
false (or no row) and changes nothing: each refusal here is followed by a
comparison of the job, its raw dispatch row and the dispatches view with
what they were before it. The fence is judged first: a stale, expired or
foreign fence is refused even where the same call with the live fence
would answer true or raise QF305.

A lease lapses deterministically: ``lapse`` renews the claim with a lease of
one millisecond (the renewal is the claim's last write) and waits until the
wall clock is past the lease the database recorded. Nothing here asserts a
wall-clock margin.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import fenceq
from helpers import claim, raises_code, wait_until_past

BACKEND = "batch-cluster"
LONG = timedelta(minutes=10)


# Helpers ---------------------------------------------------------------------

def new_claim(client, queue="q", owner="w1", **submit):
    """A queue (created if missing) with one fresh job, claimed with a long lease."""
    if queue not in {s.queue for s in client.stats()}:
        client.create_queue(queue, lease=LONG, backoff_base=timedelta(0))
    client.submit(queue, "render", **submit)
    return claim(client, queue, owner=owner)


def lapse(client, c) -> None:
    """Let the claim's lease lapse: renew it to one millisecond (cancel
    requested or not) and wait past what the database recorded."""
    assert client.heartbeat(c.fence, lease=timedelta(milliseconds=1)) is True
    wait_until_past(client.get_job(c.job_id).lease_expires_at)


def dispatch_table(db) -> str:
    return "fenceq._dispatches" if db.backend == "postgres" else "fenceq__dispatches"


def raw_dispatch(db, job_id):
    """The job's row of the dispatch table, whatever its generation (None: no row)."""
    rows = db.sql(f"SELECT job_id, backend, generation, state, reservation_ref, execution_ref,"
                  f" reserved_at, finalized_at, checked_at FROM {dispatch_table(db)} WHERE job_id = ?"
                  .replace("?", "%s" if db.backend == "postgres" else "?"), (job_id,))
    return rows[0] if rows else None


def snapshot(db, client, job_id):
    """Everything a refused dispatch call must leave as it was."""
    job = client.get_job(job_id)
    return ((job.status, job.generation, job.attempts, job.owner_id, job.lease_expires_at,
             job.cancel_requested, job.run_at, job.last_error),
            raw_dispatch(db, job_id), client.dispatches(), client.attempts(job_id))


def live_dispatch(client, job_id) -> fenceq.Dispatch | None:
    rows = [d for d in client.dispatches() if d.job_id == job_id]
    assert len(rows) <= 1
    return rows[0] if rows else None


def stale_fences(f: fenceq.Fence) -> list[fenceq.Fence]:
    """A fence wrong in each of its parts, and one of an unknown job."""
    return [fenceq.Fence(f.job_id, "intruder", f.generation, f.claim_token),
            fenceq.Fence(f.job_id, f.owner_id, f.generation + 1, f.claim_token),
            fenceq.Fence(f.job_id, f.owner_id, f.generation, "forged-token"),
            fenceq.Fence("no-such-job", f.owner_id, f.generation, f.claim_token)]


def every_write(client, fence, ref="r1", execution="x1", backend=BACKEND):
    """Each of the four fenced dispatch writes, with arguments that would
    succeed (or raise QF305) under a live fence in the states the tests set up."""
    return {
        "reserve same": lambda: client.reserve_dispatch(fence, backend, ref),
        "reserve other ref": lambda: client.reserve_dispatch(fence, backend, "r-other"),
        "reserve other backend": lambda: client.reserve_dispatch(fence, "other-system", ref),
        "finalize": lambda: client.finalize_dispatch(fence, ref, execution),
        "release_dispatch": lambda: client.release_dispatch(fence, ref),
        "replace": lambda: client.replace_dispatch_ref(fence, execution, "x-moved"),
    }


# reserve_dispatch ----------------------------------------------------------------

def test_reserve_records_a_reserved_dispatch_and_a_retry_writes_nothing(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.dispatches() == []
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        row = live_dispatch(client, c.job_id)
        assert (row.job_id, row.queue, row.backend, row.state, row.reservation_ref, row.execution_ref,
                row.owner_id, row.generation, row.checked_at) == (
            c.job_id, "q", BACKEND, "reserved", "r1", None, "w1", 1, None)
        assert row.lease_expires_at == client.get_job(c.job_id).lease_expires_at
        before = snapshot(db, client, c.job_id)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True   # a retried call
        assert snapshot(db, client, c.job_id) == before
        # The claim itself is untouched: still live, same generation, attempt counted once.
        job = client.get_job(c.job_id)
        assert (job.status, job.generation, job.attempts) == ("claimed", 1, 1)
        assert client.heartbeat(c.fence) is True


def test_a_second_reservation_under_another_backend_or_ref_is_qf305(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = snapshot(db, client, c.job_id)
        with raises_code("QF305") as info:
            client.reserve_dispatch(c.fence, BACKEND, "r2")
        assert isinstance(info.value, fenceq.FenceqError)
        with raises_code("QF305"):
            client.reserve_dispatch(c.fence, "other-system", "r1")
        assert snapshot(db, client, c.job_id) == before
        # Running: the same backend and ref is still a retry (true, nothing
        # written); another ref still a conflict.
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        running = snapshot(db, client, c.job_id)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert snapshot(db, client, c.job_id) == running
        with raises_code("QF305"):
            client.reserve_dispatch(c.fence, BACKEND, "x1")
        with raises_code("QF305"):
            client.reserve_dispatch(c.fence, "other-system", "r1")
        assert snapshot(db, client, c.job_id) == running


def test_reserve_is_refused_once_a_cancel_is_requested(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.cancel(c.job_id) == "cancel_requested"
        before = snapshot(db, client, c.job_id)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is False
        assert snapshot(db, client, c.job_id) == before
        assert client.dispatches() == []
        # Also a retry of a reservation made before the request: false,
        # and no conflict either (the refusal comes first).
        d = new_claim(client)
        assert client.reserve_dispatch(d.fence, BACKEND, "r1") is True
        assert client.cancel(d.job_id) == "cancel_requested"
        before = snapshot(db, client, d.job_id)
        assert client.reserve_dispatch(d.fence, BACKEND, "r1") is False
        assert client.reserve_dispatch(d.fence, BACKEND, "r2") is False
        assert snapshot(db, client, d.job_id) == before


def test_a_malformed_fence_is_qf106_before_a_bad_name(db):
    with db.connect() as client:
        c = new_claim(client)
        broken = fenceq.Fence(c.job_id, c.owner_id, 0, c.claim_token)
        with raises_code("QF106"):
            client.reserve_dispatch(broken, "", "r1")
        with raises_code("QF102"):
            client.reserve_dispatch(c.fence, "", "r1")
        with raises_code("QF102"):
            client.reserve_dispatch(c.fence, BACKEND, "")
        assert client.dispatches() == []


def test_a_backend_name_is_1_to_255_characters(db):
    """design-v6.md: a backend is a name like every other (1-255
    characters, QF102 otherwise)."""
    with db.connect() as client:
        c = new_claim(client)
        with raises_code("QF102"):
            client.reserve_dispatch(c.fence, "b" * 256, "r1")
        assert client.dispatches() == []
        assert client.reserve_dispatch(c.fence, "b" * 255, "r1") is True
        assert live_dispatch(client, c.job_id).backend == "b" * 255


# The fence is judged first --------------------------------------------------------

def test_a_foreign_or_stale_fence_never_reserves_finalizes_replaces_or_releases(db):
    with db.connect() as client:
        c = new_claim(client)
        # No dispatch yet: none of these fences may reserve.
        for wrong in stale_fences(c.fence):
            before = snapshot(db, client, c.job_id)
            assert client.reserve_dispatch(wrong, BACKEND, "r1") is False, wrong
            assert snapshot(db, client, c.job_id) == before
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        # Reserved: a wrong fence gets false where the live one would get
        # true (a retry, finalize, release) or QF305 (another ref).
        for wrong in stale_fences(c.fence):
            for name, call in every_write(client, wrong).items():
                before = snapshot(db, client, c.job_id)
                assert call() is False, (name, wrong)
                assert snapshot(db, client, c.job_id) == before, (name, wrong)
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        # Running: nor may it replace the ref.
        for wrong in stale_fences(c.fence):
            for name, call in every_write(client, wrong).items():
                before = snapshot(db, client, c.job_id)
                assert call() is False, (name, wrong)
                assert snapshot(db, client, c.job_id) == before, (name, wrong)
        assert live_dispatch(client, c.job_id).execution_ref == "x1"


@pytest.mark.parametrize("state", ["reserved", "running"])
def test_an_expired_fence_never_reserves_finalizes_replaces_or_releases(db, state):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        if state == "running":
            assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        lapse(client, c)
        for name, call in every_write(client, c.fence).items():
            before = snapshot(db, client, c.job_id)
            assert call() is False, name
            assert snapshot(db, client, c.job_id) == before, name


def test_the_fence_of_an_earlier_generation_is_dead(db):
    with db.connect() as client:
        first = new_claim(client)
        assert client.release(first.fence) is True
        second = claim(client, "q", owner="w1")
        assert second.generation == 2
        assert client.reserve_dispatch(first.fence, BACKEND, "r1") is False
        assert client.dispatches() == []
        assert client.reserve_dispatch(second.fence, BACKEND, "r1") is True
        for name, call in every_write(client, first.fence).items():
            before = snapshot(db, client, first.job_id)
            assert call() is False, name
            assert snapshot(db, client, first.job_id) == before, name


# finalize_dispatch ---------------------------------------------------------------------

def test_finalize_answers(db):
    with db.connect() as client:
        c = new_claim(client)
        before = snapshot(db, client, c.job_id)
        assert client.finalize_dispatch(c.fence, "r1", "x1") is False      # no dispatch
        assert snapshot(db, client, c.job_id) == before
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = snapshot(db, client, c.job_id)
        assert client.finalize_dispatch(c.fence, "r2", "x1") is False      # another reservation
        assert snapshot(db, client, c.job_id) == before
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        row = live_dispatch(client, c.job_id)
        assert (row.state, row.reservation_ref, row.execution_ref, row.backend) == ("running", "r1", "x1", BACKEND)
        assert raw_dispatch(db, c.job_id)[7] is not None                      # finalized_at
        running = snapshot(db, client, c.job_id)
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True       # a retried call: nothing written
        assert snapshot(db, client, c.job_id) == running
        assert client.finalize_dispatch(c.fence, "r1", "x2") is False      # another execution ref
        assert client.finalize_dispatch(c.fence, "r2", "x1") is False
        assert snapshot(db, client, c.job_id) == running
        assert client.get_job(c.job_id).status == "claimed"


def test_finalize_is_not_refused_by_a_cancel_request(db):
    """The external call was made: what it started must be recorded."""
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.cancel(c.job_id) == "cancel_requested"
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert live_dispatch(client, c.job_id).state == "running"
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True
        assert live_dispatch(client, c.job_id).execution_ref == "x2"


# release_dispatch ------------------------------------------------------------------------

def test_release_dispatch_drops_a_reservation_and_the_claim_may_reserve_again(db):
    with db.connect() as client:
        c = new_claim(client)
        before = snapshot(db, client, c.job_id)
        assert client.release_dispatch(c.fence, "r1") is False             # nothing reserved
        assert snapshot(db, client, c.job_id) == before
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = snapshot(db, client, c.job_id)
        assert client.release_dispatch(c.fence, "r2") is False             # another ref
        assert snapshot(db, client, c.job_id) == before
        assert client.release_dispatch(c.fence, "r1") is True
        assert client.dispatches() == [] and raw_dispatch(db, c.job_id) is None
        assert client.release_dispatch(c.fence, "r1") is False             # already dropped
        job = client.get_job(c.job_id)
        assert (job.status, job.generation, job.attempts) == ("claimed", 1, 1)
        assert client.heartbeat(c.fence) is True                           # the claim stays live
        # Reserve again, under another backend and ref: no conflict.
        assert client.reserve_dispatch(c.fence, "other-system", "r2") is True
        row = live_dispatch(client, c.job_id)
        assert (row.backend, row.reservation_ref, row.state) == ("other-system", "r2", "reserved")


def test_release_dispatch_is_refused_while_running(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        before = snapshot(db, client, c.job_id)
        assert client.release_dispatch(c.fence, "r1") is False
        assert client.release_dispatch(c.fence, "x1") is False
        assert snapshot(db, client, c.job_id) == before


def test_release_dispatch_is_not_refused_by_a_cancel_request(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.cancel(c.job_id) == "cancel_requested"
        assert client.release_dispatch(c.fence, "r1") is True
        assert client.dispatches() == []
        assert client.acknowledge_cancel(c.fence) is True
        assert client.get_job(c.job_id).status == "cancelled"


# replace_dispatch_ref --------------------------------------------------------------------

def test_replace_dispatch_ref_answers(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is False   # no dispatch
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = snapshot(db, client, c.job_id)
        assert client.replace_dispatch_ref(c.fence, "r1", "x2") is False   # only reserved
        assert snapshot(db, client, c.job_id) == before
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        before = snapshot(db, client, c.job_id)
        assert client.replace_dispatch_ref(c.fence, "x-wrong", "x2") is False
        assert client.replace_dispatch_ref(c.fence, "r1", "x2") is False   # the reservation ref is not it
        assert snapshot(db, client, c.job_id) == before
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True
        row = live_dispatch(client, c.job_id)
        assert (row.state, row.reservation_ref, row.execution_ref) == ("running", "r1", "x2")
        moved = snapshot(db, client, c.job_id)
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True    # a retried call: nothing written
        assert snapshot(db, client, c.job_id) == moved
        assert client.replace_dispatch_ref(c.fence, "x1", "x3") is False   # x1 is no longer the ref
        assert snapshot(db, client, c.job_id) == moved
        # The new ref is now what a retried finalize must name.
        assert client.finalize_dispatch(c.fence, "r1", "x1") is False
        assert client.finalize_dispatch(c.fence, "r1", "x2") is True


# release, reap ------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["reserved", "running"])
def test_release_is_refused_while_a_dispatch_is_live(db, state):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        if state == "running":
            assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        before = snapshot(db, client, c.job_id)
        assert client.release(c.fence) is False
        assert client.release(c.fence, run_at=datetime.now(timezone.utc) + timedelta(hours=1)) is False
        assert snapshot(db, client, c.job_id) == before
        if state == "reserved":
            assert client.release_dispatch(c.fence, "r1") is True
            assert client.release(c.fence) is True
            assert client.get_job(c.job_id).status == "pending"


@pytest.mark.parametrize("state", ["reserved", "running"])
@pytest.mark.parametrize("cancel", [False, True])
def test_reap_leaves_a_lapsed_dispatched_job_claimed(db, state, cancel):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(0), max_attempts=5)
        dispatched = new_claim(client)
        plain = new_claim(client, owner="w2")                   # a lapsed claim without a dispatch
        assert client.reserve_dispatch(dispatched.fence, BACKEND, "r1") is True
        if state == "running":
            assert client.finalize_dispatch(dispatched.fence, "r1", "x1") is True
        if cancel:
            assert client.cancel(dispatched.job_id) == "cancel_requested"
        lapse(client, dispatched)
        lapse(client, plain)
        before = snapshot(db, client, dispatched.job_id)
        assert client.reap() == fenceq.ReapResult(requeued=1, failed=0, cancelled=0, expired=0)
        assert client.get_job(plain.job_id).status == "pending"
        assert client.reap() == fenceq.ReapResult(0, 0, 0, 0)
        job = client.get_job(dispatched.job_id)
        assert (job.status, job.cancel_requested, job.last_error) == ("claimed", cancel, None)
        assert snapshot(db, client, dispatched.job_id) == before
        assert [d.job_id for d in client.dispatches()] == [dispatched.job_id]
        ref = "r1" if state == "reserved" else "x1"
        assert [(k.job_id, k.state, k.ref) for k in client.dispatch_repair_candidates(BACKEND)] == [
            (dispatched.job_id, state, ref)]
        # Nobody else can claim it (the requeued job, yes); its lapsed fence still writes nothing.
        assert client.claim_next(["q"], "w3", fenceq.new_claim_token()).job_id == plain.job_id
        assert client.claim_next(["q"], "w3", fenceq.new_claim_token()) is None
        assert client.complete(dispatched.fence) is False


def test_lapsed_dispatches_never_use_up_what_reap_may_settle(db):
    """Dispatched jobs that lapsed first do not hold reap's max_rows: a
    lapsed claim behind them is still requeued, one call at a time."""
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(0), max_attempts=5)
        dispatched = [new_claim(client) for _ in range(3)]
        plain = new_claim(client, owner="w2")
        for c in dispatched:
            assert client.reserve_dispatch(c.fence, BACKEND, "r-" + c.job_id) is True
            lapse(client, c)
        lapse(client, plain)                                    # lapsed last
        assert client.reap(max_rows=1) == fenceq.ReapResult(requeued=1, failed=0, cancelled=0, expired=0)
        assert client.get_job(plain.job_id).status == "pending"
        assert {client.get_job(c.job_id).status for c in dispatched} == {"claimed"}


def test_a_dispatch_of_an_earlier_generation_protects_nothing(db):
    """Live means: the job is claimed at the dispatch's generation. A row
    left by an earlier claim neither keeps reap away, nor refuses release,
    nor conflicts with the new claim's own reservation."""
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(0), max_attempts=5)
        first = new_claim(client)
        assert client.reserve_dispatch(first.fence, BACKEND, "r1") is True
        assert client.finalize_dispatch(first.fence, "r1", "x1") is True
        assert client.fail(first.fence, "external failure") is True      # a retry
        assert client.dispatches() == []
        second = claim(client, "q", owner="w2")
        assert client.dispatches() == []
        assert client.dispatch_repair_candidates(BACKEND) == []
        assert client.release(second.fence) is True
        third = claim(client, "q", owner="w3")
        lapse(client, third)
        assert client.reap().requeued == 1
        fourth = claim(client, "q", owner="w4")
        assert client.reserve_dispatch(fourth.fence, BACKEND, "r2") is True   # not QF305
        row = live_dispatch(client, fourth.job_id)
        assert (row.generation, row.reservation_ref, row.state, row.execution_ref) == (
            fourth.generation, "r2", "reserved", None)


# dispatch_repair_candidates -----------------------------------------------------------------

def test_repair_candidates_page_fairly_and_mark_what_they_return(db):
    """Never checked first (by lapse time), then the oldest check, then job id."""
    with db.connect() as client:
        client.create_queue("q", lease=LONG)
        # Lapse order j3, j2, j1: the opposite of job id order.
        claims = {}
        for job_id in ("j3", "j2", "j1"):
            client.submit("q", "render", job_id=job_id)
        for job_id in ("j3", "j2", "j1"):
            c = claim(client, "q", owner=f"w-{job_id}")
            assert c.job_id == job_id
            claims[job_id] = c
            assert client.reserve_dispatch(c.fence, BACKEND, f"r-{job_id}") is True
        assert client.finalize_dispatch(claims["j2"].fence, "r-j2", "x-j2") is True
        for job_id in ("j3", "j2", "j1"):
            lapse(client, claims[job_id])
        # Not candidates: another backend's lapsed dispatch, a live
        # dispatch, a lapsed claim without a dispatch.
        client.submit("q", "render", job_id="k-other")
        other = claim(client, "q", owner="w-o")
        assert client.reserve_dispatch(other.fence, "other-system", "r-o") is True
        lapse(client, other)
        client.submit("q", "render", job_id="k-live")
        live = claim(client, "q", owner="w-l")
        assert client.reserve_dispatch(live.fence, BACKEND, "r-l") is True
        client.submit("q", "render", job_id="k-plain")
        lapse(client, claim(client, "q", owner="w-p"))

        lapsed_at = {j: client.get_job(j).lease_expires_at for j in claims}
        assert lapsed_at["j3"] < lapsed_at["j2"] < lapsed_at["j1"]

        page1 = client.dispatch_repair_candidates(BACKEND, max_rows=2)
        assert [(k.job_id, k.queue, k.task, k.state, k.ref, k.generation) for k in page1] == [
            ("j3", "q", "render", "reserved", "r-j3", 1), ("j2", "q", "render", "running", "x-j2", 1)]
        assert [k.lapsed_at for k in page1] == [lapsed_at["j3"], lapsed_at["j2"]]
        assert all(k.checked_at is not None for k in page1)
        marks = {d.job_id: d.checked_at for d in client.dispatches()}
        assert marks["j3"] == page1[0].checked_at and marks["j2"] == page1[1].checked_at
        assert marks["j1"] is None and marks["k-live"] is None

        # j1 was never checked: it comes first; then the oldest checks, j2
        # before j3 when both were marked by the same call (job id order).
        page2 = client.dispatch_repair_candidates(BACKEND, max_rows=2)
        assert page2[0].job_id == "j1"
        first_marks_equal = page1[0].checked_at == page1[1].checked_at
        assert page2[1].job_id == ("j2" if first_marks_equal else "j3")
        assert all(k.checked_at is not None for k in page2)
        assert page2[0].checked_at >= page1[1].checked_at

        everything = client.dispatch_repair_candidates(BACKEND)
        assert sorted(k.job_id for k in everything) == ["j1", "j2", "j3"]
        assert client.dispatch_repair_candidates("nobody") == []
        marks_after = {d.job_id: d.checked_at for d in client.dispatches()}
        assert marks_after["k-other"] is None and marks_after["k-live"] is None


def test_repair_candidates_order_by_oldest_check_then_job_id(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG)
        claims = {}
        for job_id in ("b", "a", "c"):
            client.submit("q", "t", job_id=job_id)
            claims[job_id] = claim(client, "q")
            assert client.reserve_dispatch(claims[job_id].fence, BACKEND, f"r-{job_id}") is True
        for job_id in ("b", "a", "c"):
            lapse(client, claims[job_id])
        # Never checked: by lapse time, not job id.
        first = client.dispatch_repair_candidates(BACKEND)
        assert [k.job_id for k in first] == ["b", "a", "c"]
        marks = {k.job_id: k.checked_at for k in first}
        assert None not in marks.values()

        def expected(n):
            return sorted(marks, key=lambda j: (marks[j], j))[:n]

        # Then the oldest mark first, ties by job id (one call may mark its
        # rows with one reading of the clock: then job id decides).
        for n in (1, 2, 1, 3):
            page = client.dispatch_repair_candidates(BACKEND, max_rows=n)
            assert [k.job_id for k in page] == expected(n), (n, marks)
            for k in page:
                assert k.checked_at >= marks[k.job_id]
                marks[k.job_id] = k.checked_at


def test_repair_candidates_bounds(db):
    with db.connect() as client:
        for bad in (0, 100_001):
            with raises_code("QF104"):
                client.dispatch_repair_candidates(BACKEND, max_rows=bad)
        with raises_code("QF102"):
            client.dispatch_repair_candidates("")
        assert client.dispatch_repair_candidates(BACKEND, max_rows=100_000) == []


# adopt_dispatch ------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["reserved", "running"])
def test_adopt_dispatch_takes_a_lapsed_dispatched_claim_over(db, state):
    with db.connect() as client:
        c = new_claim(client, max_attempts=3)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        if state == "running":
            assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        ref = "r1" if state == "reserved" else "x1"
        lapse(client, c)
        [candidate] = client.dispatch_repair_candidates(BACKEND)
        assert candidate.ref == ref
        token = fenceq.new_claim_token()
        adopted = client.adopt_dispatch(c.job_id, BACKEND, ref, "reconciler", token, lease=timedelta(hours=1))
        assert adopted is not None
        assert (adopted.job_id, adopted.owner_id, adopted.generation, adopted.claim_token, adopted.attempt) == (
            c.job_id, "reconciler", 2, token, 1)
        assert adopted.lease_expires_at > datetime.now(timezone.utc) + timedelta(minutes=30)
        job = client.get_job(c.job_id)
        assert (job.status, job.generation, job.attempts, job.owner_id, job.lease_expires_at) == (
            "claimed", 2, 1, "reconciler", adopted.lease_expires_at)
        assert [(a.generation, a.owner_id) for a in client.attempts(c.job_id)] == [(1, "w1"), (2, "reconciler")]
        assert client.recover_claim("reconciler", token) == adopted
        row = live_dispatch(client, c.job_id)
        assert (row.owner_id, row.generation, row.state, row.backend) == ("reconciler", 2, state, BACKEND)
        assert row.checked_at == candidate.checked_at                        # kept
        assert client.dispatch_repair_candidates(BACKEND) == []              # live again
        # The old fence is dead from that moment.
        for name, call in every_write(client, c.fence).items():
            assert call() is False, name
        assert client.heartbeat(c.fence) is False and client.complete(c.fence) is False
        # A second adoption finds a live claim: no row.
        assert client.adopt_dispatch(c.job_id, BACKEND, ref, "other", fenceq.new_claim_token()) is None
        # The adopter goes on under its own fence.
        if state == "reserved":
            assert client.finalize_dispatch(adopted.fence, "r1", "x1") is True
        assert client.complete(adopted.fence, {"done": True}) is True
        assert client.dispatches() == []
        assert client.get_job(c.job_id).attempts == 1


def test_adopt_dispatch_answers_no_row_unless_everything_matches(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        before = snapshot(db, client, c.job_id)
        # The claim is live.
        assert client.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler", fenceq.new_claim_token()) is None
        assert snapshot(db, client, c.job_id) == before
        lapse(client, c)
        before = snapshot(db, client, c.job_id)
        for job_id, backend, ref in ((c.job_id, "other-system", "r1"),       # another backend
                                     (c.job_id, BACKEND, "r2"),             # another ref
                                     ("no-such-job", BACKEND, "r1")):       # unknown job
            assert client.adopt_dispatch(job_id, backend, ref, "reconciler", fenceq.new_claim_token()) is None
            assert snapshot(db, client, c.job_id) == before
        # A lapsed claim without a dispatch is reap's, not an adopter's.
        d = new_claim(client, owner="w2")
        lapse(client, d)
        assert client.adopt_dispatch(d.job_id, BACKEND, "r1", "reconciler", fenceq.new_claim_token()) is None
        assert client.get_job(d.job_id).generation == 1
        # Everything matching: one row.
        assert client.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler", fenceq.new_claim_token()) is not None


def test_adopting_a_running_dispatch_expects_the_execution_ref(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert client.replace_dispatch_ref(c.fence, "x1", "x2") is True
        lapse(client, c)
        before = snapshot(db, client, c.job_id)
        for ref in ("r1", "x1"):
            assert client.adopt_dispatch(c.job_id, BACKEND, ref, "reconciler", fenceq.new_claim_token()) is None
        assert snapshot(db, client, c.job_id) == before
        assert client.adopt_dispatch(c.job_id, BACKEND, "x2", "reconciler", fenceq.new_claim_token()) is not None


def test_adopt_dispatch_with_a_used_token_is_qf301_and_changes_nothing(db):
    with db.connect() as client:
        c = new_claim(client)
        client.submit("q", "t")
        spent = claim(client, "q")                                          # another job's token
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        lapse(client, c)
        before = snapshot(db, client, c.job_id)
        for token in (c.claim_token, spent.claim_token):
            with raises_code("QF301"):
                client.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler", token)
            assert snapshot(db, client, c.job_id) == before
        fresh = fenceq.new_claim_token()
        adopted = client.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler", fresh)
        assert adopted.generation == 2
        # Its token is in the ledger now: no claim may use it again.
        client.submit("q", "t")
        with raises_code("QF301"):
            client.claim_next(["q"], "w", fresh)


def test_adopt_dispatch_is_not_refused_by_a_cancel_request(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert client.cancel(c.job_id) == "cancel_requested"
        lapse(client, c)
        assert client.reap() == fenceq.ReapResult(0, 0, 0, 0)
        adopted = client.adopt_dispatch(c.job_id, BACKEND, "x1", "reconciler", fenceq.new_claim_token())
        assert adopted is not None and adopted.cancel_requested is True
        # The adopter stops the external work, then acknowledges.
        assert client.claim_state(adopted.fence).cancel_requested is True
        assert client.acknowledge_cancel(adopted.fence) is True
        assert client.get_job(c.job_id).status == "cancelled"
        assert client.dispatches() == []


def test_adopt_dispatch_takes_the_queues_lease_by_default(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        lapse(client, c)
        adopted = client.adopt_dispatch(c.job_id, BACKEND, "r1", "reconciler", fenceq.new_claim_token())
        # The queue's lease is ten minutes: far past anything a slow machine takes.
        assert adopted.lease_expires_at > datetime.now(timezone.utc) + timedelta(minutes=5)
        assert client.heartbeat(adopted.fence) is True


# Settling ends a dispatch ---------------------------------------------------------------------

def _settle(client, c, how):
    if how == "complete":
        return client.complete(c.fence)
    if how == "fail-retry":
        return client.fail(c.fence, "external failure")
    if how == "fail-final":
        return client.fail(c.fence, "external failure", retry=False)
    if how == "acknowledge_cancel":
        return client.cancel(c.job_id) == "cancel_requested" and client.acknowledge_cancel(c.fence)
    if how == "cancel-force":
        return client.cancel(c.job_id, force=True) == "cancelled"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["complete", "fail-retry", "fail-final", "acknowledge_cancel", "cancel-force"])
@pytest.mark.parametrize("state", ["reserved", "running"])
def test_settling_the_job_ends_its_dispatch(db, how, state):
    with db.connect() as client:
        c = new_claim(client, max_attempts=3)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        if state == "running":
            assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert _settle(client, c, how) is True
        assert client.dispatches() == []
        status = {"complete": "completed", "fail-retry": "pending", "fail-final": "failed",
                  "acknowledge_cancel": "cancelled", "cancel-force": "cancelled"}[how]
        assert client.get_job(c.job_id).status == status
        # Nothing the old claim held can be written, and nothing is a candidate.
        for name, call in every_write(client, c.fence).items():
            assert call() is False, name
        assert client.dispatch_repair_candidates(BACKEND) == []
        assert client.adopt_dispatch(c.job_id, BACKEND, "r1" if state == "reserved" else "x1",
                                     "reconciler", fenceq.new_claim_token()) is None


def test_purge_deletes_the_dispatch_row_with_its_job(db):
    with db.connect() as client:
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        assert client.finalize_dispatch(c.fence, "r1", "x1") is True
        assert client.complete(c.fence) is True
        assert client.purge(timedelta(0)) == 1
        assert raw_dispatch(db, c.job_id) is None


# requeue_priority -----------------------------------------------------------------------------

def _reaped(client, queue, **submit):
    """A job of ``queue`` claimed and lapsed (not yet reaped)."""
    client.submit(queue, "stalled", job_id="stalled", **submit)
    c = claim(client, queue, owner="w-stalled")
    assert c.job_id == "stalled"
    lapse(client, c)
    return c


def _drain(client, queue):
    order = []
    while (c := client.claim_next([queue], "w", fenceq.new_claim_token())) is not None:
        order.append(c.job_id)
        assert client.complete(c.fence)
    return order


def test_requeue_priority_setting_is_validated_and_compared(db):
    with db.connect() as client:
        assert client.create_queue("q", requeue_priority="first") is True
        assert client.create_queue("q", requeue_priority="first") is False
        with raises_code("QF100"):
            client.create_queue("q", requeue_priority="last")
        assert client.create_queue("k") is True
        assert client.create_queue("k", requeue_priority="keep") is False       # NULL: keep, for a new queue
        with raises_code("QF100"):
            client.create_queue("x", requeue_priority="sometimes")
        with raises_code("QF100"):
            client.alter_queue("q", requeue_priority="sometimes")
        client.alter_queue("q", requeue_priority="last")
        assert client.create_queue("q", requeue_priority="last") is False
        client.alter_queue("q", max_attempts=7)                                  # NULL: unchanged
        assert client.create_queue("q", requeue_priority="last", max_attempts=7) is False


def test_requeue_first_goes_ahead_of_its_priority_never_of_a_higher_one(db):
    with db.connect() as client:
        # A long back-off: "keep" would hold the reaped job back an hour.
        client.create_queue("q", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5,
                            requeue_priority="first")
        stalled = _reaped(client, "q")
        past = datetime.now(timezone.utc) - timedelta(minutes=5)
        client.submit("q", "t", job_id="early", run_at=past)
        client.submit("q", "t", job_id="later-submitted")
        client.submit("q", "t", job_id="high", priority=5)
        client.submit("q", "t", job_id="low-earliest", priority=-1, run_at=past - timedelta(hours=1))
        assert client.reap().requeued == 1
        job = client.get_job(stalled.job_id)
        assert job.status == "pending" and job.run_at < client.get_job("early").run_at
        # Ahead of its own priority's earliest, not of every priority's.
        assert job.run_at > client.get_job("low-earliest").run_at
        assert _drain(client, "q") == ["high", "stalled", "early", "later-submitted", "low-earliest"]


def test_requeue_first_with_nothing_pending_is_due_at_once(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5,
                            requeue_priority="first")
        _reaped(client, "q")
        assert client.reap().requeued == 1
        assert _drain(client, "q") == ["stalled"]


def test_requeue_keep_backs_off_as_today(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5)
        _reaped(client, "q")
        client.submit("q", "t", job_id="other")
        assert client.reap().requeued == 1
        assert client.get_job("stalled").run_at > datetime.now(timezone.utc) + timedelta(minutes=30)
        assert _drain(client, "q") == ["other"]


def test_requeue_last_goes_behind_every_pending_job_of_its_priority(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(0), max_attempts=5, requeue_priority="last")
        client.create_queue("k", lease=LONG, backoff_base=timedelta(0), max_attempts=5)
        far = datetime.now(timezone.utc) + timedelta(hours=1)
        for queue in ("q", "k"):
            client.submit(queue, "t", job_id=f"due-{queue}")
            client.submit(queue, "t", job_id=f"far-{queue}", run_at=far)
            client.submit(queue, "t", job_id=f"farther-low-{queue}", priority=-1, run_at=far + timedelta(hours=1))
            c = client.claim_next([queue], "w", fenceq.new_claim_token())
            assert c.job_id == f"due-{queue}"
            lapse(client, c)
        assert client.reap().requeued == 2
        # last: behind the job due later, but not behind a lower priority's.
        last = client.get_job("due-q").run_at
        assert client.get_job("far-q").run_at < last < client.get_job("farther-low-q").run_at
        # keep, no back-off: due at once, ahead of the job due later.
        assert client.get_job("due-k").run_at < client.get_job("far-k").run_at
        assert _drain(client, "k") == ["due-k"]
        assert _drain(client, "q") == []


def test_a_retry_after_fail_is_not_a_lapse_and_keeps_its_back_off(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, backoff_base=timedelta(hours=1), max_attempts=5,
                            requeue_priority="first")
        client.submit("q", "t", job_id="failing")
        c = claim(client, "q")
        client.submit("q", "t", job_id="other")
        assert client.fail(c.fence, "boom") is True
        assert client.get_job("failing").run_at > datetime.now(timezone.utc) + timedelta(minutes=30)
        assert _drain(client, "q") == ["other"]


def test_a_lapsed_dispatched_job_is_not_requeued_whatever_the_setting(db):
    with db.connect() as client:
        client.create_queue("q", lease=LONG, max_attempts=5, requeue_priority="first")
        c = new_claim(client)
        assert client.reserve_dispatch(c.fence, BACKEND, "r1") is True
        lapse(client, c)
        assert client.reap().requeued == 0
        assert client.get_job(c.job_id).status == "claimed"
