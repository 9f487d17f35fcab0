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
               normalize: Callable[[str, Any], Any] = lambda e, v: v) -> Any:
        """Run the model; every engine must answer as it does."""
        try:
            want = ("ok", expected())
        except m.Refused as refused:
            want = ("err", refused.sqlstate)
        return self.compare(sys._getframe(1).f_code.co_name, want, answers, normalize)

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

    @initialize()
    def seed(self):
        """A job in each queue, one of them claimed: every example starts
        with something to claim and a fence to write with."""
        for queue in ("q0", "q1"):
            self.submit(queue, None, None, None, None, None, None, None, None, False, [])
        self.claim(["q0"], "w0", None, False, False)

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

    @rule(token=st.integers(0, 1000), owner=st.sampled_from(OWNERS))
    def recover_claim(self, token, owner):
        assume(self.tokens)
        token = self.pick(self.tokens, token)
        self.now()
        answers = self.both(lambda e, c: c.recover_claim(owner, token))
        self.expect(lambda: self.model_claim_view(self.model.recover(owner, token)), answers, self.claim_view)

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
    @rule(**fence_args)
    def heartbeat(self, index, tamper):
        fence = self.pick_fence(index, tamper)
        self.now()
        answers = self.both(lambda e, c: c.heartbeat(self.client_fence(e, fence)))
        self.expect(lambda: self.model.renew(fence), answers)

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
        # A tick that straddled a minute boundary is not compared.
        assume(math.floor(now[0] / 60) == math.floor((time.time() + SLACK) / 60))
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
    if step in ("tick", "purge"):       # a count
        return "0" if value == 0 else "more than 0"
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


def test_model_and_engines_agree(pg, sqlite_db):
    urls = {"postgres": pg.url, "sqlite": sqlite_db.url}
    Lockstep.urls = urls
    Lockstep.clients = {e: fenceq.connect(u) for e, u in urls.items()}
    try:
        run_state_machine_as_test(Lockstep, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not RANDOM,
            suppress_health_check=list(HealthCheck), database=None, print_blob=True,
            report_multiple_bugs=False,
            phases=list(Phase) if SHRINK else [Phase.explicit, Phase.reuse, Phase.generate]))
    finally:
        for client in Lockstep.clients.values():
            client.close()
        if os.environ.get("FENCEQ_MODEL_REPORT"):
            with open(os.environ["FENCEQ_MODEL_REPORT"], "w") as report:
                json.dump({"examples": EXAMPLES, "steps": STEPS, "random": RANDOM,
                           "compared": sum(OUTCOMES.values()), "outcomes": dict(sorted(OUTCOMES.items()))},
                          report, indent=1)
