"""fenceq.contrib.fastapi and fenceq.contrib.litestar
(docs/integrations.md), through each framework's own test client, on both
engines; skipped where the framework is not installed:

- the lifespan opens the App's clients with the web application and closes
  them at shutdown; the dependency gives handlers the App;
- the request transaction: a request that enqueues in it and then fails
  leaves neither its job nor its own row, nor does one whose COMMIT fails
  (the client gets an error, not the job); one that returns commits both,
  the worker on the application's loop runs the job, and an endpoint of
  the application reads its result back;
- a worker that cannot start fails the application's start;
- in an in-process testing mode, the request's submissions run in it, and
  its own SQL is refused with the reason.

(No postponed annotations here: the handlers are local to functions, and
the frameworks read their annotations.)"""

from typing import Annotated

import pytest

import fenceq
from fenceq.client import AsyncTransaction
from fenceq.errors import ConfigError
from fenceq.tasks import DatabaseClients
from fenceq.testing import InlineMode

app = fenceq.App(queues=["media"])


@app.task(queue="media")
def make_thumbnail(ctx, url: str) -> dict:
    return {"url": url, "attempt": ctx.attempt}


async def record_upload(tx, url: str, twice: bool) -> None:
    """The application's own write, in the request's transaction (``twice``:
    a second time, which a unique check at COMMIT refuses)."""
    placeholder = "%s" if tx.backend == "postgres" else "?"
    for _ in range(2 if twice else 1):
        await tx.execute(f"INSERT INTO uploads (url) VALUES ({placeholder})", (url,))


async def finished_job(fenceq_app: fenceq.App, job_id: str, wait: float) -> dict:
    job = await (await fenceq_app.async_client()).wait(job_id, timeout=wait)
    return {"status": job.status, "result": job.result}


def fastapi_application(raise_server_exceptions=True, **options):
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from fenceq.contrib.fastapi import Fenceq

    tasks = Fenceq(app, **options)
    api = fastapi.FastAPI(lifespan=tasks.lifespan)

    @api.post("/thumbnails/{url}")
    async def create(url: str, fenceq_app: fenceq.App = fastapi.Depends(tasks)) -> dict:
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id, "app": fenceq_app.name, "status": await job.status_async()}

    @api.post("/uploads/{url}", status_code=201)  # Litestar's default for a POST
    async def upload(url: str, tx: Annotated[AsyncTransaction, tasks.transaction], fail: bool = False,
                     twice: bool = False) -> dict:
        await record_upload(tx, url, twice)
        job = await make_thumbnail.using(tx).submit_async(url=url)
        if fail:
            raise fastapi.HTTPException(409, "refused after the job was submitted")
        return {"job_id": job.id}

    @api.post("/renders/{url}")
    async def render(url: str, tx: Annotated[AsyncTransaction, tasks.transaction]) -> dict:
        job = await make_thumbnail.using(tx).submit_async(url=url)
        return {"status": await job.status_async()}

    @api.get("/jobs/{job_id}")
    async def read(job_id: str, wait: float, fenceq_app: fenceq.App = fastapi.Depends(tasks)) -> dict:
        return await finished_job(fenceq_app, job_id, wait)

    return TestClient(api, raise_server_exceptions=raise_server_exceptions), tasks


def litestar_application(raise_server_exceptions=True, **options):
    litestar = pytest.importorskip("litestar")
    from litestar.di import NamedDependency
    from litestar.exceptions import HTTPException
    from litestar.params import FromPath, FromQuery
    from litestar.testing import TestClient

    from fenceq.contrib.litestar import FenceqPlugin

    @litestar.post("/thumbnails/{url:str}")
    async def create(url: FromPath[str], fenceq_app: NamedDependency[fenceq.App]) -> dict:
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id, "app": fenceq_app.name, "status": await job.status_async()}

    @litestar.post("/uploads/{url:str}")
    async def upload(url: FromPath[str], fenceq_tx: NamedDependency[AsyncTransaction],
                     fail: FromQuery[bool] = False, twice: FromQuery[bool] = False) -> dict:
        await record_upload(fenceq_tx, url, twice)
        job = await make_thumbnail.using(fenceq_tx).submit_async(url=url)
        if fail:
            raise HTTPException(status_code=409, detail="refused after the job was submitted")
        return {"job_id": job.id}

    @litestar.post("/renders/{url:str}")
    async def render(url: FromPath[str], fenceq_tx: NamedDependency[AsyncTransaction]) -> dict:
        job = await make_thumbnail.using(fenceq_tx).submit_async(url=url)
        return {"status": await job.status_async()}

    @litestar.get("/jobs/{job_id:str}")
    async def read(job_id: FromPath[str], wait: FromQuery[float], fenceq_app: NamedDependency[fenceq.App]) -> dict:
        return await finished_job(fenceq_app, job_id, wait)

    plugin = FenceqPlugin(app, **options)
    web = litestar.Litestar(route_handlers=[create, upload, render, read], plugins=[plugin], debug=True)
    return TestClient(web, raise_server_exceptions=raise_server_exceptions), plugin


