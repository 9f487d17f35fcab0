"""Helpers for the observability tests: scrape endpoints, read Prometheus
samples, make the database look unreachable to a worker."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import fenceq

PATIENCE = 60.0  # seconds: only a failure waits this long


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=PATIENCE) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition: (name, labels) -> value."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped: dict, name: str, **labels: str) -> float:
    """A sample's value; 0 for a labelled counter never incremented."""
    return scraped.get((name, frozenset(labels.items())), 0.0)


class Faults:
    """A ``wrap_client`` whose named calls raise PersistenceFailed without
    being sent while ``on`` (all calls when ``names`` is None): the database
    looks unreachable to the worker."""

    def __init__(self, names: set[str] | None = None, on: bool = True):
        self.names, self.on = names, on

    def __call__(self, client: Any) -> Any:
        return _Faulty(client, self)


class _Faulty:
    def __init__(self, client: Any, faults: Faults):
        self._client, self._faults = client, faults

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        faults = self._faults
        if not callable(attribute) or name == "close":
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            if faults.on and (faults.names is None or name in faults.names):
                raise fenceq.PersistenceFailed()
            return await attribute(*args, **kwargs)

        return call


def taken_over_job(client: fenceq.Client, queue: str, submission_id: str) -> str:
    """A job claimed by worker-a with a short lease that lapses, reaped,
    claimed again by worker-b and completed: two generations. The queue
    must retry at once (no backoff)."""
    from datetime import timedelta

    from helpers import wait_until_past

    job_id = client.submit(queue, "render", {"page": 7}, submission_id=submission_id)
    first = client.claim_next([queue], "worker-a", fenceq.new_claim_token(), lease=timedelta(seconds=1))
    assert first is not None and first.job_id == job_id
    wait_until_past(first.lease_expires_at)
    assert client.reap().requeued == 1
    second = client.claim_next([queue], "worker-b", fenceq.new_claim_token())
    assert second is not None and second.generation == 2
    assert client.complete(second.fence, {"pages": 1})
    assert not client.complete(first.fence, {"late": True})  # the stale fence is refused
    return job_id


def dead_letter(client: fenceq.Client, queue: str, task: str = "doomed") -> str:
    """A job that failed for good into a dead letter; its dlq_id."""
    job_id = client.submit(queue, task)
    claim = client.claim_next([queue], "worker-c", fenceq.new_claim_token())
    assert claim is not None and claim.job_id == job_id
    assert client.fail(claim.fence, "ValueError: cannot", retry=False)
    dlq_id = client.get_job(job_id).dlq_id
    assert dlq_id
    return dlq_id
