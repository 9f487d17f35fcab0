"""``fenceq worker --processes N``: N worker processes under one supervisor.

Each child is a whole ``Worker`` (its own connections, claim buffer, owner
id and event loop), so a machine's cores all run handlers and Python's one
lock per process is no limit. The supervisor only watches: a SIGINT or
SIGTERM it receives is passed to every child once (a second one, again:
the children release their unfinished jobs at once, as a single worker
does on a second signal). The children run in a process group of their
own, so that a terminal's Ctrl-C reaches them through the supervisor alone
and a child never takes one keypress for two stop requests. A child that
exits while no stop was asked for is started again after
``RESTART_DELAY`` (its jobs' leases lapse and reap hands them on, as for
any worker that dies); a supervisor that dies unasked leaves no child
behind: each stops as on SIGTERM."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from typing import Any, Callable

from .._worker_log import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)

RESTART_DELAY = 1.0  # seconds before a child that died is started again
WATCH_INTERVAL = 0.2  # seconds between looks at the children
ORPHAN_CHECK = 1.0    # seconds between a child's looks at its supervisor


def run_child(run: Callable[..., None], index: int, arguments: dict[str, Any]) -> None:
    """A child's entry point: out of the terminal's process group, then one
    worker, which stops (as on SIGTERM) should the supervisor die unasked."""
    os.setpgrp()
    supervisor = os.getppid()
    threading.Thread(target=_stop_when_orphaned, args=(supervisor,), daemon=True).start()
    run(index=index, **arguments)


def _stop_when_orphaned(supervisor: int) -> None:
    while os.getppid() == supervisor:
        time.sleep(ORPHAN_CHECK)
    os.kill(os.getpid(), signal.SIGTERM)


class Supervisor:
    def __init__(self, processes: int, run: Callable[..., None], arguments: dict[str, Any]):
        self._count = processes
        self._run = run
        self._arguments = arguments
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[int, Any] = {}  # index -> multiprocessing.Process
        self._stops = 0                      # stop signals received

    def run(self) -> int:
        """Until every child has stopped after a stop signal; the exit code."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            for index in range(self._count):
                self._start(index)
            log.info("supervisor started", extra={"event": "supervisor_started", "fenceq": {
                "processes": self._count, "pids": [child.pid for child in self._children.values()]}})
            while any(child.is_alive() for child in self._children.values()) or not self._stops:
                for index, child in list(self._children.items()):
                    if not child.is_alive() and not self._stops:
                        log.error("worker process exited unasked; starting it again",
                                  extra={"event": "process_restarted",
                                         "fenceq": {"pid": child.pid, "exit_code": child.exitcode}})
                        time.sleep(RESTART_DELAY)
                        if not self._stops:
                            self._start(index)
                time.sleep(WATCH_INTERVAL)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        codes = [child.exitcode for child in self._children.values()]
        return 0 if all(code == 0 for code in codes) else 1

    def _start(self, index: int) -> None:
        child = self._context.Process(target=run_child, args=(self._run, index, self._arguments),
                                      name=f"fenceq-worker-{index}")
        child.start()
        self._children[index] = child

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._stops += 1
        for child in self._children.values():
            if child.is_alive() and child.pid is not None:
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

