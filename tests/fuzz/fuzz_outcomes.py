"""What a fuzzed call may answer, the tally of what it did answer, and the
Hypothesis loop that drives the calls (shared by both engines).

Allowed outcomes (docs/fuzzing.md explains each):

- success;
- a fenceq error: SQLSTATE ``QF…`` (from the SQL, or from the client's
  validation, which raises the same codes);
- on PostgreSQL only, an error raised *before fenceq runs*: while the server
  parses the call and converts its literals, not inside a fenceq function
  body (the error has no PL/pgSQL or SQL function in its context). Of those,
  only the codes in ``PRE_FENCEQ_CODES``;
- on SQLite's statement files, 22008 (a computed time beyond year 9999),
  which sql/sqlite/README.md documents.

Anything else is a finding, and so is a refused call after which a table's
digest differs (a partial write). ``KNOWN_FINDINGS`` lists findings reported
to the lead and not fixed yet, so that ``make test`` stays green; each entry
says why it is there, and is removed with its fix.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

# Raised by PostgreSQL while it resolves the call and reads its literals.
PRE_FENCEQ_CODES = {
    "42883": "no function matches these argument names and types (a wrong-typed or unknown argument)",
    "42P18": "the type of an argument cannot be determined (ARRAY[] without a type)",
    "42804": "an argument's elements have types that cannot be matched (ARRAY[1, 'a'::text])",
    "54000": "a literal exceeds a parser limit (an array of more than 6 dimensions)",
    "54001": "the JSON parser ran out of stack on a literal nested tens of thousands deep",
}
PRE_FENCEQ_CLASSES = {"22": "a literal is not a valid value of its type (data exception)"}

# A SQLite statement file may answer this documented engine difference.
SQLITE_DOCUMENTED_CODES = {"22008": "a computed time beyond year 9999 (sql/sqlite/README.md, Time)"}

# (engine, function, SQLSTATE or finding kind) -> why it is tolerated for now.
# Reported to the lead with a reproduction (docs/fuzzing.md, Findings).
KNOWN_FINDINGS: dict[tuple[str, str, str], str] = {}


def pre_fenceq(sqlstate: str) -> bool:
    return sqlstate in PRE_FENCEQ_CODES or sqlstate[:2] in PRE_FENCEQ_CLASSES


@dataclass
class Finding:
    kind: str  # an SQLSTATE, "changed-on-refusal", or a Python exception name
    example: str  # a reproduction: the call, shortened
    message: str
    count: int = 1


@dataclass
class Tally:
    """What one function's calls answered on one engine."""

    engine: str
    function: str
    calls: int = 0
    ok: int = 0
    changed: int = 0  # successful calls after which some table differed
    qf: collections.Counter = field(default_factory=collections.Counter)
    pre: collections.Counter = field(default_factory=collections.Counter)
    findings: dict[str, Finding] = field(default_factory=dict)

    def finding(self, kind: str, example: str, message: str) -> None:
        if kind in self.findings:
            self.findings[kind].count += 1
        else:
            self.findings[kind] = Finding(kind, shorten(example), shorten(message, 300))

    def unexpected(self) -> dict[str, Finding]:
        """Findings not in the allow-list."""
        return {k: f for k, f in self.findings.items()
                if (self.engine, self.function, k) not in KNOWN_FINDINGS}

    def merge(self, other: "Tally") -> None:
        self.calls += other.calls
        self.ok += other.ok
        self.changed += other.changed
        self.qf.update(other.qf)
        self.pre.update(other.pre)
        for kind, found in other.findings.items():
            if kind in self.findings:
                self.findings[kind].count += found.count
            else:
                self.findings[kind] = found

    def as_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "function": self.function, "calls": self.calls, "ok": self.ok,
                "changed": self.changed, "qf": dict(sorted(self.qf.items())), "pre": dict(sorted(self.pre.items())),
                "findings": {k: vars(f) for k, f in sorted(self.findings.items())}}


def shorten(text: str, limit: int = 600) -> str:
    text = text if isinstance(text, str) else repr(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]} …[{len(text) - limit} characters]… {text[-limit // 2:]}"


# Calls made by one Hypothesis example: the engine's own cost per example
# (its tree of choices, mutations, bookkeeping) is paid once for all of them.
CALLS_PER_EXAMPLE = 10


def drive(calls: int, start_seed: int, step: Callable[[Any], None]) -> None:
    """Run ``step(data)`` at least ``calls`` times under Hypothesis (generate
    phase only: no shrinking, no example database), ``CALLS_PER_EXAMPLE``
    steps per example (so up to that many more than ``calls`` when it does
    not divide them). Hypothesis ends a run early when it believes the
    space is exhausted; the loop starts another with the next seed until
    the count is reached. A step cut short by Hypothesis (an example that
    overran its size) is not counted."""
    done = 0
    while done < calls:
        before = done

        @settings(max_examples=-(-(calls - done) // CALLS_PER_EXAMPLE), database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @seed(start_seed + done)
        @given(st.data())
        def run(data: Any) -> None:
            nonlocal done
            for _ in range(CALLS_PER_EXAMPLE):  # never fewer: an example's shape must not depend on state
                step(data)
                done += 1

        run()
        if done == before:
            raise AssertionError("Hypothesis generated no call")
