"""The worker's protocol units against an in-memory backend and a manual
clock: lost acknowledgements, uncertain claims, the heartbeat schedule,
wake-ups, polling bounds and the drain. Deterministic: time moves only when
a test moves it, and nothing waits on the wall clock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from datetime import timedelta

import pytest

from fenceq.testing.backend import MemoryBackend as FakeBackend
from fenceq.backends.protocol import CONTROL_CHANNEL, JOBS_CHANNEL
from fenceq.types import Claim, new_claim_token
from fenceq.worker import App, Worker
from fenceq.validate import CheckedJSON
from fenceq.worker.claimer import Claimer
from fenceq.worker.completer import Completer
from fenceq.worker.events import Events
from fenceq.worker.fenced_writer import FencedWriter, Verdict
from fenceq.worker.heartbeater import Heartbeater
from fenceq.worker.pool import Pool
from fenceq.worker.runtime import Runtime
from fenceq.worker.settings import WorkerSettings
from fenceq.worker.state import COUNTS, InFlight, WorkerState
from fenceq.testing.clock import ManualClock, settle, until


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake(clock: ManualClock) -> FakeBackend:
    return FakeBackend(clock)


def settings_of(**options) -> WorkerSettings:
    """A worker's settings as its constructor makes them (nothing is opened)."""
    options = {"queues": ["q"], "owner_id": "w", "reap_interval": None, **options}
    return Worker(App(), url="sqlite:///never-opened.db", **options).settings


def opener(fake: FakeBackend):
    async def open_backend() -> FakeBackend:
        return fake

    return open_backend


async def units(fake: FakeBackend, clock: ManualClock, **options) -> tuple[WorkerState, Pool, FencedWriter]:
    settings = settings_of(**options).for_backend(fake.capabilities)
    state = WorkerState(settings, clock, Events("w"), dict.fromkeys(COUNTS, 0))
    pool = Pool(opener(fake), settings.connections, None)
    await pool.open()
    return state, pool, FencedWriter(state, pool)


def in_flight(state: WorkerState, claim: Claim, lease: float) -> InFlight:
    now = state.clock.monotonic()
    job = InFlight(claim=claim, lease=lease, deadline=now + lease, budget_deadline=float("inf"),
                   next_heartbeat=now + lease * state.settings.heartbeat_fraction, is_async=True,
                   recorded={}, started=now)
    state.inflight[claim.job_id] = job
    return job


def claim_one(fake: FakeBackend, lease: float = 30.0) -> Claim:
    """Submit a job and claim it, as another part of the worker would have."""
    fake.submit("t")
    claim = fake.claim_next(["q"], "w", new_claim_token(), lease=timedelta(seconds=lease))
    assert claim is not None
    return claim


STEP = 1 / 8  # seconds: a clock step that adds up exactly


async def finished(task: asyncio.Task, clock: ManualClock) -> object:
    """Move the clock on until the task is done; its result."""
    await until(task.done, clock, step=STEP)
    return task.result()


async def stopped(runtime: Runtime, task: asyncio.Task, clock: ManualClock) -> None:
    runtime.request_stop()
    await finished(task, clock)


# A lost acknowledgement ----------------------------------------------------------

async def test_complete_whose_answer_was_lost_is_read_back_as_landed(fake, clock):
    state, _, writer = await units(fake, clock)
    job = in_flight(state, claim_one(fake), 30.0)
    fake.lose("complete")  # it commits, then the connection drops before the answer
    assert await finished(asyncio.create_task(writer.complete(job, {"n": 1})), clock) is Verdict.LANDED
    assert fake.applied["complete"] == 2, "the same fenced write was re-sent once (and refused)"
    row = fake.rows[job.claim.job_id]
    assert (row.status, row.generation, row.result) == ("completed", 1, {"n": 1})
    assert fake.called("get_job"), "the job row was read back"


async def test_a_resent_write_that_never_landed_is_refused(fake, clock):
    state, _, writer = await units(fake, clock)
    job = in_flight(state, claim_one(fake, lease=1.0), 1.0)
    fake.drop("complete")  # the first copy never arrived ...
    task = asyncio.create_task(writer.complete(job, None))
    await settle()
    clock.advance(2.0)     # ... and the lease lapsed before the second
    assert await finished(task, clock) is Verdict.REFUSED
    assert fake.rows[job.claim.job_id].status == "claimed"


