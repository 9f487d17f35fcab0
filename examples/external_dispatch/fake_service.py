"""A fake external system (a render farm, a batch cluster, a provider's
asynchronous API) that starts work by idempotency key, as real ones do:
a second start request with a key it already knows starts nothing and
answers the same work. It records every start request, so a test can
count how often the work was asked for and how often it was started.

Faults a test can ask for: ``refuse_next`` (the next start request is
turned away before anything starts: the caller may release its
reservation) and ``lose_answer_next`` (the next one starts the work, then
the answer never reaches the caller: its outcome is unknown to it).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any


class Refused(ConnectionError):
    """The request was turned away before anything started."""


class AnswerLost(TimeoutError):
    """The request may have started the work: its answer never came."""


@dataclass
class Work:
    work_id: str
    key: str
    payload: Any
    state: str = "running"  # running, done, failed, cancelled
    result: Any = None
    error: str | None = None


class FakeService:
    def __init__(self) -> None:
        self.requests: list[str] = []        # the key of every start request, in order
        self.works: dict[str, Work] = {}     # idempotency key -> the work it started
        self._moved: dict[str, str] = {}     # a work id it had before a move -> its key
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._refuse = 0
        self._lose_answer = 0

    def refuse_next(self) -> None:
        self._refuse += 1

    def lose_answer_next(self) -> None:
        self._lose_answer += 1

    def start(self, key: str, payload: Any = None) -> str:
        """Start the work for ``key`` (once per key); its work id."""
        with self._lock:
            self.requests.append(key)
            if self._refuse:
                self._refuse -= 1
                raise Refused(f"start {key}: refused")
            work = self.works.get(key)
            if work is None:
                work = self.works[key] = Work(f"work-{next(self._ids)}", key, payload)
            if self._lose_answer:
                self._lose_answer -= 1
                raise AnswerLost(f"start {key}: no answer")
            return work.work_id

    def find(self, ref: str) -> Work | None:
        """The work a ref names: its work id or the key that started it."""
        with self._lock:
            key = self._moved.get(ref, ref)
            return self.works.get(key) or next((w for w in self.works.values() if w.work_id == ref), None)

    def move(self, ref: str) -> str:
        """Move the work (to another node): it gets a new work id; the old one still finds it."""
        work = self._found(ref)
        with self._lock:
            self._moved[work.work_id] = work.key
            work.work_id = f"work-{next(self._ids)}"
        return work.work_id

    def finish(self, ref: str, result: Any = None) -> None:
        work = self._found(ref)
        work.state, work.result = "done", result

    def break_down(self, ref: str, error: str) -> None:
        work = self._found(ref)
        work.state, work.error = "failed", error

    def cancel(self, ref: str) -> None:
        self._found(ref).state = "cancelled"

    def started_for(self, payload: Any) -> list[Work]:
        """The works started for one payload (one job): exactly-once means one."""
        with self._lock:
            return [w for w in self.works.values() if w.payload == payload]

    def _found(self, ref: str) -> Work:
        work = self.find(ref)
        if work is None:
            raise KeyError(ref)
        return work
