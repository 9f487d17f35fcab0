"""Issue 19 §3: the model and the two engines in lockstep.

A Hypothesis state machine runs every step against the pure-Python model of
docs/guarantees.md (fenceq_model.py) and, through the fenceq client, against
PostgreSQL and SQLite at once. It compares every answer and error code, and
at the end of each example every job as the jobs view shows it.

Time is the databases'. Nothing here sets a clock: a lease or ttl is an hour
(never lapses within an example) or SHORT; before each step the machine
sleeps until every short lease or ttl the engines answered (a claim's
lease_expires_at; a lock's ttl counted from after the call) lies SLACK in
the past, so whether a hold has lapsed never depends on how long a step
took. Schedules fire on minute boundaries: no step starts within a second
before one, and a tick that straddles one anyway is thrown away
(``assume``), not compared.

External execution (§19): the four fenced dispatch calls, adopt_dispatch
and the repair page run like the rest; a claim lapses with its dispatch by
a short heartbeat. At the end the dispatches view and every job's attempts
are compared too.

Profiles: FENCEQ_MODEL_EXAMPLES and FENCEQ_MODEL_STEPS (``make model``);
the defaults are the short profile ``make test`` runs.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import sqlite3
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import psycopg
from hypothesis import HealthCheck, Phase, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

import fenceq
from fenceq.backends.sqlite import database_path

import fenceq_model as m

EXAMPLES = int(os.environ.get("FENCEQ_MODEL_EXAMPLES", "50"))
STEPS = int(os.environ.get("FENCEQ_MODEL_STEPS", "30"))
RANDOM = os.environ.get("FENCEQ_MODEL_RANDOM") == "1"   # else the same examples every run
EVERY_STEP = os.environ.get("FENCEQ_MODEL_EVERY_STEP") == "1"   # compare the jobs after each step (slow)
SHRINK = os.environ.get("FENCEQ_MODEL_SHRINK", "1") == "1"

# The disagreements this test found (docs/fuzzing.md, "The model in
# lockstep": M1 to M3) are fixed in version 5 and kept as regression tests
# in test_model_findings.py; the comparison steps around none.

LONG = timedelta(hours=1)
SHORT = timedelta(milliseconds=30)
SLACK = 0.02                       # seconds: clock reading and SQLite's milliseconds
HOUR = 3600.0
ENGINES = ("postgres", "sqlite")
QUEUES = {"q0": dict(max_attempts=2, dead_letter=True), "q1": dict(max_attempts=1, dead_letter=False),
          "qs": dict(max_attempts=1, dead_letter=True)}
OWNERS = ("w0", "w1")
SCHEDULE = "s0"
BACKENDS = ("b0", "b1")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def epoch(value: datetime) -> float:
    return value.timestamp()


class Lockstep(RuleBasedStateMachine):
    """Set up by test_model_and_engines_agree (class attributes: urls)."""

    urls: dict[str, str] = {}
    clients: dict[str, fenceq.Client] = {}

    def __init__(self) -> None:
        super().__init__()
        reset_databases(self.urls)
        self.model = m.Model({q: m.Queue(**s) for q, s in QUEUES.items()})
        for name, client in self.clients.items():
            for queue, settings_ in QUEUES.items():
                client.create_queue(queue, lease=LONG, backoff_base=timedelta(0), **settings_)
        self.ids: dict[str, list[str]] = {e: [] for e in ENGINES}        # engine -> job id per handle
        self.handles: dict[str, dict[str, int]] = {e: {} for e in ENGINES}
        self.fences: list[m.Fence] = []
        self.tokens: list[str] = []
        self.lapse_after = 0.0           # local time after which every short hold has lapsed
        self.next_run: dict[str, float | None] = {}
        self.base = math.floor(time.time())
        self.step = 0
        self.counter = 0

    # Plumbing -------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def now(self) -> tuple:
        """Settle, then the model's 'now' for this step."""
        wait = self.lapse_after - time.time()
        if wait > 0:
            time.sleep(wait)
        if self.schedules_running():
            t = time.time()
            to_boundary = 60 - t % 60
            if to_boundary < 1.0:
                time.sleep(to_boundary + SLACK)
            elif t % 60 < SLACK:
                time.sleep(SLACK)
        self.step += 1
        return (time.time(), self.step)

    def schedules_running(self) -> bool:
        return any(not s.paused for s in self.model.schedules.values())

    def both(self, call: Callable[[str, fenceq.Client], Any]) -> dict[str, tuple]:
        """Each engine's answer: ('ok', value) or ('err', sqlstate); an
        unknown outcome is a failure of the test, not an answer."""
        answers = {}
        for name, client in self.clients.items():
            try:
                answers[name] = ("ok", call(name, client))
            except fenceq.FenceqError as error:
                if error.sqlstate is None:
                    raise
                answers[name] = ("err", error.sqlstate)
        # Keep steps apart: "now" of one step is before "now" of the next on
        # every engine, SQLite's milliseconds included.
        time.sleep(0.002)
        return answers

    def expect(self, expected: Callable[[], Any], answers: dict[str, tuple],
               normalize: Callable[[str, Any], Any] = lambda e, v: v, step: str | None = None) -> Any:
        """Run the model; every engine must answer as it does. The outcome
        report names the step by its caller, unless told."""
        try:
            want = ("ok", expected())
        except m.Refused as refused:
            want = ("err", refused.sqlstate)
        return self.compare(step or sys._getframe(1).f_code.co_name, want, answers, normalize)

    def compare(self, step: str, want: tuple, answers: dict[str, tuple],
                normalize: Callable[[str, Any], Any]) -> Any:
        got = {e: (kind, normalize(e, value) if kind == "ok" else value) for e, (kind, value) in answers.items()}
        OUTCOMES[f"{step}: {outcome_name(step, want)}"] += 1
        assert got["postgres"] == got["sqlite"], f"engines differ: {got}"
        assert got["postgres"] == want, f"model says {want}, engines {got}"
        return want[1] if want[0] == "ok" else None

    def job_id(self, engine: str, handle: int) -> str:
        return self.ids[engine][handle]

    def learn_job(self, handle: int, engine_ids: dict[str, str]) -> None:
        for engine, job_id in engine_ids.items():
            assert len(self.ids[engine]) == handle
            self.ids[engine].append(job_id)
            if job_id is not None:
                self.handles[engine][job_id] = handle

    def by_id(self, job: m.Job) -> m.Job:
        """The job the engines know by this job's id: a purged job's explicit
        id may name a newer job by now."""
        if job.purged and job.explicit_id is not None:
            return self.model.by_explicit_id(job.explicit_id) or job
        return job

    def client_fence(self, engine: str, fence: m.Fence) -> fenceq.Fence:
        return fenceq.Fence(self.job_id(engine, fence.handle), fence.owner, fence.generation, fence.token)

    def claim_view(self, engine: str, claim: fenceq.Claim | None) -> Any:
        if claim is None:
            return None
        return (self.handles[engine].get(claim.job_id), claim.queue, claim.task, claim.payload, claim.priority,
                claim.attempt, claim.max_attempts, claim.owner_id, claim.generation, claim.claim_token,
                claim.cancel_requested, claim.submission_id, claim.checkpoints)

    def model_claim_view(self, job: m.Job | None) -> Any:
        if job is None:
            return None
        return (job.handle, job.queue, job.task, job.payload, job.priority, job.attempts, job.max_attempts,
                job.owner, job.generation, job.token, job.cancel_requested, job.submission_id, job.checkpoints)

    def hold_short_until(self, moment: float) -> None:
        self.lapse_after = max(self.lapse_after, moment + SLACK)

    def learn_letters(self) -> None:
        """The dead-letter id each engine gave a job that failed for good."""
        for job in self.model.live_jobs():
            if job.letters and not job.letters[-1].ids:
                for engine, client in self.clients.items():
                    job.letters[-1].ids[engine] = client.get_job(self.job_id(engine, job.handle)).dlq_id

    def pick(self, items: list, index: int) -> Any:
        return items[index % len(items)]

    @initialize(dispatched=st.booleans())
    def seed(self, dispatched):
        """A job in each queue, one of them claimed: every example starts
        with something to claim and a fence to write with; half of them
        with a reservation under that claim, so that the reconciler's rule
        runs in them."""
        for queue in ("q0", "q1"):
            self.submit(queue, None, None, None, None, None, None, None, None, False, [])
        self.claim(["q0"], "w0", None, False, False)
        if dispatched:
            self.now()
            self.reserve_dispatch(self.fences[0], BACKENDS[0], "r0")

    # Producers --------------------------------------------------------------------
    @rule(queue=st.sampled_from(["q0", "q1"]), payload=st.sampled_from([None, {"n": 1}, {"n": 2}]),
          submission=st.sampled_from([None, None, "s0", "s1", "s2"]),
          job_id=st.sampled_from([None, None, None, "j0", "j1", "fresh"]),
          priority=st.sampled_from([None, 0, 1]), run_at=st.sampled_from([None, None, None, "past", "later"]),
          expires_at=st.sampled_from([None, None, None, "past", "later"]),
          max_attempts=st.sampled_from([None, 1, 2]), active_key=st.sampled_from([None, None, "k0", "k1"]),
          force=st.booleans(), depends=st.lists(st.integers(0, 1000), max_size=2))
    def submit(self, queue, payload, submission, job_id, priority, run_at, expires_at, max_attempts,
               active_key, force, depends):
        times = {None: None, "past": self.base - HOUR, "later": self.base + HOUR}
        depends_on = tuple(self.by_id(self.pick(self.model.jobs, d)).handle for d in depends) \
            if self.model.jobs else ()
        request = m.Request(queue=queue, task="t", payload=payload, submission_id=submission,
                            job_id=self.fresh("j-") if job_id == "fresh" else job_id, priority=priority,
                            run_at=times[run_at], expires_at=times[expires_at], max_attempts=max_attempts,
                            active_key=active_key, force=force, depends_on=depends_on)
        now = self.now()

        def call(engine: str, client: fenceq.Client) -> str:
            return client.submit(
                request.queue, request.task, request.payload, submission_id=request.submission_id,
                job_id=request.job_id, priority=request.priority,
                run_at=None if request.run_at is None else at(request.run_at),
                expires_at=None if request.expires_at is None else at(request.expires_at),
                max_attempts=request.max_attempts, active_key=request.active_key, force=request.force,
                depends_on=[self.job_id(engine, h) for h in request.depends_on] or None)

        answers = self.both(call)
        try:
            handle, created = self.model.submit(request, now)
            want = ("ok", handle)
        except m.Refused as refused:
            want, created = ("err", refused.sqlstate), False
        if created:
            # Learn the new job's ids before comparing (a reused explicit id
            # now names the new job, not a purged one).
            self.learn_job(handle, {e: value if kind == "ok" else None for e, (kind, value) in answers.items()})
        self.compare("submit", want, answers, lambda e, v: self.handles[e].get(v))

    # Workers -------------------------------------------------------------------------
    @rule(queues=st.sampled_from([["q0"], ["q1"], ["q0", "q1"], ["q0", "q1"], ["qs"], ["q0", "q1", "qs"]]),
          owner=st.sampled_from(OWNERS), reuse=st.one_of(st.none(), st.integers(0, 1000)),
          short=st.booleans(), lost=st.booleans())
    def claim(self, queues, owner, reuse, short, lost):
        """Claim; with ``lost`` the answer is dropped and the claim found
        again with recover_claim."""
        token = self.pick(self.tokens, reuse) if reuse is not None and self.tokens else self.fresh("t-")
        now = self.now()
        answers = self.both(lambda e, c: c.claim_next(queues, owner, token, lease=SHORT if short else None))
        if lost:
            recovered = self.both(lambda e, c: c.recover_claim(owner, token))
            for engine in ENGINES:
                # A short lease may lapse between the two calls: no answer to compare.
                if answers[engine][0] == "ok" and not short:
                    assert recovered[engine] == answers[engine], \
                        f"{engine}: recover_claim does not return the lost claim"
        job = self.expect(lambda: self.model_claim_view(self.model.claim(queues, owner, token, short, now)),
                          answers, self.claim_view)
        if token not in self.tokens:
            self.tokens.append(token)
        if job is not None:
            self.fences.append(m.Fence(job[0], owner, job[8], token))
            if short:
                self.hold_short_until(max(epoch(v.lease_expires_at) for _, v in answers.values()))

    @rule(queues=st.sampled_from([["q0"], ["q1"], ["q0", "q1"], ["qs"], ["q0", "q1", "qs"]]),
          owner=st.sampled_from(OWNERS), reuse=st.one_of(st.none(), st.integers(0, 1000)),
          max_jobs=st.sampled_from([1, 2, 3]), short=st.booleans(), lost=st.booleans())
    def claim_jobs(self, queues, owner, reuse, max_jobs, short, lost):
        """Claim several under one nonce; with ``lost`` the answer is
        dropped and the call's claims found again with recover_claim."""
        nonce = self.pick(self.tokens, reuse) if reuse is not None and self.tokens else self.fresh("n-")
        now = self.now()
        answers = self.both(lambda e, c: c.claim_jobs(queues, owner, nonce, max_jobs,
                                                      lease=SHORT if short else None))
        if lost:
            recovered = self.both(lambda e, c: c.recover_claims(owner, nonce))
            for engine in ENGINES:
                if answers[engine][0] == "ok" and not short:
                    assert recovered[engine] == answers[engine], \
                        f"{engine}: recover_claim does not return the lost call's claims"
        jobs = self.expect(
            lambda: [self.model_claim_view(j) for j in self.model.claim_jobs(queues, owner, nonce, max_jobs,
                                                                               short, now)],
            answers, lambda e, claims: [self.claim_view(e, c) for c in claims])
        if nonce not in self.tokens:
            self.tokens.append(nonce)
        for job in jobs or ():
            self.fences.append(m.Fence(job[0], owner, job[8], nonce))
        if short and jobs:
            self.hold_short_until(max(epoch(c.lease_expires_at) for _, claims in answers.values() for c in claims))

    @rule(token=st.integers(0, 1000), owner=st.sampled_from(OWNERS))
    def recover_claim(self, token, owner):
        assume(self.tokens)
        token = self.pick(self.tokens, token)
        self.now()
        answers = self.both(lambda e, c: c.recover_claims(owner, token))
        self.expect(lambda: [self.model_claim_view(j) for j in self.model.recover(owner, token)], answers,
                    lambda e, claims: [self.claim_view(e, c) for c in claims])

    def pick_fence(self, index: int, tamper: str) -> m.Fence:
        fence = self.pick(self.fences, index)
        if tamper == "owner":
            return m.Fence(fence.handle, "intruder", fence.generation, fence.token)
        if tamper == "token":
            return m.Fence(fence.handle, fence.owner, fence.generation, "forged")
        if tamper == "generation":
            return m.Fence(fence.handle, fence.owner, fence.generation + 1, fence.token)
        return fence

    fence_args = dict(index=st.integers(0, 1000), tamper=st.sampled_from([None, None, None, None, "owner", "token",
                                                                          "generation"]))

    @precondition(lambda self: self.fences)
    @rule(**fence_args, short=st.sampled_from([False, False, True]))
    def heartbeat(self, index, tamper, short):
        fence = self.pick_fence(index, tamper)
        self.renew(fence, short, self.now())

    def renew(self, fence: m.Fence, short: bool, now: tuple) -> None:
        """A short heartbeat lets a live claim lapse: the only way a claim
        that holds a dispatch lapses here."""
        answers = self.both(lambda e, c: c.heartbeat(self.client_fence(e, fence), lease=SHORT if short else None))
        if short:
            self.hold_short_until(time.time() + SHORT.total_seconds())
        self.expect(lambda: self.model.renew(fence, short, now), answers, step="heartbeat")

    @precondition(lambda self: self.fences)
    @rule(**fence_args, step=st.sampled_from(["a", "b"]), value=st.sampled_from([1, "x", {"k": [1]}]))
    def checkpoint(self, index, tamper, step, value):
        fence = self.pick_fence(index, tamper)
        self.now()
        answers = self.both(lambda e, c: c.checkpoint(self.client_fence(e, fence), step, value))
        self.expect(lambda: self.model.checkpoint(fence, step, value), answers)

    @precondition(lambda self: self.fences)
    @rule(**fence_args, value=st.sampled_from([None, 0.5, {"done": 3}]))
    def progress(self, index, tamper, value):
        fence = self.pick_fence(index, tamper)
        self.now()
        answers = self.both(lambda e, c: c.progress(self.client_fence(e, fence), value))
        self.expect(lambda: self.model.report_progress(fence, value), answers)

    @precondition(lambda self: self.fences)
    @rule(**fence_args, result=st.sampled_from([None, {"ok": True}]))
    def complete(self, index, tamper, result):
        fence = self.pick_fence(index, tamper)
        now = self.now()
        answers = self.both(lambda e, c: c.complete(self.client_fence(e, fence), result))
        self.expect(lambda: self.model.complete(fence, result, now), answers)

    @precondition(lambda self: self.fences)
    @rule(**fence_args, retry=st.booleans(), later=st.booleans())
    def fail(self, index, tamper, retry, later):
        fence = self.pick_fence(index, tamper)
        now = self.now()
        retry_at = at(self.base + HOUR) if later else None
        answers = self.both(lambda e, c: c.fail(self.client_fence(e, fence), "boom", retry=retry, retry_at=retry_at))
        self.expect(lambda: self.model.fail(fence, "boom", retry, later, now), answers)
        self.learn_letters()

    @precondition(lambda self: self.fences)
    @rule(**fence_args, later=st.booleans())
    def release(self, index, tamper, later):
        fence = self.pick_fence(index, tamper)
        now = self.now()
        run_at = at(self.base + HOUR) if later else None
        answers = self.both(lambda e, c: c.release(self.client_fence(e, fence), run_at=run_at))
        self.expect(lambda: self.model.release(fence, later, now), answers)

    @precondition(lambda self: self.fences)
    @rule(**fence_args, action=st.sampled_from(["claim_state", "set_pid", "acknowledge_cancel"]))
    def claim_control(self, index, tamper, action):
        fence = self.pick_fence(index, tamper)
        now = self.now()
        if action == "claim_state":
            answers = self.both(lambda e, c: c.claim_state(self.client_fence(e, fence)))
            self.expect(lambda: self.model.claim_state(fence), answers,
                        lambda e, v: None if v is None else (v.cancel_requested, v.pid))
        elif action == "set_pid":
            answers = self.both(lambda e, c: c.set_pid(self.client_fence(e, fence), 4242))
            self.expect(lambda: self.model.set_pid(fence, 4242), answers)
        else:
            answers = self.both(lambda e, c: c.acknowledge_cancel(self.client_fence(e, fence)))
            self.expect(lambda: self.model.acknowledge_cancel(fence, now), answers)

    # External execution (§19) -------------------------------------------------------
    def target_fence(self, index: int, tamper: str | None, aim: str) -> m.Fence:
        """A fence the model holds live ("live"), or live with a live
        dispatch ("dispatched"), when there is one; else any: a dispatch's
        life takes several steps under one live claim."""
        fences = [f for f in self.fences if (job := self.model.live(f)) is not None
                  and (aim == "live" or self.model.live_dispatch(job) is not None)] if aim != "any" else []
        return self.pick(fences, index) if fences else self.pick_fence(index, tamper)

    # The worker's calls and the reconciler's are one rule each, so that
    # Hypothesis' swarm testing (each example leaves some rules out) seldom
    # leaves out one link of a dispatch's life.
    @precondition(lambda self: self.fences)
    @rule(**fence_args, aim=st.sampled_from(["any", "live", "dispatched"]),
          action=st.sampled_from(["reserve", "reserve", "finalize", "finalize", "release", "replace", "lapse",
                                  "lapse"]),
          backend=st.sampled_from(BACKENDS), reservation=st.sampled_from(["r0", "r1"]),
          execution=st.sampled_from(["x0", "x1"]), moved_to=st.sampled_from(["x0", "x1", "x2"]))
    def dispatch(self, index, tamper, aim, action, backend, reservation, execution, moved_to):
        """"lapse" lets a claim that holds a dispatch lapse, when there is
        one (the heartbeat rule lets any claim lapse)."""
        fence = self.target_fence(index, tamper, "dispatched" if action == "lapse" else aim)
        now = self.now()
        if action == "lapse":
            self.renew(fence, True, now)
        elif action == "reserve":
            self.reserve_dispatch(fence, backend, reservation)
        elif action == "finalize":
            self.finalize_dispatch(fence, reservation, execution)
        elif action == "release":
            self.release_dispatch(fence, reservation)
        else:
            self.replace_dispatch_ref(fence, execution, moved_to)

    # One method per call: the outcome report names the call.
    def reserve_dispatch(self, fence: m.Fence, backend: str, reservation: str) -> None:
        answers = self.both(lambda e, c: c.reserve_dispatch(self.client_fence(e, fence), backend, reservation))
        self.expect(lambda: self.model.reserve_dispatch(fence, backend, reservation), answers)

    def finalize_dispatch(self, fence: m.Fence, reservation: str, execution: str) -> None:
        answers = self.both(lambda e, c: c.finalize_dispatch(self.client_fence(e, fence), reservation, execution))
        self.expect(lambda: self.model.finalize_dispatch(fence, reservation, execution), answers)

    def release_dispatch(self, fence: m.Fence, reservation: str) -> None:
        answers = self.both(lambda e, c: c.release_dispatch(self.client_fence(e, fence), reservation))
        self.expect(lambda: self.model.release_dispatch(fence, reservation), answers)

    def replace_dispatch_ref(self, fence: m.Fence, expected: str, execution: str) -> None:
        answers = self.both(lambda e, c: c.replace_dispatch_ref(self.client_fence(e, fence), expected, execution))
        self.expect(lambda: self.model.replace_dispatch_ref(fence, expected, execution), answers)

    def dispatched(self) -> bool:
        """Some job holds a dispatch record (live or left by an earlier claim)."""
        return any(job.dispatch is not None for job in self.model.live_jobs())

    @precondition(dispatched)
    @rule(action=st.sampled_from(["adopt", "adopt", "repair"]), index=st.integers(0, 1000),
          aim=st.sampled_from(["any", "dispatched", "lapsed", "lapsed"]), recorded=st.booleans(),
          backend=st.sampled_from(BACKENDS), ref=st.sampled_from(["r0", "r1", "x0", "x1"]),
          owner=st.sampled_from(OWNERS), reuse=st.one_of(st.none(), st.none(), st.integers(0, 1000)),
          short=st.booleans(), max_rows=st.sampled_from([None, 1, 2]))
    def reconcile(self, action, index, aim, recorded, backend, ref, owner, reuse, short, max_rows):
        if action == "adopt":
            self.adopt_dispatch(index, aim, recorded, backend, ref, owner, reuse, short)
        else:
            self.repair_candidates(backend, max_rows)

    def adopt_dispatch(self, index: int, aim: str, recorded: bool, backend: str, ref: str, owner: str,
                       reuse: int | None, short: bool) -> None:
        """A job with a live dispatch ("dispatched"), one whose claim lapsed
        too ("lapsed"), when there is one, else any job; with ``recorded``,
        under its dispatch's own backend and ref."""
        jobs = [j for j in self.model.live_jobs() if self.model.live_dispatch(j) is not None
                and (aim == "dispatched" or j.short_lease)] if aim != "any" else []
        job = self.pick(jobs, index) if jobs else self.by_id(self.pick(self.model.jobs, index))
        if recorded and self.model.live_dispatch(job) is not None:
            backend, ref = job.dispatch.backend, job.dispatch.recorded_ref
        token = self.pick(self.tokens, reuse) if reuse is not None and self.tokens else self.fresh("t-")
        now = self.now()
        answers = self.both(lambda e, c: c.adopt_dispatch(self.job_id(e, job.handle), backend, ref, owner, token,
                                                          lease=SHORT if short else None))
        adopted = self.expect(
            lambda: self.model_claim_view(self.model.adopt_dispatch(job.handle, backend, ref, owner, token, short, now)),
            answers, self.claim_view)
        if token not in self.tokens:
            self.tokens.append(token)
        if adopted is not None:
            self.fences.append(m.Fence(job.handle, owner, adopted[8], token))
            if short:
                self.hold_short_until(max(epoch(v.lease_expires_at) for _, v in answers.values()))

    def repair_candidates(self, backend: str, max_rows: int | None) -> None:
        """The page's rows, in the model's order; within a tie (rows checked
        by the same call) each engine's own job id order. A page that would
        end inside a tie asks for every row instead: the engines' job ids
        differ, and so would the rows they mark."""
        now = self.now()
        lapsed = self.model.lapsed_dispatches(backend)
        keys = {job.handle: self.model.repair_key(job) for job in lapsed}
        if max_rows is not None and max_rows < len(lapsed) and \
                keys[lapsed[max_rows - 1].handle] == keys[lapsed[max_rows].handle]:
            max_rows = None
        answers = self.both(lambda e, c: c.dispatch_repair_candidates(backend, max_rows=max_rows))

        def page(engine: str, rows: list) -> tuple:
            handles = [self.handles[engine].get(row.job_id, -1) for row in rows]
            order = [(keys.get(h, (2, 0)), row.job_id) for h, row in zip(handles, rows)]
            view = sorted(((h, row.queue, row.task, row.state, row.ref, row.generation, row.lapsed_at is not None,
                            row.checked_at is not None) for h, row in zip(handles, rows)),
                          key=lambda row: (keys.get(row[0], (2, 0)), row[0]))
            return tuple(view), order == sorted(order)

        self.expect(lambda: (tuple(
            (job.handle, job.queue, job.task, job.dispatch.state, job.dispatch.recorded_ref, job.generation, True, True)
            for job in self.model.dispatch_repair_candidates(backend, max_rows or 100, now)), True), answers, page)

    @rule()
    def reap(self):
        now = self.now()
        answers = self.both(lambda e, c: c.reap())
        self.expect(lambda: self.model.reap(now), answers,
                    lambda e, v: (v.requeued, v.failed, v.cancelled, v.expired))
        self.learn_letters()

    # Operators -------------------------------------------------------------------
    @precondition(lambda self: self.model.jobs)
    @rule(index=st.integers(0, 1000), force=st.booleans())
    def cancel(self, index, force):
        job = self.by_id(self.pick(self.model.jobs, index))
        now = self.now()
        answers = self.both(lambda e, c: c.cancel(self.job_id(e, job.handle), force=force))
        self.expect(lambda: self.model.cancel(job.handle, force, now), answers)

    @rule(forget=st.booleans())
    def purge(self, forget):
        self.now()
        answers = self.both(lambda e, c: c.purge(timedelta(0), submissions_older_than=timedelta(0) if forget else None))
        self.expect(lambda: self.model.purge(forget), answers)

    @rule(index=st.integers(0, 1000), replay=st.booleans())
    def dead_letter(self, index, replay):
        letters = [(job.handle, i) for job in self.model.jobs for i in range(len(job.letters))]
        assume(letters)
        handle, i = self.pick(letters, index)
        now = self.now()
        letter_ids = self.model.jobs[handle].letters[i].ids
        if replay:
            answers = self.both(lambda e, c: c.replay_dead_letter(letter_ids[e]))
            self.expect(lambda: handle if self.model.replay_dead_letter(handle, i, now) else None, answers,
                        lambda e, v: None if v is None else self.handles[e].get(v))
        else:
            answers = self.both(lambda e, c: c.discard_dead_letter(letter_ids[e]))
            self.expect(lambda: self.model.discard_dead_letter(handle, i), answers)

    @rule(queue=st.sampled_from(["q0", "q1"]), paused=st.booleans())
    def pause(self, queue, paused):
        self.now()
        answers = self.both(lambda e, c: c.pause_queue(queue) if paused else c.resume_queue(queue))
        self.expect(lambda: self.model.pause(queue, paused), answers)

    # Schedules ---------------------------------------------------------------------
    @rule(payload=st.sampled_from([{"s": 1}, {"s": 2}]), paused=st.booleans())
    def set_schedule(self, payload, paused):
        self.now()
        answers = self.both(lambda e, c: c.set_schedule(SCHEDULE, "qs", "tick", "* * * * *", payload, paused=paused))
        self.expect(lambda: self.model.set_schedule(SCHEDULE, "qs", "tick", payload, paused), answers)
        self.learn_schedule()

    def learn_schedule(self) -> dict[str, Any]:
        views = {e: {s.schedule: s for s in c.schedules()}[SCHEDULE] for e, c in self.clients.items()}
        runs = {e: v.next_run_at for e, v in views.items()}
        assert runs["postgres"] == runs["sqlite"], f"next_run_at differs: {runs}"
        self.next_run[SCHEDULE] = None if runs["postgres"] is None else epoch(runs["postgres"])
        return views

    @rule()
    def tick(self):
        now = self.now()
        answers = self.both(lambda e, c: c.tick())
        # A tick that straddled a minute boundary is not compared. Without a
        # running schedule it submits nothing either way: no assume, which
        # would make the example's outcome hang on the clock (Hypothesis
        # replays a prefix and calls a different outcome flaky).
        assume(not self.schedules_running()
               or math.floor(now[0] / 60) == math.floor((time.time() + SLACK) / 60))
        next_run = self.next_run.get(SCHEDULE)
        schedule = self.model.schedules.get(SCHEDULE)
        due = schedule is not None and not schedule.paused and next_run is not None and next_run <= now[0]
        self.expect(lambda: 1 if due else 0, answers)
        if due:
            views = self.learn_schedule()
            occurrence = math.floor(now[0] / 60) * 60.0
            for engine, view in views.items():
                assert epoch(view.last_run_at) == occurrence, f"{engine}: tick submitted another occurrence"
            handle = self.model.tick_submit(SCHEDULE, occurrence)
            self.model.jobs[handle].submission_id = (
                f"fenceq:schedule:{SCHEDULE}:{at(occurrence).strftime('%Y-%m-%dT%H:%M:%SZ')}")
            self.learn_job(handle, {e: v.last_job_id for e, v in views.items()})

    # Locks ---------------------------------------------------------------------------
    @rule(lock=st.sampled_from(["L0", "L1"]), owner=st.sampled_from(OWNERS),
          action=st.sampled_from(["acquire", "renew", "release", "check"]), short=st.booleans(),
          token=st.integers(0, 3))
    def lock(self, lock, owner, action, short, token):
        self.now()
        ttl = SHORT if short else LONG
        if action == "acquire":
            answers = self.both(lambda e, c: c.acquire_lock(lock, owner, ttl))
            self.expect(lambda: self.model.acquire_lock(lock, owner, short), answers)
        elif action == "renew":
            answers = self.both(lambda e, c: c.renew_lock(lock, owner, token + 1, ttl))
            self.expect(lambda: self.model.renew_lock(lock, owner, token + 1, short), answers)
        elif action == "release":
            answers = self.both(lambda e, c: c.release_lock(lock, owner, token + 1))
            self.expect(lambda: self.model.release_lock(lock, owner, token + 1), answers)
        else:
            answers = self.both(lambda e, c: c.check_lock(lock, token + 1))
            self.expect(lambda: self.model.check_lock(lock, token + 1), answers)
        if short and action in ("acquire", "renew"):
            self.hold_short_until(time.time() + SHORT.total_seconds())

    # Time -------------------------------------------------------------------------------
    @rule(pause=st.sampled_from([0.0, 0.01, 0.05]))
    def advance_clock(self, pause):
        """Lets every short lease and ttl lapse (now() sleeps past them),
        and then some more."""
        self.now()
        time.sleep(pause)

    # The jobs view at the end of the example -------------------------------------
    @invariant()
    def jobs_agree_now(self):
        if EVERY_STEP:
            self.compare_jobs()

    def teardown(self):
        try:
            self.compare_jobs()
        finally:
            super().teardown()

    def compare_jobs(self) -> None:
        counts = {e: count_jobs(url) for e, url in self.urls.items()}
        assert counts["postgres"] == counts["sqlite"] == len(self.model.live_jobs()), \
            f"jobs view rows {counts}, model {len(self.model.live_jobs())}"
        for job in self.model.jobs:
            views = {e: c.get_job(self.job_id(e, job.handle)) for e, c in self.clients.items()}
            if job.purged:
                assert all(v is None or self.handles[e].get(v.job_id) != job.handle for e, v in views.items()), \
                    f"job {job.handle} was purged"
                continue
            # Dependencies enter the fingerprint as each engine's own job ids.
            rows = {e: self.job_row(v, with_fingerprint=not job.depends_on) for e, v in views.items()}
            assert rows["postgres"] == rows["sqlite"], f"job {job.handle}: engines differ: {rows}"
            want = (job.queue, job.task, job.payload, job.priority, job.status, job.attempts, job.max_attempts,
                    job.generation, job.owner if job.status == "claimed" else rows["postgres"][8],
                    job.cancel_requested if job.status == "claimed" else rows["postgres"][9], job.result,
                    job.last_error, job.submission_id, job.active_key, len(job.waiting_on)
                    if job.status == "pending" else rows["postgres"][14], job.progress,
                    bool(job.letters) if job.status == "failed" else rows["postgres"][16])
            assert rows["postgres"][:17] == want, f"job {job.handle}: model {want}, engines {rows['postgres']}"
            attempts = {e: sorted((a.generation, a.owner_id) for a in c.attempts(self.job_id(e, job.handle)))
                        for e, c in self.clients.items()}
            assert attempts["postgres"] == attempts["sqlite"] == job.claims, \
                f"job {job.handle}: attempts {attempts}, model {job.claims}"
        dispatches = {e: sorted((self.handles[e].get(d.job_id, -1), d.queue, d.backend, d.state, d.reservation_ref,
                                 d.execution_ref, d.owner_id, d.generation, d.lease_expires_at is not None,
                                 d.checked_at is not None) for d in c.dispatches(limit=500))
                      for e, c in self.clients.items()}
        live = sorted((job.handle, job.queue, d.backend, d.state, d.reservation_ref, d.execution_ref, job.owner,
                       job.generation, True, d.checked_step is not None)
                      for job in self.model.live_jobs() if (d := self.model.live_dispatch(job)) is not None)
        assert dispatches["postgres"] == dispatches["sqlite"] == live, \
            f"dispatches view: engines {dispatches}, model {live}"

    def job_row(self, job: fenceq.Job, with_fingerprint: bool) -> tuple:
        return (job.queue, job.task, job.payload, job.priority, job.status, job.attempts, job.max_attempts,
                job.generation, job.owner_id, job.cancel_requested, job.result, job.last_error, job.submission_id,
                job.active_key, job.blocked_by, job.progress, job.dlq_id is not None,
                job.pid, job.fingerprint if with_fingerprint else None,
                job.lease_expires_at is None, job.finished_at is None, job.progress_at is None)


