"""What a multi-host run must show, read after it from the database (over
the database host's Unix socket) and from the hosts' journals: no write
accepted on a stale fence, no job lost, none completed twice, every claim a
worker saw or acted on present in ``fenceq.attempts``. Also the run's
figures (refusals, recoveries, generations).

Times compare directly: the database server and the workers run in
namespaces of one kernel, so ``clock_timestamp()`` and the workers'
``time.time()`` read the same clock."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

# Fenced writes and how their answer reads: True = accepted.
WRITES = {"heartbeat": "heartbeats", "heartbeat_batch": "heartbeats", "checkpoint": "checkpoints",
          "complete": "completions", "complete_batch": "completions", "fail": "failures",
          "release": "releases", "acknowledge_cancel": "acknowledgements"}
CLAIMS = ("claim_next", "claim_batch", "claim_jobs", "recover_claim", "recover_claims")
RECOVERIES = ("recover_claim", "recover_claims")  # recover_claims: every claim of a claim_jobs nonce
# The handler's own table: one row per finish in ctx.transaction(), committed
# with its completion (docs/transactions.md).
EFFECTS_TABLE = "CREATE TABLE host_effects (job_id text NOT NULL, generation integer NOT NULL, owner_id text NOT NULL)"


def read_lines(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut short when a process was killed
    return out


@dataclass
class Journals:
    """One host's three journals."""
    host: str
    calls: list[dict]
    effects: list[dict]
    events: list[dict]

    @classmethod
    def load(cls, directory: Path, host: str) -> "Journals":
        return cls(host, read_lines(directory / f"calls-{host}.jsonl"),
                   read_lines(directory / f"effects-{host}.jsonl"), read_lines(directory / f"worker-{host}.log"))

    def writes(self) -> Iterable[tuple[dict, str, tuple, bool]]:
        """Every answered fenced write: (call, kind, (job, gen, owner), accepted)."""
        for call in self.calls:
            kind = WRITES.get(call["op"])
            if kind is None or "answer" not in call:
                continue
            answers = call["answer"] if isinstance(call["answer"], list) else [call["answer"]]
            for fence, accepted in zip(call["fences"], answers):
                yield call, kind, tuple(fence), bool(accepted)

    def event_count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)


@dataclass
class Database:
    """The rows the audit reads."""
    jobs: dict[str, dict]
    attempts: dict[tuple[str, int], dict]   # (job, gen) -> owner, claimed_at (epoch seconds)
    checkpoints: list[dict]
    effects: list[tuple[str, int, str]] = field(default_factory=list)   # host_effects: (job, gen, owner)

    @classmethod
    def read(cls, connection: Any) -> "Database":
        jobs = {}
        for job_id, status, generation, owner, result, finished, transaction in connection.execute(
                "SELECT job_id, status, generation, owner_id, result, extract(epoch FROM finished_at),"
                " coalesce((payload->>'transaction')::boolean, false) FROM fenceq.jobs"):
            jobs[job_id] = {"status": status, "generation": generation, "owner": owner, "result": result,
                            "finished_at": None if finished is None else float(finished),
                            "transaction": transaction}
        attempts = {}
        for job_id, generation, owner, claimed in connection.execute(
                "SELECT job_id, generation, owner_id, extract(epoch FROM claimed_at) FROM fenceq.attempts"):
            attempts[(job_id, generation)] = {"owner": owner, "claimed_at": float(claimed)}
        checkpoints = [{"job": j, "step": s, "value": v, "generation": g, "recorded_at": float(r)}
                       for j, s, v, g, r in connection.execute(
                           "SELECT job_id, step, value, generation, extract(epoch FROM recorded_at)"
                           " FROM fenceq._checkpoints")]
        effects = [tuple(row) for row in connection.execute("SELECT job_id, generation, owner_id FROM host_effects")]
        return cls(jobs, attempts, checkpoints, effects)


@dataclass
class Audit:
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    figures: dict[str, Any] = field(default_factory=dict)

    def flag(self, check: str, detail: str) -> None:
        self.violations[check].append(detail)

    def counts(self) -> dict[str, int]:
        return {check: len(self.violations.get(check, [])) for check in CHECKS}


CHECKS = ("accepted_on_stale_fence", "lost_jobs", "completed_twice", "claims_unaccounted", "effects_not_once")


def audit(db: Database, hosts: list[Journals], submitted: list[str], lease: float) -> Audit:
    report = Audit()
    _lost(db, submitted, report)
    _completed_twice(db, hosts, report)
    _stale(db, hosts, report)
    _claims(db, hosts, report)
    _effects(db, report)
    report.figures.update(_figures(db, hosts, lease))
    return report


