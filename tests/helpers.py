"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import pytest

import fenceq


def claim(client: fenceq.Client, queue: str = "default", owner: str = "worker-1", **options) -> fenceq.Claim:
    result = client.claim_next([queue], owner, fenceq.new_claim_token(), **options)
    assert result is not None, "expected a job to claim"
    return result


@contextmanager
def raises_code(sqlstate: str) -> Iterator[pytest.ExceptionInfo]:
    with pytest.raises(fenceq.FenceqError) as info:
        yield info
    assert info.value.sqlstate == sqlstate, (info.value.sqlstate, str(info.value))


def wait_until_past(moment) -> None:
    """Sleep until the wall clock is strictly past an (aware) database time."""
    from datetime import datetime, timezone

    delay = (moment - datetime.now(timezone.utc)).total_seconds()
    time.sleep(max(delay, 0) + 0.05)


def payloads_until_barrier(listener, channel: str, barrier: str, patience: float = 60.0) -> list[str]:
    """The payloads on ``channel`` that reached a LISTENing connection before
    the test's own barrier notification, sent after everything it checks has
    committed (notifications arrive in commit order): an absent one is seen
    without waiting for a timeout, which only bounds a failure."""
    listener.execute("SELECT pg_notify(%s, %s)", (channel, barrier))
    payloads = []
    for note in listener.notifies(timeout=patience):
        if note.payload == barrier:
            return payloads
        if note.channel == channel:
            payloads.append(note.payload)
    raise AssertionError("the barrier never arrived")


def schema_version(backend: str) -> str:
    """What ``fenceq.version()`` answers on ``backend`` once this tree's
    migrations have run: the number of its newest step."""
    from fenceq.backends.migrations import migration_ids

    return str(int(migration_ids(backend)[-1].split("_", 1)[0]))


def steps_above(backend: str, version: int) -> list[str]:
    """The migration ids a rollback of ``backend`` to ``version`` runs, newest first."""
    from fenceq.backends.migrations import migration_ids

    return [m for m in reversed(migration_ids(backend)) if int(m.split("_", 1)[0]) > version]


def released_package(folder, commit: str):
    """A released version's package, SQL and migrations, extracted from git
    history into ``folder``: the path to put on PYTHONPATH, or None when
    this clone lacks ``commit``."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(root), "archive", commit, "python_client", "sql", "migrations"],
                             capture_output=True)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return Path(folder) / "python_client"