async def test_a_lost_acknowledgement_on_complete_batch_is_read_back_per_job(fake, clock):
    state, _, writer = await units(fake, clock)
    for _ in range(3):
        fake.submit("t")
    jobs = [in_flight(state, claim, 30.0)
            for claim in fake.claim_batch(["q"], "w", [new_claim_token() for _ in range(3)])]
    fake.lose("complete_batch")
    assert await finished(asyncio.create_task(writer.complete_batch(jobs, [1, 2, 3])), clock) == [Verdict.LANDED] * 3
    assert [fake.rows[j.claim.job_id].result for j in jobs] == [1, 2, 3]


async def test_completions_queued_behind_a_resent_batch_go_out_before_it_is_answered(fake, clock):
    state, _, writer = await units(fake, clock)
    verdicts: dict[str, Verdict] = {}
    completer = Completer(state, writer, lambda job, verdict: verdicts.__setitem__(job.claim.job_id, verdict))
    running = asyncio.create_task(completer.run())
    for _ in range(4):
        fake.submit("t")
    first, second = ([in_flight(state, claim, 30.0)
                      for claim in fake.claim_batch(["q"], "w", [new_claim_token() for _ in range(2)])]
                     for _ in range(2))
    fake.drop("complete_batch")  # the first batch's call never arrives: it waits to be re-sent
    for job in first:
        completer.add(job, CheckedJSON(1, "result"))
    await settle()
    for job in second:
        completer.add(job, CheckedJSON(2, "result"))
    await settle()
    # No time has passed, so the first batch's re-send is still asleep ...
    assert verdicts == {job.claim.job_id: Verdict.ACCEPTED for job in second}
    # ... and it lands once its back-off ends.
    await until(lambda: len(verdicts) == 4, clock, step=STEP)
    assert set(verdicts.values()) == {Verdict.ACCEPTED}
    assert {fake.rows[j.claim.job_id].status for j in first + second} == {"completed"}
    assert [fake.rows[j.claim.job_id].result for j in first + second] == [1, 1, 2, 2]
    running.cancel()


async def test_the_worker_settles_a_job_once_when_completes_answer_is_lost(fake, clock):
    app = App(queues=["q"])

    @app.task("work")
    async def work(ctx):
        return {"done": True}

    job_id = fake.submit("work")
    fake.lose("complete_batch")
    runtime = Runtime(app, settings_of(), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: runtime.counts["completed"], clock, step=STEP)
    await stopped(runtime, task, clock)
    row = fake.rows[job_id]
    assert (row.status, row.generation, row.attempts, row.result) == ("completed", 1, 1, {"done": True})
    assert runtime.counts["completed"] == 1 and runtime.counts["refused"] == 0
    assert len(fake.called("claim_next")) >= 1 and fake.applied["complete_batch"] == 2


async def test_a_finished_handler_frees_its_slot_while_its_completion_is_written(fake, clock):
    app = App(queues=["q"])

    @app.task("work")
    async def work(ctx):
        return None

    first, second = fake.submit("work"), fake.submit("work")
    fake.drop("complete_batch")  # the first completion waits to be re-sent ...
    runtime = Runtime(app, settings_of(concurrency=1), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: fake.called("complete_batch"), clock, step=STEP)
    await settle()
    # ... and, with no time passing, the next job is claimed and run meanwhile.
    assert fake.rows[second].status == "completed" and fake.rows[first].status == "claimed"
    await until(lambda: runtime.counts["completed"] == 2, clock, step=STEP)
    await stopped(runtime, task, clock)
    assert fake.rows[first].status == "completed"


async def test_at_most_concurrency_jobs_wait_on_their_outcome_besides_those_running(fake, clock):
    app = App(queues=["q"])

    @app.task("work")
    async def work(ctx):
        return None

    for operation in ("complete", "complete_batch"):  # no completion arrives while the clock stands still
        fake.drop(operation, times=1000)
    jobs = [fake.submit("work") for _ in range(6)]
    runtime = Runtime(app, settings_of(concurrency=2), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: len([j for j in jobs if fake.rows[j].status == "claimed"]) == 4, clock, step=0)
    await settle()
    assert len([j for j in jobs if fake.rows[j].status == "claimed"]) == 4, "2 settling + 2 running at most"
    runtime.request_stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


# An uncertain claim -------------------------------------------------------------