def _lost(db: Database, submitted: list[str], report: Audit) -> None:
    for job_id in submitted:
        job = db.jobs.get(job_id)
        if job is None or job["status"] != "completed":
            report.flag("lost_jobs", f"{job_id}: {'missing' if job is None else job['status']}")


def _completed_twice(db: Database, hosts: list[Journals], report: Audit) -> None:
    accepted: Counter = Counter()
    logged: Counter = Counter()
    for host in hosts:
        for _call, kind, fence, ok in host.writes():
            if kind == "completions" and ok:
                accepted[fence[0]] += 1
        for event in host.events:
            if event.get("event") == "completed":
                logged[event["job_id"]] += 1
    for job_id, count in accepted.items():
        if count > 1:
            report.flag("completed_twice", f"{job_id}: {count} completions accepted")
    for job_id, count in logged.items():
        if count > 1:
            report.flag("completed_twice", f"{job_id}: completed {count} times in the workers' logs")
    for job_id, job in db.jobs.items():
        if job["status"] == "completed" and job["result"] != {"gen": job["generation"], "owner": job["owner"]}:
            report.flag("completed_twice", f"{job_id}: result {job['result']} is not the final claim's")


def _stale(db: Database, hosts: list[Journals], report: Audit) -> None:
    """An accepted write must come from a claim in the ledger, and must have
    been sent before the job was claimed again; a recorded checkpoint must
    fall inside its claim's span; a completion must be the last claim's."""
    for host in hosts:
        for call, kind, (job_id, gen, owner), ok in host.writes():
            if not ok:
                continue
            claim = db.attempts.get((job_id, gen))
            if claim is None or claim["owner"] != owner:
                report.flag("accepted_on_stale_fence", f"{host.host}: {kind} accepted for {job_id} gen {gen} "
                            "with no such claim")
                continue
            after = db.attempts.get((job_id, gen + 1))
            if after is not None and call["t0"] >= after["claimed_at"]:
                report.flag("accepted_on_stale_fence", f"{host.host}: {kind} for {job_id} gen {gen} sent "
                            f"{call['t0'] - after['claimed_at']:.3f}s after gen {gen + 1} was claimed, accepted")
    steps = {(e["job"], e["gen"], e["owner"], e.get("step")) for h in hosts for e in h.effects if e["what"] == "step"}
    for row in db.checkpoints:
        job_id, gen = row["job"], row["generation"]
        claim, after = db.attempts.get((job_id, gen)), db.attempts.get((job_id, gen + 1))
        if claim is None or row["value"] != {"gen": gen, "owner": claim["owner"]}:
            report.flag("accepted_on_stale_fence", f"{job_id} {row['step']}: recorded under gen {gen} with "
                        f"value {row['value']}, not that claim's")
            continue
        if row["recorded_at"] < claim["claimed_at"] or (after and row["recorded_at"] >= after["claimed_at"]):
            report.flag("accepted_on_stale_fence", f"{job_id} {row['step']}: recorded outside gen {gen}'s claim")
        if (job_id, gen, claim["owner"], int(row["step"].removeprefix("step"))) not in steps:
            report.flag("accepted_on_stale_fence", f"{job_id} {row['step']}: no handler of gen {gen} did this step")
    last = {}
    for (job_id, gen), claim in db.attempts.items():
        if gen > last.get(job_id, (0, None))[0]:
            last[job_id] = (gen, claim)
    finished = {(e["job"], e["gen"], e["owner"]) for h in hosts for e in h.effects if e["what"] == "finish"}
    for job_id, job in db.jobs.items():
        if job["status"] != "completed":
            continue
        gen, claim = last.get(job_id, (0, None))
        if claim is None or (job["generation"], job["owner"]) != (gen, claim["owner"]):
            report.flag("accepted_on_stale_fence", f"{job_id}: completed by gen {job['generation']}, "
                        f"the last claim is gen {gen}")
        elif job["finished_at"] < claim["claimed_at"]:
            report.flag("accepted_on_stale_fence", f"{job_id}: finished before its last claim")
        elif (job_id, gen, claim["owner"]) not in finished:
            report.flag("accepted_on_stale_fence", f"{job_id}: no handler of gen {gen} finished it")