# Databases --------------------------------------------------------------------------

OUTCOMES: collections.Counter = collections.Counter()   # "rule: outcome" -> compared steps


def outcome_name(step: str, answer: tuple) -> str:
    kind, value = answer
    if kind == "err":
        return value
    if value is None or isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):         # claims of a call, or of a recovered nonce
        return {0: "none", 1: "one"}.get(len(value), "several")
    if step in ("tick", "purge"):       # a count
        return "0" if value == 0 else "more than 0"
    if step == "repair_candidates":     # (rows, in order)
        return "empty" if not value[0] else "a page"
    return "a value"


def reset_databases(urls: dict[str, str]) -> None:
    """Empty every fenceq table but the schema's own records, on both."""
    with psycopg.connect(urls["postgres"], autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'fenceq' AND c.relkind IN ('r', 'p') AND c.relname LIKE '\\_%'"
            " AND c.relname NOT IN ('_meta')")]
        conn.execute("TRUNCATE " + ", ".join(f"fenceq.{t}" for t in tables))
    with contextlib.closing(sqlite3.connect(database_path(urls["sqlite"]), isolation_level=None)) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'fenceq\\_%' ESCAPE '\\'"
            " AND name NOT IN ('fenceq_meta')")]
        conn.execute("BEGIN IMMEDIATE")
        for table in tables:
            conn.execute(f'DELETE FROM "{table}"')
        conn.execute("COMMIT")


