"""The multi-host run's audit (``audit.py``) on journals and rows made up
here: it passes a run that kept the promises, and catches each broken one.
Quick, no root: part of ``make test``."""

from __future__ import annotations

import copy

import pytest

from audit import CHECKS, Database, Journals, audit, late_writes

LEASE = 4.0


def clean_run() -> tuple[Database, list[Journals]]:
    """Job a: claimed by w1 (gen 1) at t=100, cut off, taken over by w2
    (gen 2) at t=106 and completed; w1's late heartbeat at t=107 was
    refused. Job b: w2, one claim, completed."""
    db = Database(
        jobs={"a": {"status": "completed", "generation": 2, "owner": "w2", "result": {"gen": 2, "owner": "w2"},
                    "finished_at": 107.5, "transaction": True},
              "b": {"status": "completed", "generation": 1, "owner": "w2", "result": {"gen": 1, "owner": "w2"},
                    "finished_at": 101.0, "transaction": True}},
        attempts={("a", 1): {"owner": "w1", "claimed_at": 100.0}, ("a", 2): {"owner": "w2", "claimed_at": 106.0},
                  ("b", 1): {"owner": "w2", "claimed_at": 100.0}},
        checkpoints=[{"job": "a", "step": "step0", "value": {"gen": 1, "owner": "w1"}, "generation": 1,
                      "recorded_at": 100.5}],
        effects=[("a", 2, "w2"), ("b", 1, "w2")])
    w1 = Journals("w1", calls=[
        {"op": "claim_batch", "t0": 99.9, "t1": 100.0, "fences": [["a", 1, "w1"]], "answer": 1},
        {"op": "checkpoint", "t0": 100.4, "t1": 100.5, "fences": [["a", 1, "w1"]], "answer": True},
        {"op": "heartbeat", "t0": 101.0, "t1": 101.1, "fences": [["a", 1, "w1"]], "error": "PersistenceFailed"},
        {"op": "heartbeat", "t0": 107.0, "t1": 107.1, "fences": [["a", 1, "w1"]], "answer": False},
    ], effects=[{"what": "step", "job": "a", "gen": 1, "owner": "w1", "step": 0},
                {"what": "step", "job": "a", "gen": 1, "owner": "w1", "step": 1}], events=[])
    w2 = Journals("w2", calls=[
        {"op": "claim_next", "t0": 99.9, "t1": 100.0, "fences": [["b", 1, "w2"]], "answer": True},
        {"op": "complete", "t0": 100.9, "t1": 101.0, "fences": [["b", 1, "w2"]], "answer": True},
        {"op": "claim_next", "t0": 105.9, "t1": 106.0, "fences": [["a", 2, "w2"]], "answer": True},
        {"op": "complete_batch", "t0": 107.4, "t1": 107.5, "fences": [["a", 2, "w2"]], "answer": [True]},
    ], effects=[{"what": "finish", "job": "b", "gen": 1, "owner": "w2"},
                {"what": "step", "job": "a", "gen": 2, "owner": "w2", "step": 1},
                {"what": "finish", "job": "a", "gen": 2, "owner": "w2"}],
        events=[{"event": "completed", "job_id": "a"}, {"event": "completed", "job_id": "b"}])
    return db, [w1, w2]


def test_a_run_that_kept_the_promises_passes_with_its_figures():
    db, hosts = clean_run()
    report = audit(db, hosts, ["a", "b"], LEASE)
    assert report.counts() == dict.fromkeys(CHECKS, 0)
    assert report.figures["refused_total"] == {"heartbeats": 1, "checkpoints": 0, "completions": 0}
    assert report.figures["calls_never_answered"] == 1
    assert report.figures["jobs_with_generation_above_1"] == 1
    assert late_writes(hosts[0], {"a": 1}, healed_at=106.5)["heartbeats"] == {"refused": 1, "accepted": 0}


def broken(change) -> dict[str, int]:
    db, hosts = clean_run()
    db, hosts = copy.deepcopy(db), copy.deepcopy(hosts)
    change(db, hosts)
    return audit(db, hosts, ["a", "b"], LEASE).counts()


def accept_late_heartbeat(db, hosts):
    hosts[0].calls[-1]["answer"] = True


def record_checkpoint_after_takeover(db, hosts):
    db.checkpoints[0]["recorded_at"] = 106.2


def complete_twice(db, hosts):
    hosts[0].calls.append({"op": "complete", "t0": 101.0, "t1": 101.1, "fences": [["a", 1, "w1"]], "answer": True})


def keep_old_result(db, hosts):
    db.jobs["a"]["result"] = {"gen": 1, "owner": "w1"}


def leave_pending(db, hosts):
    db.jobs["b"]["status"] = "pending"


def claim_outside_ledger(db, hosts):
    hosts[1].calls.append({"op": "recover_claim", "t0": 103.0, "t1": 103.1, "fences": [["b", 7, "w2"]],
                           "answer": True})


def commit_a_stale_effect(db, hosts):
    db.effects.append(("a", 1, "w1"))


def lose_an_effect(db, hosts):
    db.effects.remove(("b", 1, "w2"))


def write_an_effect_outside_a_transaction(db, hosts):
    db.jobs["b"]["transaction"] = False


def skip_a_generation(db, hosts):
    db.attempts[("b", 3)] = db.attempts.pop(("b", 1))
    hosts[1].calls[0]["fences"] = [["b", 3, "w2"]]
    hosts[1].calls[1]["fences"] = [["b", 3, "w2"]]


@pytest.mark.parametrize("change, check", [
    (accept_late_heartbeat, "accepted_on_stale_fence"),
    (record_checkpoint_after_takeover, "accepted_on_stale_fence"),
    (complete_twice, "completed_twice"),
    (keep_old_result, "completed_twice"),
    (leave_pending, "lost_jobs"),
    (claim_outside_ledger, "claims_unaccounted"),
    (skip_a_generation, "claims_unaccounted"),
    (commit_a_stale_effect, "effects_not_once"),
    (lose_an_effect, "effects_not_once"),
    (write_an_effect_outside_a_transaction, "effects_not_once"),
], ids=lambda v: getattr(v, "__name__", v))
def test_each_broken_promise_is_caught(change, check):
    counts = broken(change)
    assert counts[check] >= 1, counts