def _claims(db: Database, hosts: list[Journals], report: Audit) -> None:
    """Every fence a worker was handed, worked under or wrote with is a
    ledger row of that owner; ledger rows no worker was handed (the claim's
    acknowledgement was lost and not recovered) must have been taken over."""
    handed: set[tuple] = set()
    used: set[tuple] = set()
    for host in hosts:
        for call in host.calls:
            if call["op"] in CLAIMS:
                handed.update(tuple(f) for f in call["fences"])
        used.update((e["job"], e["gen"], e["owner"]) for e in host.effects)
        used.update(fence for _call, _kind, fence, _ok in host.writes())
    for job_id, gen, owner in sorted(handed | used):
        claim = db.attempts.get((job_id, gen))
        if claim is None or claim["owner"] != owner:
            report.flag("claims_unaccounted", f"{job_id} gen {gen} by {owner}: not in fenceq.attempts")
    generations: dict[str, list[int]] = defaultdict(list)
    for (job_id, gen), claim in db.attempts.items():
        generations[job_id].append(gen)
        if (job_id, gen, claim["owner"]) not in handed and (job_id, gen + 1) not in db.attempts:
            report.flag("claims_unaccounted", f"{job_id} gen {gen}: no worker was handed this claim and "
                        "nobody took the job over")
    for job_id, gens in generations.items():
        if sorted(gens) != list(range(1, len(gens) + 1)):
            report.flag("claims_unaccounted", f"{job_id}: generations {sorted(gens)} are not 1..n")
    handed_rows = sum(1 for (j, g), c in db.attempts.items() if (j, g, c["owner"]) in handed)
    report.figures["claims_unseen"] = len(db.attempts) - handed_rows


def _effects(db: Database, report: Audit) -> None:
    """The handler's own table holds exactly one row per completed job that
    finished in a transaction, the completing claim's, and none for any
    other job."""
    rows: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for job_id, gen, owner in db.effects:
        rows[job_id].append((gen, owner))
    for job_id, job in db.jobs.items():
        completed_in_transaction = job["status"] == "completed" and job["transaction"]
        expected = [(job["generation"], job["owner"])] if completed_in_transaction else []
        if sorted(rows.get(job_id, [])) != expected:
            report.flag("effects_not_once", f"{job_id}: effect rows {sorted(rows.get(job_id, []))}, "
                        f"expected {expected}")
    report.figures["effect_rows"] = len(db.effects)
    report.figures["transaction_jobs_above_generation_1"] = sum(
        1 for job in db.jobs.values() if job["transaction"] and job["generation"] > 1)


def _figures(db: Database, hosts: list[Journals], lease: float) -> dict[str, Any]:
    refused: Counter = Counter()
    accepted_completions: Counter = Counter()
    late_acks = unanswered = 0
    recovered = not_made = 0
    for host in hosts:
        for _call, kind, _fence, ok in host.writes():
            if not ok:
                refused[kind] += 1
            elif kind == "completions":
                accepted_completions[host.host] += 1
        for call in host.calls:
            if "error" in call:
                unanswered += 1
            elif call["t1"] - call["t0"] > lease:
                late_acks += 1
            if call["op"] in RECOVERIES and "answer" in call:
                if call["answer"]:
                    recovered += 1
                else:
                    not_made += 1
    generations = Counter(job["generation"] for job in db.jobs.values())
    return {
        "refused_total": {kind: refused[kind] for kind in ("heartbeats", "checkpoints", "completions")},
        "completions_by_host": dict(sorted(accepted_completions.items())),
        "calls_answered_after_a_lease": late_acks,
        "calls_never_answered": unanswered,
        "claims_uncertain": sum(h.event_count("claim_uncertain") for h in hosts),
        "claims_recovered_by_nonce": recovered,
        "claims_not_made": not_made,
        "acks_recovered": sum(h.event_count("ack_recovered") for h in hosts),
        "writes_abandoned": sum(h.event_count("write_abandoned") for h in hosts),
        "attempts_rows": len(db.attempts),
        "jobs_with_generation_above_1": sum(n for gen, n in generations.items() if gen > 1),
        "max_generation": max(generations, default=0),
    }


def late_writes(host: Journals, fences: dict[str, int], healed_at: float) -> dict[str, dict[str, int]]:
    """The host's writes answered after ``healed_at`` that carried one of
    ``fences`` (job -> the generation it had when the fault began):
    {kind: {"refused": n, "accepted": n}}."""
    out: dict[str, dict[str, int]] = {k: {"refused": 0, "accepted": 0}
                                      for k in ("heartbeats", "checkpoints", "completions")}
    for call, kind, (job_id, gen, _owner), ok in host.writes():
        if kind in out and fences.get(job_id) == gen and call["t1"] >= healed_at:
            out[kind]["accepted" if ok else "refused"] += 1
    return out