def count_jobs(url: str) -> int:
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_path(url))) as conn:
            return conn.execute("SELECT count(*) FROM fenceq_jobs").fetchone()[0]
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM fenceq.jobs").fetchone()[0]


@contextlib.contextmanager
def lockstep_on(pg, sqlite_db):
    urls = {"postgres": pg.url, "sqlite": sqlite_db.url}
    Lockstep.urls = urls
    Lockstep.clients = {e: fenceq.connect(u) for e, u in urls.items()}
    try:
        yield
    finally:
        for client in Lockstep.clients.values():
            client.close()


def test_model_and_engines_agree(pg, sqlite_db):
    try:
        with lockstep_on(pg, sqlite_db):
            run_state_machine_as_test(Lockstep, settings=settings(
                max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not RANDOM,
                suppress_health_check=list(HealthCheck), database=None, print_blob=True,
                report_multiple_bugs=False,
                phases=list(Phase) if SHRINK else [Phase.explicit, Phase.reuse, Phase.generate]))
    finally:
        if os.environ.get("FENCEQ_MODEL_REPORT"):
            with open(os.environ["FENCEQ_MODEL_REPORT"], "w") as report:
                json.dump({"examples": EXAMPLES, "steps": STEPS, "random": RANDOM,
                           "compared": sum(OUTCOMES.values()), "outcomes": dict(sorted(OUTCOMES.items()))},
                          report, indent=1)


