"""FastAPI (docs/integrations.md#fastapi): ``Fenceq(app)`` is a lifespan
that opens the App's clients with the application and closes them at
shutdown, and a dependency that gives path operations the App.

    tasks = Fenceq(app)
    api = FastAPI(lifespan=tasks.lifespan)

    @api.post("/thumbnails")
    async def create(url: str, fenceq_app: fenceq.App = Depends(tasks)):
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id}
"""

from __future__ import annotations

from .asgi import Integration


class Fenceq(Integration):
    """``FastAPI(lifespan=Fenceq(app).lifespan)``; ``Depends(it)`` answers the App."""
