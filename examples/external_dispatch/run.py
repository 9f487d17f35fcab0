"""Run the example: python examples/external_dispatch/run.py [DATABASE_URL]

Submits three render jobs; a worker dispatches each to the fake farm and
leaves it running there; the farm finishes the work; a reconciler adopts
each job once its lease lapses and completes it with the farm's result.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from datetime import timedelta

import fenceq
from fake_service import FakeService
from render import render_app, reconciler_for

LEASE = timedelta(seconds=1)  # short, so the example's reconciler adopts quickly


def main(url: str) -> None:
    service = FakeService()
    with fenceq.connect(url) as client:
        client.migrate()
        client.create_queue("renders", lease=LEASE)
        jobs = [client.submit("renders", "render", {"scene": n}) for n in range(3)]
        worker = fenceq.Worker(render_app(service), url=url, lease=LEASE)
        reconciler = reconciler_for(service, url, interval=0.2)
        threads = [threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}),
                   threading.Thread(target=reconciler.run)]
        for thread in threads:
            thread.start()
        try:
            while len(service.works) < len(jobs):  # the farm renders whatever it was asked to
                time.sleep(0.1)
            for key, work in list(service.works.items()):
                service.finish(key, {"frames": 24, "scene": work.payload["scene"]})
            for job_id in jobs:
                job = client.wait(job_id, timeout=30)
                print(job_id, job.status, job.result)
        finally:
            worker.stop()
            reconciler.stop()
            for thread in threads:
                thread.join()
    print(f"start requests: {len(service.requests)}, works started: {len(service.works)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/example.db")