async def test_an_uncertain_claim_is_recovered_with_its_own_nonce(fake, clock):
    state, pool, _ = await units(fake, clock)
    job_id = fake.submit("t")
    fake.lose("claim_next")       # the claim was made; its answer is lost
    fake.drop("recover_claim", 2)  # and the database is unreachable for a while
    started: list[Claim] = []
    claimer = Claimer(state, pool, lambda claim, sent: started.append(claim))
    await finished(asyncio.create_task(claimer.claim(1)), clock)
    assert [(c.job_id, c.generation) for c in started] == [(job_id, 1)]
    [sent] = fake.called("claim_next")
    assert {asked["claim_token"] for asked in fake.called("recover_claim")} == {sent["claim_token"]}
    assert state.counts["recovered_claims"] == 1
    assert fake.rows[job_id].generation == 1, "never claimed anew"


async def test_a_claim_that_never_arrived_is_not_recovered_and_its_nonce_not_reused(fake, clock):
    state, pool, _ = await units(fake, clock)
    job_id = fake.submit("t")
    fake.drop("claim_next")
    started: list[Claim] = []
    claimer = Claimer(state, pool, lambda claim, sent: started.append(claim))
    await finished(asyncio.create_task(claimer.claim(1)), clock)
    assert started == [] and len(fake.called("recover_claim")) == 1
    await finished(asyncio.create_task(claimer.claim(1)), clock)
    first, second = (call["claim_token"] for call in fake.called("claim_next"))
    assert first != second and [(c.job_id, c.generation) for c in started] == [(job_id, 1)]


async def test_an_uncertain_batch_claim_asks_for_every_nonce(fake, clock):
    state, pool, _ = await units(fake, clock)
    job_ids = [fake.submit("t") for _ in range(3)]
    fake.lose("claim_batch")
    started: list[Claim] = []
    claimer = Claimer(state, pool, lambda claim, sent: started.append(claim))
    await finished(asyncio.create_task(claimer.claim(3)), clock)
    [sent] = fake.called("claim_batch")
    assert [asked["claim_token"] for asked in fake.called("recover_claim")] == sent["claim_tokens"]
    assert sorted(c.job_id for c in started) == sorted(job_ids) and state.counts["recovered_claims"] == 3


# The heartbeat schedule ---------------------------------------------------------

async def test_heartbeats_renew_every_job_together_well_inside_the_lease(fake, clock):
    state, pool, writer = await units(fake, clock, lease=3.0)  # a beat every second
    for _ in range(3):
        fake.submit("t")
    jobs = [in_flight(state, claim, 3.0)
            for claim in fake.claim_batch(["q"], "w", [new_claim_token() for _ in range(3)],
                                          lease=timedelta(seconds=3))]
    task = asyncio.create_task(Heartbeater(state, pool, writer).run())
    for _ in range(240):  # 30 seconds, ten lease lengths
        clock.advance(STEP)
        await settle()
        for job in jobs:
            assert fake.rows[job.claim.job_id].lease_expires_at > fake.now(), "the lease never lapses"
            assert job.deadline > clock.now, "the handler never sees its fence as dead"
    task.cancel()
    beats = [(at, call) for name, at, call in fake.calls if name.startswith("heartbeat")]
    assert all(len(call["job_ids"]) == 3 for _, call in beats), "one call renews every job"
    gaps = [later - earlier for (earlier, _), (later, _) in zip(beats, beats[1:])]
    assert len(beats) == 30 and all(gap == 1.0 for gap in gaps), gaps


async def test_a_refused_heartbeat_tells_the_handler_at_once(fake, clock):
    state, pool, writer = await units(fake, clock, lease=3.0)
    job = in_flight(state, claim_one(fake, lease=3.0), 3.0)
    fake.rows[job.claim.job_id].generation = 2  # taken over meanwhile
    task = asyncio.create_task(Heartbeater(state, pool, writer).run())
    await until(job.lost.is_set, clock, step=STEP)
    task.cancel()
    assert clock.now == 1.0 and job.next_heartbeat == float("inf"), "told at the first beat"


async def test_the_fence_dies_at_the_budget_though_every_heartbeat_is_accepted(fake, clock):
    app = App(queues=["q"])
    contexts = []

    @app.task("long")
    async def long(ctx):
        contexts.append(ctx)
        await asyncio.Event().wait()

    job_id = fake.submit("long")
    runtime = Runtime(app, settings_of(lease=3.0, budget=5.0, drain_timeout=0.1), open_backend=opener(fake),
                      clock=clock)
    task = asyncio.create_task(runtime.run())
    [ctx] = await until(lambda: contexts)
    while clock.now < 5.0:
        assert ctx.fence_live and not ctx.lost.is_set(), "every renewal so far was accepted"
        clock.advance(STEP)
        await settle()
    assert not ctx.fence_live, "the local deadline is the budget, not the last renewal + lease"
    beats = [at for name, at, _ in fake.calls if name == "heartbeat"]
    assert beats[:4] == [1.0, 2.0, 3.0, 4.0] and fake.rows[job_id].budget_expires_at is not None
    await stopped(runtime, task, clock)