def test_a_dispatch_life_in_lockstep(pg, sqlite_db):
    """The short profile's random examples reach an adoption only now and
    then: one dispatch's whole life (§19), every step compared as in the
    random examples, and a reservation dropped under another claim."""
    def dispatch(fence, action, backend="b0", reservation="r0", execution="x0", moved_to="x1"):
        machine.dispatch(fence, None, "any", action, backend, reservation, execution, moved_to)

    def adopt(backend, ref, owner="w1", reuse=None):
        machine.reconcile("adopt", 0, "lapsed", False, backend, ref, owner, reuse, False, None)

    with lockstep_on(pg, sqlite_db):
        machine = Lockstep()
        machine.seed(dispatched=True)              # job 0 claimed (fence 0), reserved under b0/r0
        dispatch(0, "reserve", reservation="r1")   # QF305
        dispatch(0, "reserve")                     # a retried call: true
        machine.release(0, None, False)            # false: the dispatch is live
        dispatch(0, "finalize")                    # running as x0
        dispatch(0, "finalize", execution="x1")    # false: running under x0
        dispatch(0, "release")                     # false: running
        dispatch(0, "replace", execution="x0", moved_to="x1")
        adopt("b0", "x1")                          # no row: the claim is live
        dispatch(0, "lapse")
        machine.reap()                             # leaves it claimed
        machine.cancel(0, False)                   # cancel_requested
        machine.reap()                             # leaves it claimed still
        machine.reconcile("repair", 0, "any", False, "b1", "r0", "w1", None, False, None)   # empty
        machine.reconcile("repair", 0, "any", False, "b0", "r0", "w1", None, False, 1)      # job 0
        adopt("b1", "x1")                          # no row: another backend
        adopt("b0", "x0")                          # no row: the ref it ran under before
        adopt("b0", "x1", reuse=0)                 # QF301: the seed's token
        adopt("b0", "x1")                          # the claim: fence 1
        dispatch(0, "finalize", execution="x1")    # the old fence writes nothing
        machine.complete(0, None, None)
        machine.claim_control(1, None, "acknowledge_cancel")   # the end: cancelled
        machine.claim(["q1"], "w0", None, False, False)        # job 1: fence 2
        dispatch(2, "reserve", backend="b1")
        dispatch(2, "release")                     # dropped: never called
        machine.release(2, None, False)            # now it may be released
        machine.teardown()
    adopted = machine.model.jobs[0]
    assert (adopted.status, adopted.claims, adopted.attempts) == ("cancelled", [(1, "w0"), (2, "w1")], 1)
    assert machine.model.jobs[1].status == "pending"


