"""What the failover tests share (``make test-failover``): they run only
when asked for (``FENCEQ_TEST_FAILOVER=1``), since they start replicated
clusters and take minutes; and the ``cluster`` fixture. There is no
conftest.py here: a second module named ``conftest`` on the path would
shadow tests/conftest.py for the tests that import from it.

``FENCEQ_FAILOVER_PG_PORT`` is the first of the four ports these tests use:
the run's cluster on it and the next, the small tests' cluster on the two
after. The pg_auto_failover run takes three more from
``FENCEQ_AUTO_FAILOVER_PG_PORT`` (default: the three after those)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from failover_run import BASE_PORT, Cluster

needs_failover = pytest.mark.skipif(os.environ.get("FENCEQ_TEST_FAILOVER") != "1",
                                    reason="the failover tests start replicated clusters: make test-failover")


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