def server_error(web, path: str) -> str:
    """The error a POST to ``path`` ends in, as each test client reports it."""
    try:
        answer = web.post(path)
    except ConfigError as error:  # FastAPI's test client raises the application's exception
        return str(error)
    assert answer.status_code == 500  # Litestar's answers, with the traceback in debug mode
    return answer.text


FRAMEWORKS = pytest.mark.parametrize("application", [fastapi_application, litestar_application],
                                     ids=["fastapi", "litestar"])


def serving(database, table: str):
    """The App submitting to ``database``, where its queue and the
    application's table ``uploads`` exist."""
    previous = app.url, app.submitter
    app.url, app.submitter = database.url, DatabaseClients(database.url)
    with database.connect() as client:
        client.create_queue("media")
    database.sql(f"CREATE TABLE uploads ({table})")
    yield database
    app.url, app.submitter = previous


@pytest.fixture
def served(db):
    yield from serving(db, "url text NOT NULL")


@pytest.fixture
def served_with_a_deferred_check(pg):
    """A table whose unique check runs at COMMIT (PostgreSQL's deferred
    constraints; SQLite has no deferred unique check)."""
    yield from serving(pg, "url text UNIQUE DEFERRABLE INITIALLY DEFERRED")


@FRAMEWORKS
def test_a_handler_submits_through_the_apps_clients_which_close_at_shutdown(application, served):
    web, _ = application()
    with web:
        assert app.submitter._async_clients  # opened at startup
        answer = web.post("/thumbnails/a.png").json()
    assert (answer["app"], answer["status"]) == ("fenceq", "pending")
    assert not app.submitter._async_clients and app.submitter._client is None  # closed at shutdown
    with served.connect() as client:
        assert client.get_job(answer["job_id"]).payload == {"url": "a.png"}


@FRAMEWORKS
def test_a_request_that_fails_after_enqueueing_leaves_neither_its_job_nor_its_row(application, served):
    web, _ = application()
    with web:
        refused = web.post("/uploads/a.png", params={"fail": True})
        kept = web.post("/uploads/b.png")
    assert (refused.status_code, kept.status_code) == (409, 201)
    with served.connect() as client:
        assert [job.payload for job in client.pending_jobs("media")] == [{"url": "b.png"}]
    assert served.sql("SELECT url FROM uploads") == [("b.png",)]


@FRAMEWORKS
def test_a_request_whose_commit_fails_answers_an_error_and_leaves_no_job(application,
                                                                         served_with_a_deferred_check):
    web, _ = application(raise_server_exceptions=False)
    with web:
        answer = web.post("/uploads/twice.png", params={"twice": True})
    assert answer.status_code == 500  # the transaction ends before the response is sent
    with served_with_a_deferred_check.connect() as client:
        assert client.pending_jobs("media") == []
    assert served_with_a_deferred_check.sql("SELECT url FROM uploads") == []


@FRAMEWORKS
def test_a_committed_request_is_run_by_the_worker_on_the_applications_loop(application, served):
    web, integration = application(worker={"concurrency": 2})
    with web:
        worker = integration.worker
        assert worker is not None and worker.started.is_set()
        job_id = web.post("/uploads/c.png").json()["job_id"]
        answer = web.get(f"/jobs/{job_id}", params={"wait": 60}).json()
    assert answer == {"status": "completed", "result": {"url": "c.png", "attempt": 1}}
    assert integration.worker is None  # stopped at shutdown
    with served.connect() as client:
        assert [attempt.owner_id for attempt in client.attempts(job_id)] == [worker.settings.owner_id]
    assert served.sql("SELECT url FROM uploads") == [("c.png",)]


@FRAMEWORKS
def test_a_worker_that_cannot_start_fails_the_applications_start(application, tmp_path):
    previous = app.url, app.submitter
    app.url = f"sqlite:///{tmp_path / 'no-fenceq-here.db'}"  # a database fenceq was never installed in
    app.submitter = DatabaseClients(app.url)
    try:
        web, integration = application(worker=True)
        with pytest.raises(Exception) as raised:
            with web:
                pass
        error = raised.value
        while isinstance(error, BaseExceptionGroup):  # Litestar's test client reports its task group's
            (error,) = error.exceptions
        assert isinstance(error, ConfigError) and "not installed" in str(error)
        assert integration.worker is None
    finally:
        app.url, app.submitter = previous


@FRAMEWORKS
def test_a_request_transaction_needs_the_lifespan(application, served):
    web, _ = application()
    assert "needs the integration's lifespan" in server_error(web, "/renders/d.png")


@FRAMEWORKS
def test_a_web_test_runs_its_tasks_inline(application):
    web, _ = application()
    with InlineMode(app), web:
        submitted = web.post("/thumbnails/b.png").json()
        in_transaction = web.post("/renders/c.png").json()
        refused = server_error(web, "/uploads/d.png")
    assert submitted["status"] == in_transaction["status"] == "completed"
    assert "no database for the application's own statements" in refused
