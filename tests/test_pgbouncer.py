"""Through PgBouncer in transaction mode (issue 13): four clients share two
server connections, so consecutive transactions of one client run on
different server sessions, and nothing may rely on session state — no
server-side prepared statement, no session SET, no session advisory lock,
no LISTEN. A PgBouncer of this module's own (scripts/pgbouncer-test-server,
on loopback, pool size 2) sits in front of the test server.

The conformance suite runs through a PgBouncer too (`make test-pgbouncer`);
these tests are the fast reproduction that `make test` runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pytest

import fenceq
from conftest import PG_PORT, Database
from fenceq.errors import ConfigError
from fenceq.migrate import migrate, rollback

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "pgbouncer-test-server"
WORKER_TESTS = REPO / "tests" / "worker"
CLIENTS = 4
SERVER_CONNECTIONS = 2
ROUNDS = 25        # submit/claim/complete cycles per client: psycopg would prepare after 5
PATIENCE = 60.0    # seconds: bounds a failure only


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def bouncer_port() -> Iterator[int]:
    if shutil.which("pgbouncer") is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed (.ci/run installs it)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    port = free_port()
    root = tempfile.mkdtemp(prefix="fenceq-pgbouncer-")  # the script hands it to the postgres user
    env = dict(os.environ, FENCEQ_PGBOUNCER_ROOT=root)
    command = [str(SCRIPT), "--port", str(port), "--upstream-port", str(PG_PORT),
               "--pool-size", str(SERVER_CONNECTIONS)]
    started = subprocess.run([*command, "start"], env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    try:
        yield port
    finally:
        subprocess.run([*command, "stop"], env=env, check=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def bounced(pg: Database, bouncer_port: int) -> Database:
    """A fresh fenceq database, reached through PgBouncer."""
    return Database("postgres", pg.url.replace(f":{PG_PORT}/", f":{bouncer_port}/"))


def test_four_clients_on_two_server_connections(bounced: Database) -> None:
    with bounced.connect() as admin:
        for n in range(CLIENTS):
            admin.create_queue(f"q{n}", lease=timedelta(seconds=60))
    clients = [bounced.connect() for _ in range(CLIENTS)]  # all connected before any works
    start = threading.Barrier(CLIENTS)
    failures: list[BaseException] = []
    done: list[str] = []

    def work(n: int, client: fenceq.Client) -> None:
        try:
            start.wait(PATIENCE)
            for i in range(ROUNDS):
                job_id = client.submit(f"q{n}", "t", {"i": i})
                claim = client.claim_next([f"q{n}"], f"owner-{n}", fenceq.new_claim_token())
                assert claim is not None and claim.job_id == job_id
                assert client.complete(claim.fence, {"i": i}) is True
                done.append(job_id)
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failures.append(error)

    threads = [threading.Thread(target=work, args=(n, c)) for n, c in enumerate(clients)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(PATIENCE)
    finally:
        for client in clients:
            client.close()
    assert not failures, [f"{type(e).__name__}: {e} (cause: {e.__cause__!r})" for e in failures]
    assert len(done) == len(set(done)) == CLIENTS * ROUNDS
    with bounced.connect() as admin:
        assert {s.queue: s.pending + s.claimed for s in admin.stats()} == {f"q{n}": 0 for n in range(CLIENTS)}


async def test_async_clients_on_two_server_connections(bounced: Database) -> None:
    """The async backend (the worker's) sends unprepared statements too."""
    import asyncio

    clients = [await bounced.connect_async() for _ in range(CLIENTS)]
    try:
        await clients[0].create_queue("a", lease=timedelta(seconds=60))

        async def work(client: fenceq.AsyncClient) -> int:
            for _ in range(ROUNDS):
                await client.submit("a", "t")
                claim = await client.claim_next(["a"], "owner", fenceq.new_claim_token())
                if claim is not None:
                    assert await client.complete(claim.fence) is True
            return ROUNDS

        assert sum(await asyncio.gather(*(work(c) for c in clients))) == CLIENTS * ROUNDS
    finally:
        for client in clients:
            await client.close()


def test_migrate_through_pgbouncer_is_refused_clearly(bounced: Database) -> None:
    """migrate holds a session advisory lock and yoyo sets a session
    search_path: through a pooler it needs the direct URL, and says so."""
    with pytest.raises(ConfigError, match="direct connection"):
        migrate(bounced.url)
    with pytest.raises(ConfigError, match="direct connection"):
        rollback(bounced.url)


def log_events(log: Path) -> list[dict]:
    events = []
    for line in log.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def test_worker_drains_through_pgbouncer_polling(bounced: Database, tmp_path: Path) -> None:
    """Two `fenceq worker` processes with two jobs in flight each, through the
    two server connections: every job runs once and completes once, and each
    worker says once that it polls (LISTEN needs a session)."""
    trace = tmp_path / "trace.jsonl"
    with bounced.connect() as client:
        client.create_queue("work", lease=timedelta(seconds=60))
        ids = [client.submit("work", "quick", {"trace": str(trace)}) for _ in range(40)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(WORKER_TESTS), os.environ.get("PYTHONPATH")])))
    workers: list[tuple[Path, subprocess.Popen]] = []
    try:
        for name in ("a", "b"):
            log = tmp_path / f"worker-{name}.log"
            with open(log, "wb") as handle:
                workers.append((log, subprocess.Popen(
                    [sys.executable, "-m", "fenceq.cli", "worker", "fq_worker_apps:app", "--url", bounced.url,
                     "--owner-id", name, "--concurrency", "2", "--log-format", "json",
                     "--poll-interval", "0.1s", "--reap-interval", "0.2s"],
                    stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)))
        deadline = time.monotonic() + PATIENCE
        with bounced.connect() as client:
            while (jobs := [client.get_job(job_id) for job_id in ids]) and \
                    any(job.status != "completed" for job in jobs):
                assert time.monotonic() < deadline, "timed out waiting for the workers to drain the queue"
                for log, process in workers:
                    assert process.poll() is None, log.read_text()
                time.sleep(0.1)
        # One worker may drain the queue while the other is still importing:
        # a SIGTERM before its handlers are installed would kill it outright.
        while not all("worker_started" in [e.get("event") for e in log_events(log)] for log, _ in workers):
            assert time.monotonic() < deadline, "timed out waiting for both workers to start"
            for log, process in workers:
                assert process.poll() is None, log.read_text()
            time.sleep(0.1)
    finally:
        for _, process in workers:
            process.send_signal(signal.SIGTERM)
        for _, process in workers:
            process.wait(PATIENCE)
    assert all((job.attempts, job.generation) == (1, 1) for job in jobs)
    starts = [json.loads(line)["job"] for line in trace.read_text().splitlines() if '"start"' in line]
    assert sorted(starts) == sorted(ids), "every job ran exactly once"
    for log, process in workers:
        events = log_events(log)
        assert process.returncode == 0, log.read_text()
        assert [e["event"] for e in events].count("listen_unavailable") == 1, log.read_text()
        assert not [e for e in events if e.get("level") == "error"], log.read_text()


