"""The failover run's second scenario (issue 20, ``make test-failover``):
the same drain, producer, worker processes and audit as
``failover_run.py``, on a pg_auto_failover formation
(``scripts/pg-auto-failover-cluster``: a monitor and two data nodes,
synchronous replication, every server on 127.0.0.1), connected through the
formation's multi-host URL. The failovers are pg_auto_failover's, in turn:

- ``perform failover``: ``pg_autoctl perform failover``, the monitor demotes
  the primary and promotes its standby;
- ``killed primary``: the primary's host lost (SIGKILL of its keeper, its
  postmaster and its backends at once); the monitor's health checks find it
  down and the monitor promotes the standby on its own.

After each the old primary rejoins as the standby (its keeper rewinds it)
before the drain goes on. The audit is ``failover_run.py``'s.

    .venv/bin/python tests/failover/auto_failover_run.py [--failovers 2 --jobs 1500 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from urllib.parse import parse_qs, urlsplit

from failover_run import BASE_PORT, ROOT, ClusterScript, Run, RunFailed, execute, parse

FORMATION = ROOT / "scripts" / "pg-auto-failover-cluster"
# The monitor's port; the data nodes take the two after it.
AUTO_PORT = int(os.environ.get("FENCEQ_AUTO_FAILOVER_PG_PORT", str(BASE_PORT + 4)))


class Formation(ClusterScript):
    """``scripts/pg-auto-failover-cluster`` on three ports of its own."""

    def __init__(self, port: int):
        super().__init__(str(FORMATION), "--port", str(port))
        # The data nodes in libpq's multi-host form, known before the
        # formation runs (the producer and the readers are made first);
        # start() checks it against what pg_autoctl reports.
        self.url = (f"postgresql://postgres@127.0.0.1:{port + 1},127.0.0.1:{port + 2}/postgres"
                    "?target_session_attrs=read-write")

    def start(self) -> None:
        reported = urlsplit(self._run("start"))   # pg_autoctl show uri --formation default
        ours = urlsplit(self.url)
        if (sorted(reported.netloc.split(",")) != sorted(ours.netloc.split(","))
                or parse_qs(reported.query).get("target_session_attrs") != ["read-write"]):
            raise RunFailed(f"pg_autoctl show uri reports {reported.geturl()}, not the servers of {self.url}")

    def perform_failover(self) -> str:
        return self._run("failover")

    def kill(self, node: int) -> str:
        return self._run("kill", str(node))

    def promoted(self) -> str:
        return self._run("promoted")

    def promoted_at(self, node: str) -> float:
        """When ``node`` began to take writes as primary (the monitor's clock: this machine's)."""
        return float(self._run("promoted-at", node))

    def rejoin(self) -> str:
        return self._run("rejoin")


class AutoFailoverRun(Run):
    KINDS = ("perform failover", "killed primary")

    def __init__(self, options: argparse.Namespace):
        if options.sync != "on" or options.stall:
            raise SystemExit("auto_failover_run: the formation's standby is synchronous (no --sync off, no --stall)")
        super().__init__(options)

    def _cluster(self) -> Formation:
        return Formation(self.options.port)

    def _switch(self, mode: str, primary: int) -> dict:
        if mode == "perform failover":
            old = str(primary)
            new = self.cluster.perform_failover()
            # The promoted standby takes writes (wait_primary) only once the
            # old primary has stopped (demoted) or its drain time is over
            # (its commits wait on the standby, which stopped replicating):
            # from then on the old primary acknowledged nothing.
            promoted_at = dead_at = self.cluster.promoted_at(new)
        else:
            old = self.cluster.kill(primary)
            dead_at = time.time()
            new = self.cluster.promoted()
            promoted_at = self.cluster.promoted_at(new)
        self.cluster.rejoin()
        return {"old_primary": old, "new_primary": new, "dead_at": dead_at, "promoted_at": promoted_at,
                "rebuilt_at": time.time()}

    def _summary(self, exits: dict[str, int | None], duration: float) -> dict:
        return {"manager": "pg_auto_failover"} | super()._summary(exits, duration)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv, prog="auto_failover_run", description=__doc__, port=AUTO_PORT, failovers=2,
                    jobs=1500, dir="/tmp/fenceq-auto-failover-run")
    return execute(AutoFailoverRun(options), options)


if __name__ == "__main__":
    sys.exit(main())
