"""Fault tests with real ``fenceq worker`` processes (both backends):
SIGKILL mid-job, SIGSTOP past the lease, SIGTERM drain, cancel round trip.
The worker whose lease must lapse claims with ``SHORT_LEASE``."""

from __future__ import annotations

import signal

from conftest import SHORT_LEASE, read_trace, wait_for

SHORT = ("--lease", f"{SHORT_LEASE}s")


def test_sigkill_mid_job_ends_exactly_once_by_takeover(db, work_queue, trace_file, spawn_worker):
    with db.connect() as client:
        job_id = client.submit(work_queue, "slow", {"trace": str(trace_file), "seconds": 1.0})
        a = spawn_worker("a", "--no-reap", *SHORT)
        wait_for(lambda: any(e["event"] == "start" for e in read_trace(trace_file)), what="a starts the job")
        a.signal(signal.SIGKILL)
        assert a.wait() == -signal.SIGKILL
        held = client.get_job(job_id)
        assert (held.status, held.owner_id, held.generation) == ("claimed", "a", 1)

        b = spawn_worker("b")
        done = wait_for(lambda: (j := client.get_job(job_id)).status == "completed" and j,
                        what="b completes the job")
        assert done.generation == 2 and done.owner_id == "b" and done.result["gen"] == 2
        assert done.result["pid"] == b.pid
        assert [(x.generation, x.owner_id) for x in client.attempts(job_id)] == [(1, "a"), (2, "b")]

        events = read_trace(trace_file)
        assert [(e["event"], e["gen"]) for e in events] == [("start", 1), ("start", 2), ("end", 2)]
        # Each log line is written just after its commit: wait for it rather than race it.
        assert b.wait_event("reaped"), "b's reaper settled the lapsed claim"
        b.wait_event("completed", job_id=job_id)
        assert len(b.find("completed", job_id=job_id)) == 1
        b.signal(signal.SIGTERM)
        assert b.wait() == 0


def test_sigstop_past_lease_then_sigcont_writes_refused_and_handler_told(db, work_queue, trace_file,
                                                                          spawn_worker):
    with db.connect() as client:
        job_id = client.submit(work_queue, "stall", {"trace": str(trace_file), "seconds": 20})
        a = spawn_worker("a", "--no-reap", *SHORT)
        wait_for(lambda: read_trace(trace_file), what="a starts the job")
        a.freeze(db.url)
        frozen = client.get_job(job_id)  # a's lease as the database saw it once a stopped

        b = spawn_worker("b")
        done = wait_for(lambda: (j := client.get_job(job_id)).status == "completed" and j,
                        what="b takes the job over and completes it")
        assert b.wait_event("completed", job_id=job_id)
        assert (done.generation, done.owner_id, done.result) == (2, "b", {"gen": 2})
        # Database times, not the test's clock: b's claim came once a's lease had lapsed
        # (an in-flight heartbeat of a could only have moved that lease later).
        b_claimed_at = next(x.claimed_at for x in client.attempts(job_id) if x.generation == 2)
        assert b_claimed_at >= frozen.lease_expires_at

        a.signal(signal.SIGCONT)
        refused = a.wait_event("complete_refused", job_id=job_id)
        assert refused["generation"] == 1 and refused["current_generation"] == 2
        assert refused["current_owner"] == "b" and refused["current_status"] == "completed"
        # Whichever reached the database first after SIGCONT (the heartbeat or the
        # handler's checkpoint) was refused, and the worker marked the claim lost.
        assert a.wait_event("lease_lost", job_id=job_id)
        mine = [e["event"] for e in read_trace(trace_file) if e["pid"] == a.pid]
        assert mine == ["start", "told", "checkpoint_refused", "end"]

        after = client.get_job(job_id)
        assert (after.status, after.generation, after.owner_id, after.result) == ("completed", 2, "b", {"gen": 2})
        a.signal(signal.SIGTERM)
        assert a.wait() == 0


def test_sigterm_drains_then_releases_unfinished(db, work_queue, trace_file, spawn_worker):
    with db.connect() as client:
        short = client.submit(work_queue, "polite", {"trace": str(trace_file)})  # ends when told to stop
        long = client.submit(work_queue, "slow", {"trace": str(trace_file), "seconds": 30})
        a = spawn_worker("a", "--drain-timeout", "60s", concurrency=2)
        wait_for(lambda: len([e for e in read_trace(trace_file) if e["event"] == "start"]) == 2,
                 what="both jobs start")
        a.signal(signal.SIGTERM)
        a.wait_event("stopping")
        late = client.submit(work_queue, "quick", {"trace": str(trace_file)})
        wait_for(lambda: client.get_job(short).status == "completed", what="the drain lets the short job finish")
        a.signal(signal.SIGTERM)  # a second signal ends the drain: what is unfinished is released now
        assert a.wait() == 0

        assert client.get_job(short).status == "completed"
        released = client.get_job(long)
        assert (released.status, released.attempts, released.generation, released.owner_id) == \
            ("pending", 0, 1, None)
        assert client.get_job(late).generation == 0, "nothing is claimed after the stop request"
        assert a.find("released", job_id=long)
        assert a.find("drain_timeout")


def test_cancel_round_trip(db, work_queue, trace_file, spawn_worker):
    with db.connect() as client:
        job_id = client.submit(work_queue, "cancellable", {"trace": str(trace_file)})
        a = spawn_worker("a")
        wait_for(lambda: read_trace(trace_file), what="the job starts")
        assert client.cancel(job_id) == "cancel_requested"
        done = wait_for(lambda: (j := client.get_job(job_id)).status == "cancelled" and j,
                        what="the worker acknowledges the cancel")
        assert done.generation == 1 and done.lease_expires_at is None and done.pid is None
        assert [e["event"] for e in read_trace(trace_file)] == ["start", "saw_cancel"]
        assert a.wait_event("cancel_requested", job_id=job_id) and a.wait_event("cancelled", job_id=job_id)
        a.signal(signal.SIGTERM)
        assert a.wait() == 0


def test_processes_under_one_supervisor_share_the_queue_and_one_stop(db, work_queue, trace_file, spawn_worker):
    with db.connect() as client:
        a = spawn_worker("a", "--processes", "2")
        wait_for(lambda: len(a.find("worker_started")) == 2, what="both processes start")
        # One job at a time per process (slow jobs leave no claim buffer): both processes run some.
        ids = [client.submit(work_queue, "slow", {"trace": str(trace_file), "seconds": 0.3}) for _ in range(6)]
        done = wait_for(lambda: all(client.get_job(i).status == "completed" for i in ids) and ids,
                        what="the two processes complete every job")
        owners = {client.get_job(i).owner_id for i in done}
        assert owners == {"a:0", "a:1"}, owners
        pids = {e["pid"] for e in read_trace(trace_file)}
        assert len(pids) == 2 and a.pid not in pids
        a.signal(signal.SIGTERM)
        assert a.wait() == 0
        assert len(a.find("worker_stopped")) == 2
