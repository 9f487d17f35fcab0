"""Fixtures for the typed-task tests: an in-process ``Worker`` over the
``db`` fixture's database, run in a thread for the duration of a test."""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from typing import Iterator

import fenceq

PATIENCE = 60.0  # seconds: bounds a failure only


@contextlib.contextmanager
def worker_running(app: fenceq.App, url: str) -> Iterator[fenceq.Worker]:
    """The App's queues created (a long lease, no backoff), and its worker running."""
    with fenceq.connect(url) as client:
        for queue in app.queues:
            client.create_queue(queue, lease=timedelta(seconds=60), backoff_base=timedelta(0),
                                backoff_max=timedelta(0))
    worker = fenceq.Worker(app, url=url, concurrency=2, reap_interval=None)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert worker.started.wait(PATIENCE) or not thread.is_alive(), "the worker did not start"
        yield worker
    finally:
        worker.stop()
        thread.join(PATIENCE)
