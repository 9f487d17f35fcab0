"""The failover tests (``make test-failover``): only when asked for
(``FENCEQ_TEST_FAILOVER=1``), since they start replicated clusters and take
minutes. ``FENCEQ_FAILOVER_PG_PORT`` is the first of the four ports they
use: the run's cluster on it and the next, the small tests' cluster on the
two after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from failover_run import BASE_PORT, Cluster  # noqa: E402

ENABLED = os.environ.get("FENCEQ_TEST_FAILOVER") == "1"


def pytest_collection_modifyitems(items):
    if not ENABLED:
        skip = pytest.mark.skip(reason="the failover tests start replicated clusters: make test-failover")
        for item in items:
            if str(HERE) in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def cluster():
    """A primary and a synchronous standby of their own, fenceq migrated."""
    cluster = Cluster(BASE_PORT + 2, "on")
    cluster.start()
    primary = f"postgresql://postgres@127.0.0.1:{BASE_PORT + 2}/postgres"
    subprocess.run([str(Path(sys.executable).parent / "fenceq"), "migrate", "--url", primary],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        yield cluster
    finally:
        cluster.stop()
