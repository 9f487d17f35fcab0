"""Reads that may go to a standby (``--read-url``): the dashboard's pages,
with how far behind the standby is, and a worker's queue gauges; the
dashboard's actions and the worker's writes still go to the primary."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg

from werkzeug.test import Client as WebClient

import fenceq
from fenceq.dashboard import Dashboard
from fenceq.worker import App, Worker
from observed import free_port, get, samples, value
from replicated import cluster, needs_failover  # noqa: F401 - the fixture

pytestmark = needs_failover


def standby_url(cluster) -> str:
    return f"postgresql://postgres@127.0.0.1:{cluster.standby()}/postgres"


def page(web: WebClient, path: str) -> str:
    response = web.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def test_the_dashboard_reads_a_standby_shows_its_lag_and_acts_on_the_primary(cluster):
    with fenceq.connect(cluster.url) as client:
        client.create_queue("replica-read")
    web = WebClient(Dashboard(cluster.url, allow_actions=True, read_url=standby_url(cluster)))
    deadline = time.monotonic() + 60
    while "replica-read" not in (html := page(web, "/queues")):   # replayed on the standby
        assert time.monotonic() < deadline, "the standby never showed the queue"
        time.sleep(0.05)
    assert re.search(r"replica: \d+\.\d s behind", html)

    token = re.search(r'name="csrf" value="([0-9a-f]{64})"', html).group(1)
    assert web.post("/actions/pause", data={"queue": "replica-read", "csrf": token}).status_code == 303
    with fenceq.connect(cluster.url) as client:
        assert [q.paused for q in client.queue_overview() if q.queue == "replica-read"] == [True]
    with fenceq.connect(standby_url(cluster)) as replica:
        assert replica.replica_lag() is not None
    with fenceq.connect(cluster.url) as primary:
        assert primary.replica_lag() is None


def test_fenceq_dashboard_with_read_url_serves_pages_from_the_standby(cluster):
    dashboard = subprocess.Popen([sys.executable, "-m", "fenceq.cli", "dashboard", "--port", "0", "--url",
                                  cluster.url, "--read-url", standby_url(cluster)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = dashboard.stdout.readline()
        address = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert address, line
        with urllib.request.urlopen(address.group(1) + "queues", timeout=60) as response:
            assert re.search(r"replica: \d+\.\d s behind", response.read().decode())
    finally:
        dashboard.send_signal(signal.SIGTERM)
        assert dashboard.wait(60) == 0


def test_a_workers_queue_gauges_read_the_standby_and_its_writes_go_to_the_primary(cluster):
    """Replay is paused on the standby once it shows three pending jobs:
    the gauges keep showing them while the worker completes them on the
    primary."""
    app = App(queues=["gauged"])

    @app.task("noop")
    def noop(ctx):
        return None

    with fenceq.connect(cluster.url) as client, fenceq.connect(standby_url(cluster)) as replica:
        client.create_queue("gauged")
        job_ids = [client.submit("gauged", "noop") for _ in range(3)]
        deadline = time.monotonic() + 60
        while [q.pending for q in replica.queue_overview() if q.queue == "gauged"] != [3]:
            assert time.monotonic() < deadline, "the standby never showed the jobs"
            time.sleep(0.05)
        replay(cluster, "pause")
        try:
            port = free_port()
            worker = Worker(app, url=cluster.url, read_url=standby_url(cluster), metrics_port=port,
                            stats_interval=0.01, poll_interval=0.05, reap_interval=None)
            thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
            thread.start()
            try:
                deadline = time.monotonic() + 60
                while any(client.get_job(j).status != "completed" for j in job_ids):
                    assert time.monotonic() < deadline, "the worker never completed the jobs"
                    time.sleep(0.05)
                status, text = get(f"http://127.0.0.1:{port}/metrics")
                assert status == 200
                # The paused standby still has the three jobs pending.
                assert value(samples(text), "fenceq_queue_pending_jobs", queue="gauged") == 3
                assert value(samples(text), "fenceq_worker_jobs_completed_total", queue="gauged", task="noop") == 3
            finally:
                worker.stop()
                thread.join(60)
        finally:
            replay(cluster, "resume")


def replay(cluster, what: str) -> None:
    with psycopg.connect(standby_url(cluster), autocommit=True) as standby:
        standby.execute(f"SELECT pg_wal_replay_{what}()")
