"""FastAPI (docs/integrations.md#fastapi): ``Fenceq(app)`` is a lifespan
that opens the App's clients with the application and closes them at
shutdown, a dependency that gives path operations the App, and
``transaction``, a dependency that gives a path operation one database
transaction, committed when it returns and rolled back when it raises.

    tasks = Fenceq(app, worker=True)
    api = FastAPI(lifespan=tasks.lifespan)

    @api.post("/thumbnails")
    async def create(url: str, tx: Annotated[AsyncTransaction, tasks.transaction]):
        await tx.execute("INSERT INTO uploads (url) VALUES (%s)", (url,))
        job = await make_thumbnail.using(tx).submit_async(url=url)
        return {"job_id": job.id}
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends

from ..worker.app import App
from .asgi import Integration


class Fenceq(Integration):
    """``FastAPI(lifespan=Fenceq(app).lifespan)``; ``Depends(it)`` answers
    the App; ``it.transaction`` is the request transaction's dependency."""

    def __init__(self, app: App, **options: Any):
        super().__init__(app, **options)
        # Function scope: the transaction ends when the path operation does,
        # before the response is sent, so that a response never reports a
        # job whose commit then fails (FastAPI's default for a dependency
        # with yield ends it after the response).
        self.transaction = Depends(self.request_transaction, scope="function")
