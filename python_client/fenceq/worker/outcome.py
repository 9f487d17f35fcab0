"""How a handler ended, as the executor hands it to the settler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Completed:
    """Not frozen, unlike the others: one is made per job, and a frozen
    dataclass's construction costs twice as much."""

    result: Any


@dataclass(frozen=True)
class Failed:
    error: str    # what the job's last_error will say
    retry: bool


@dataclass(frozen=True)
class Cancelled:
    """The handler raised JobCancelled (or, async, was cancelled after a request)."""


@dataclass(frozen=True)
class Lost:
    """The handler raised LeaseLost: the database already refused this claim."""


@dataclass(frozen=True)
class Committed:
    """The handler's ``ctx.transaction()`` committed: the job was completed
    in it, with the handler's writes."""


@dataclass(frozen=True)
class Dispatched:
    """Return ``fenceq.Dispatched(execution_ref)`` from a handler whose
    ``ctx.dispatch`` handed the job's work to another system: the job stays
    claimed and running there, this worker frees its slot and stops renewing
    the lease, and once it lapses a ``fenceq.Reconciler`` adopts the job and
    settles it from what the external system says
    (docs/external-execution.md). As an outcome, ``execution_ref`` is None
    when the handler ended while the dispatch was only reserved."""

    execution_ref: str | None


Outcome = Completed | Failed | Cancelled | Lost | Committed | Dispatched
