"""Child processes for test_sqlite_processes.py (run as scripts, so that each
is a separate OS process with its own connection).

    sqlite_child.py claim URL QUEUE OWNER BUSY_TIMEOUT
        claim and complete until the queue is empty; print one JSON line:
        the claimed job ids and the causes of every PersistenceFailed.
    sqlite_child.py submit URL QUEUE
        submit forever, printing each job id once submit has returned.
    sqlite_child.py hold URL QUEUE
        print "holding" while a write transaction that completes every job
        is open (never committed), then sleep.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import fenceq
import fenceq.backends.sqlite


def claim(url: str, queue: str, owner: str, busy_timeout: float) -> None:
    fenceq.backends.sqlite.BUSY_TIMEOUT_SECONDS = busy_timeout
    claimed, failures = [], []

    def patiently(call):
        """Retry a call refused with PersistenceFailed (the lock was busy)."""
        while True:
            try:
                return call()
            except fenceq.PersistenceFailed as error:
                failures.append([type(error.__cause__).__name__, str(error.__cause__), str(error)])

    with fenceq.connect(url) as client:
        while True:
            token = fenceq.new_claim_token()
            try:
                job = client.claim_next([queue], owner, token)
            except fenceq.PersistenceFailed as error:
                failures.append([type(error.__cause__).__name__, str(error.__cause__), str(error)])
                job = patiently(lambda: client.recover_claim(owner, token))
                if job is None:
                    continue
            if job is None:
                break
            claimed.append(job.job_id)
            assert patiently(lambda: client.complete(job.fence)) is True
    print(json.dumps({"claimed": claimed, "failures": failures}), flush=True)


def submit(url: str, queue: str) -> None:
    with fenceq.connect(url) as client:
        while True:
            print(client.submit(queue, "t", {"n": 1}), flush=True)


def hold(url: str, queue: str) -> None:
    connection = sqlite3.connect(fenceq.backends.sqlite.database_path(url), isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("UPDATE fenceq__jobs SET status = 'completed'")
    connection.execute("DELETE FROM fenceq__queues")
    print("holding", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    mode, *arguments = sys.argv[1:]
    if mode == "claim":
        claim(arguments[0], arguments[1], arguments[2], float(arguments[3]))
    else:
        {"submit": submit, "hold": hold}[mode](*arguments)