# Wake-ups and polling -----------------------------------------------------------

async def test_an_idle_worker_polls_no_less_often_than_poll_interval(fake, clock):
    runtime = Runtime(App(queues=["q"]), settings_of(poll_interval=0.2), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    step = 1 / 64
    for _ in range(192):  # 3 seconds
        clock.advance(step)
        await settle()
    times = [at for name, at, _ in fake.calls if name == "claim_next"]
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert all(gap < 0.05 for gap in gaps[:2]), "backing off from a short first wait"
    assert 0.2 <= max(gaps) <= 0.2 + step, gaps
    await stopped(runtime, task, clock)


async def test_a_notification_wakes_the_claimer_and_checks_a_claim_without_waiting(clock):
    fake = FakeBackend(clock, notifications=True)
    app = App(queues=["q"])
    contexts = []

    @app.task("wait")
    async def wait(ctx):
        contexts.append(ctx)
        await ctx.cancelled.wait()

    runtime = Runtime(app, settings_of(poll_interval=3600, control_poll=3600), open_backend=opener(fake),
                      clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(runtime.started.is_set)
    await settle()
    # From here on the clock stands still: only a notification can wake anything.
    job_id = fake.submit("wait")
    await settle()
    assert contexts == [], "no poll came"
    fake.notify(JOBS_CHANNEL, "other-queue")
    await settle()
    assert contexts == []
    fake.notify(JOBS_CHANNEL, "q")
    [ctx] = await until(lambda: contexts)
    fake.rows[job_id].cancel_requested = True
    fake.notify(CONTROL_CHANNEL, job_id)
    await until(lambda: fake.rows[job_id].status == "cancelled")
    assert ctx.cancel_requested and runtime.counts["cancelled"] == 1
    await stopped(runtime, task, clock)


# Drain ----------------------------------------------------------------------------

def drain_app(contexts: list, finish: asyncio.Event) -> App:
    app = App(queues=["q"])

    @app.task("finishes")
    async def finishes(ctx):
        contexts.append(ctx)
        await finish.wait()
        return "done"

    @app.task("hangs")
    async def hangs(ctx):
        contexts.append(ctx)
        await asyncio.Event().wait()

    return app


async def test_sigterm_drains_running_jobs_then_releases_the_unfinished(fake, clock):
    contexts: list = []
    finish = asyncio.Event()
    done, hung = fake.submit("finishes"), fake.submit("hangs")
    runtime = Runtime(drain_app(contexts, finish), settings_of(concurrency=2, drain_timeout=10),
                      open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run(install_signal_handlers=True))
    await until(lambda: len(contexts) == 2)
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None), \
        "the worker handles SIGTERM (else this test would end the test run)"
    os.kill(os.getpid(), signal.SIGTERM)
    await until(lambda: all(ctx.stopping.is_set() for ctx in contexts))
    late = fake.submit("finishes")
    finish.set()
    await until(lambda: fake.rows[done].status == "completed")
    clock.advance(9.875)
    await settle()
    assert not task.done() and fake.rows[hung].status == "claimed", "still within drain_timeout"
    clock.advance(0.25)
    await until(task.done)
    task.result()
    hung_row = fake.rows[hung]
    assert (hung_row.status, hung_row.attempts, hung_row.generation) == ("pending", 0, 1)
    assert fake.rows[late].generation == 0, "nothing is claimed after the stop request"
    assert runtime.counts["completed"] == 1 and runtime.counts["released"] == 1
    assert [ctx.lost.is_set() for ctx in contexts if ctx.task == "hangs"] == [True]


async def test_a_second_stop_request_releases_at_once(fake, clock):
    contexts: list = []
    hung = fake.submit("hangs")
    runtime = Runtime(drain_app(contexts, asyncio.Event()), settings_of(drain_timeout=3600),
                      open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: contexts)
    runtime.request_stop()
    await settle()
    assert not task.done()
    runtime.request_stop()
    await until(task.done)
    assert fake.rows[hung].status == "pending" and runtime.counts["released"] == 1


# The claim buffer -------------------------------------------------------------------

@pytest.fixture
def buffer_of_three(monkeypatch):
    """The claimer holds three jobs claimed ahead, whatever the rate."""
    def measure_rate(claimer) -> None:
        claimer._state.prefetch = 3

    monkeypatch.setattr(Claimer, "_measure_rate", measure_rate)


async def test_buffered_jobs_keep_their_leases_and_a_stop_gives_them_back_unspent(fake, clock, buffer_of_three):
    contexts: list = []
    hung = fake.submit("hangs")
    ahead = [fake.submit("finishes") for _ in range(3)]
    later = fake.submit("finishes")
    runtime = Runtime(drain_app(contexts, asyncio.Event()), settings_of(concurrency=1, drain_timeout=3600),
                      open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: contexts)
    await settle()
    # One slot runs the hanging job; three wait claimed behind it, and no more.
    assert [fake.rows[j].status for j in ahead] == ["claimed"] * 3 and fake.rows[later].status == "pending"
    assert [ctx.job_id for ctx in contexts] == [hung]
    leases = {j: fake.rows[j].lease_expires_at for j in ahead}
    await until(lambda: all(fake.rows[j].lease_expires_at > leases[j] for j in ahead), clock, step=STEP)
    runtime.request_stop()
    await until(lambda: all(fake.rows[j].status == "pending" for j in ahead), clock, step=0)
    assert not task.done() and fake.rows[hung].status == "claimed", "the running job drains as before"
    assert [(fake.rows[j].attempts, fake.rows[j].generation) for j in ahead] == [(0, 1)] * 3
    assert [ctx.job_id for ctx in contexts] == [hung], "a buffered job never starts after a stop"
    runtime.request_stop()
    await until(task.done)
    assert runtime.counts["released"] == 4 and fake.rows[later].generation == 0


async def test_a_buffered_job_whose_claim_is_lost_is_dropped_unrun(fake, clock, buffer_of_three):
    contexts: list = []
    finish = asyncio.Event()
    first = fake.submit("finishes")
    taken = fake.submit("finishes")
    runtime = Runtime(drain_app(contexts, finish), settings_of(concurrency=1), open_backend=opener(fake),
                      clock=clock)
    events: list = []
    runtime._events.listeners.append(lambda event, fields: events.append((event, fields.get("job_id"))))
    task = asyncio.create_task(runtime.run())
    await until(lambda: contexts)
    await settle()
    assert fake.rows[taken].status == "claimed"
    fake.rows[taken].generation += 1  # taken over meanwhile: this worker's fence is stale
    await until(lambda: ("lease_lost", taken) in events, clock, step=STEP)  # its heartbeat was refused
    finish.set()
    await until(lambda: fake.rows[first].status == "completed", clock, step=STEP)
    await settle()
    assert [ctx.job_id for ctx in contexts] == [first]
    await stopped(runtime, task, clock)


async def test_a_buffered_job_past_its_local_lease_deadline_is_given_back_unrun(fake, clock, buffer_of_three):
    contexts: list = []
    finish = asyncio.Event()
    first, second = fake.submit("finishes"), fake.submit("finishes")
    runtime = Runtime(drain_app(contexts, finish), settings_of(concurrency=1, lease=10), open_backend=opener(fake),
                      clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: contexts)
    await settle()
    assert fake.rows[second].status == "claimed"
    fake.drop("heartbeat_batch", times=1000)  # no renewal reaches the database (the first job's either)
    fake.drop("heartbeat", times=1000)
    clock.advance(10.5)  # past the lease: this worker cannot vouch for the buffered claim any more
    finish.set()
    await until(lambda: fake.called("release"), clock, step=0)
    await settle()
    assert [ctx.job_id for ctx in contexts] == [first], "the buffered job never started"
    runtime.request_stop(now=True)
    await until(task.done)


async def test_plain_handlers_share_kept_threads_which_end_with_the_worker(fake, clock):
    import threading

    app = App(queues=["q"])
    ran_on: list[str] = []

    @app.task("plain")
    def plain(ctx):
        ran_on.append(threading.current_thread().name)

    jobs = [fake.submit("plain") for _ in range(3)]
    earlier = set(threading.enumerate())
    runtime = Runtime(app, settings_of(concurrency=1), open_backend=opener(fake), clock=clock)
    task = asyncio.create_task(runtime.run())
    await until(lambda: all(fake.rows[j].status == "completed" for j in jobs), clock, step=STEP)
    handler_threads = [t for t in set(threading.enumerate()) - earlier if t.name == "fenceq-handler"]
    assert len(handler_threads) == 1 and ran_on == ["fenceq-handler"] * 3, "one slot, one kept thread"
    await stopped(runtime, task, clock)
    handler_threads[0].join(timeout=10)
    assert not handler_threads[0].is_alive()
