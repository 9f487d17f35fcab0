"""What the database holds right now (``Pools``), and hints by parameter
name that draw mostly from it, so that fuzzed calls reach the deep paths:
a declared queue, a live fence, a real dead letter. A parameter without a
hint is still fuzzed, by its type; a hint only shifts the odds.

Two rules keep Hypothesis fast and consistent. Its strategies are built
once (building one costs more than drawing from it), so they read the
database's state from a ``Context`` at draw time. And every call draws in
the same shape whatever the database holds (else Hypothesis raises
FlakyStrategyDefinition): state is consulted only in ``map`` functions,
where an index picks from a pool of any length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from fuzz_values import hostile_text, json_documents, plain_text

Fence4 = tuple[str, str, int, str]  # job_id, owner_id, generation, claim_token
FENCE_PARTS = ("job_id", "owner_id", "generation", "claim_token")

OWNERS = ["owner-a", "owner-b", "w\u202e1", "worker-" + "x" * 248]
SMALL_POOLS = {
    "task": ["send-mail", "resize", "t"],
    "step": ["upload", "step-2", "s"],
    "submission_id": ["sub-1", "sub-2", "sub-3"],
    "active_key": ["key-1", "key-2"],
}
INDEX = st.integers(0, 2**20)
FRESH_TOKENS = st.uuids().map(lambda u: u.hex)


@dataclass
class Pools:
    queues: list[str] = field(default_factory=list)
    fences: list[Fence4] = field(default_factory=list)  # live claims
    stale: list[Fence4] = field(default_factory=list)  # recent claims, live or not
    tokens: list[str] = field(default_factory=list)  # claim tokens already used
    job_ids: list[str] = field(default_factory=list)
    dlq_ids: list[str] = field(default_factory=list)
    jobs: int = 0


def _bend(fence: Fence4, part: int, text: str) -> Fence4:
    bent: list[Any] = list(fence)
    bent[part] = fence[2] + 1 if part == 2 else text
    return tuple(bent)  # type: ignore[return-value]


class Context:
    """The pools of the database now, the fence of the call being drawn,
    and the strategies that read them."""

    def __init__(self) -> None:
        self.pools = Pools()
        self.focus: Fence4 | None = None
        self._hints: dict[str, st.SearchStrategy[Any] | None] = {}
        self.fence = st.tuples(st.integers(0, 8), INDEX, st.integers(0, 3), hostile_text()).map(self._fence)
        self.batch = st.lists(self.fence, max_size=4).map(lambda found: [f for f in found if f is not None])

    def _fence(self, t: tuple[int, int, int, str]) -> Fence4 | None:
        """Mostly a live fence; sometimes one with a part bent, a recent
        (often stale) one, or none."""
        kind, index, part, text = t
        fences, stale = self.pools.fences, self.pools.stale
        if kind < 7 and fences:
            fence = fences[index % len(fences)]
            return _bend(fence, part, text) if kind == 6 else fence
        if kind == 7 and stale:
            return stale[index % len(stale)]
        return None

    def from_pool(self, pool: str, otherwise: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """Mostly an element of the named pool (when it has one), else ``otherwise``."""
        def pick(t: tuple[int, int, Any]) -> Any:
            values = getattr(self.pools, pool)
            return values[t[1] % len(values)] if t[0] < 3 and values else t[2]

        return st.tuples(st.integers(0, 3), INDEX, otherwise).map(pick)

    def hint(self, name: str) -> st.SearchStrategy[Any] | None:
        """A strategy for a scalar parameter by its name, or None."""
        if name not in self._hints:
            self._hints[name] = self._make_hint(name)
        return self._hints[name]

    def _make_hint(self, name: str) -> st.SearchStrategy[Any] | None:
        if name == "queue":
            return self.from_pool("queues", hostile_text())
        if name in FENCE_PARTS:
            part = FENCE_PARTS.index(name)
            own: st.SearchStrategy[Any] = {
                "job_id": self.from_pool("job_ids", hostile_text()),
                "owner_id": st.one_of(st.sampled_from(OWNERS), hostile_text()),
                "generation": st.integers(-1, 5),
                "claim_token": st.one_of(FRESH_TOKENS, self.from_pool("tokens", hostile_text())),
            }[name]
            # The call's fence, most of the time.
            return st.tuples(st.integers(0, 4), own).map(
                lambda t: self.focus[part] if self.focus is not None and t[0] < 4 else t[1])
        if name == "claim_nonce":  # claim_jobs (version 8): fresh, or a key some claim spent
            return st.one_of(FRESH_TOKENS, self.from_pool("tokens", hostile_text()))
        if name == "dlq_id":
            return self.from_pool("dlq_ids", st.one_of(FRESH_TOKENS, hostile_text()))
        if name in SMALL_POOLS:
            return st.one_of(st.sampled_from(SMALL_POOLS[name]), hostile_text())
        if name in ("payload", "result", "value"):
            return json_documents()
        if name == "error":
            return st.one_of(plain_text(), hostile_text())
        return None
