"""How a handler ended, as the executor hands it to the settler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Completed:
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


Outcome = Completed | Failed | Cancelled | Lost | Committed