def test_a_call_of_several_in_lockstep(pg, sqlite_db):
    """The short profile's random examples seldom find several jobs due at
    once: one claim_jobs call of three, its answer lost and recovered, then
    each job settled in turn, every step compared as in the random
    examples, until purge frees the call's nonce with its last job."""
    with lockstep_on(pg, sqlite_db):
        machine = Lockstep()
        machine.seed(dispatched=False)             # job 0 (q0) claimed: fence 0; job 1 pending in q1
        for _ in range(2):
            machine.submit("q1", None, None, None, None, None, None, None, None, False, [])
        machine.claim_jobs(["q1"], "w1", None, 3, False, True)   # jobs 1-3 under one nonce, recovered
        nonce = machine.tokens[-1]
        machine.recover_claim(len(machine.tokens) - 1, "w1")     # all three
        machine.recover_claim(len(machine.tokens) - 1, "w0")     # none: another owner
        machine.complete(1, None, None)            # the call's first job
        machine.recover_claim(len(machine.tokens) - 1, "w1")     # the other two
        machine.claim_jobs(["q0"], "w0", len(machine.tokens) - 1, 2, False, False)   # QF301
        machine.complete(2, None, None)
        machine.complete(3, None, None)
        machine.complete(0, None, None)
        machine.purge(False)                       # every job of the call gone: the nonce is free
        machine.submit("q1", None, None, None, None, None, None, None, None, False, [])
        machine.claim_jobs(["q1"], "w1", len(machine.tokens) - 1, 2, False, False)   # the nonce again
        machine.teardown()
    assert machine.model.jobs[4].token == nonce and machine.model.jobs[4].status == "claimed"
    assert [n for n in OUTCOMES if n.startswith(("claim_jobs: several", "recover_claim: several"))]