async def test_a_direct_listen_url_keeps_listen_behind_pgbouncer(bounced: Database, pg: Database,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """With a direct listen_url, a worker whose database URL goes through
    PgBouncer LISTENs there (a listening session of its own in the
    database) instead of falling back to polling, and works."""
    import asyncio
    import logging

    from fenceq.worker import App, Worker

    app = App(queues=["wake"])
    app.register("t", lambda ctx: "done")
    caplog.set_level(logging.INFO, logger="fenceq.worker")
    client = await bounced.connect_async()
    try:
        await client.create_queue("wake", lease=timedelta(seconds=60))
        worker = Worker(app, url=bounced.url, listen_url=pg.url, reap_interval=None)
        run = asyncio.create_task(worker.run_async())
        try:
            await asyncio.wait_for(asyncio.to_thread(worker.started.wait, PATIENCE), PATIENCE)
            listening = pg.sql("SELECT count(*) FROM pg_stat_activity"
                               " WHERE datname = current_database() AND query LIKE 'LISTEN %%'")
            assert listening == [(1,)]
            job_id = await client.submit("wake", "t")
            deadline = time.monotonic() + PATIENCE
            while (job := await client.get_job(job_id)).status != "completed":
                assert time.monotonic() < deadline and not run.done(), "the worker never ran the job"
                await asyncio.sleep(0.05)
            assert job.result == "done"
        finally:
            worker.stop()
            await asyncio.wait_for(run, PATIENCE)
    finally:
        await client.close()
    events = [getattr(record, "event", None) for record in caplog.records]
    assert "worker_started" in events and "listen_unavailable" not in events


def test_listen_url_must_be_postgresql() -> None:
    from fenceq.worker import App, Worker

    with pytest.raises(ConfigError, match="listen_url"):
        Worker(App(), url="sqlite:///x.db", listen_url="sqlite:///x.db")


def test_a_wait_through_pgbouncer_listens_on_a_direct_listen_url(bounced: Database, pg: Database) -> None:
    """Without a listen_url a wait through PgBouncer only polls; with a direct
    one it is woken by the notification (its first poll an hour away)."""
    from fenceq.backends import open_backend
    from test_waiting import wait_while_a_process_completes

    with contextlib.closing(open_backend(bounced.url)) as backend:
        wait_while_a_process_completes(bounced, backend, notify_done=True, can_listen=False)
    with contextlib.closing(open_backend(bounced.url, listen_url=pg.url)) as backend:
        wait_while_a_process_completes(bounced, backend, notify_done=True)


def test_a_client_listen_url_must_be_postgresql(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listen_url"):
        fenceq.connect(f"sqlite:///{tmp_path}/x.db", listen_url="postgresql://postgres@127.0.0.1/x")
    with pytest.raises(ConfigError, match="listen_url"):
        fenceq.connect(f"postgresql://postgres@127.0.0.1:{PG_PORT}/x", listen_url=f"sqlite:///{tmp_path}/x.db")
