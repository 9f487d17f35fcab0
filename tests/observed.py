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
