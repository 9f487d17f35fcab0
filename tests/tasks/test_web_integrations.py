"""fenceq.contrib.fastapi and fenceq.contrib.litestar
(docs/integrations.md): the lifespan opens the App's clients with the web
application and closes them at shutdown, the dependency gives handlers the
App, and a handler submits a typed task. Through each framework's test
client, on both engines; skipped where the framework is not installed.
(No postponed annotations here: the handlers are local to functions, and
the frameworks read their annotations.)"""

import pytest

import fenceq
from fenceq.testing import InlineMode

app = fenceq.App(queues=["media"])


@app.task(queue="media")
def make_thumbnail(ctx, url: str) -> dict:
    return {"url": url, "attempt": ctx.attempt}


def fastapi_application():
    fastapi = pytest.importorskip("fastapi")
    from fenceq.contrib.fastapi import Fenceq

    tasks = Fenceq(app)
    api = fastapi.FastAPI(lifespan=tasks.lifespan)

    @api.post("/thumbnails/{url}")
    async def create(url: str, fenceq_app: fenceq.App = fastapi.Depends(tasks)) -> dict:
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id, "app": fenceq_app.name, "status": await job.status_async()}

    from fastapi.testclient import TestClient

    return TestClient(api)


def litestar_application():
    litestar = pytest.importorskip("litestar")
    from litestar.di import NamedDependency
    from litestar.params import FromPath
    from litestar.testing import TestClient

    from fenceq.contrib.litestar import FenceqPlugin

    @litestar.post("/thumbnails/{url:str}")
    async def create(url: FromPath[str], fenceq_app: NamedDependency[fenceq.App]) -> dict:
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id, "app": fenceq_app.name, "status": await job.status_async()}

    return TestClient(litestar.Litestar(route_handlers=[create], plugins=[FenceqPlugin(app)]))


FRAMEWORKS = [fastapi_application, litestar_application]


@pytest.mark.parametrize("application", FRAMEWORKS, ids=["fastapi", "litestar"])
def test_a_handler_submits_through_the_apps_clients_which_close_at_shutdown(application, db):
    app.url, app.submitter = db.url, fenceq.tasks.DatabaseClients(db.url)
    with db.connect() as client:
        client.create_queue("media")
    with application() as web:
        assert app.submitter._async_clients  # opened at startup
        answer = web.post("/thumbnails/a.png").json()
    assert (answer["app"], answer["status"]) == ("fenceq", "pending")
    assert not app.submitter._async_clients and app.submitter._client is None  # closed at shutdown
    with db.connect() as client:
        assert client.get_job(answer["job_id"]).payload == {"url": "a.png"}


@pytest.mark.parametrize("application", FRAMEWORKS, ids=["fastapi", "litestar"])
def test_a_web_test_runs_its_tasks_inline(application):
    with InlineMode(app), application() as web:
        answer = web.post("/thumbnails/b.png").json()
    assert answer["status"] == "completed"
