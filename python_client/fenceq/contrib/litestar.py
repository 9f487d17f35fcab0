"""Litestar (docs/integrations.md#litestar): ``FenceqPlugin(app)`` opens
the App's clients with the application, closes them at shutdown, and
provides the App to handlers as the dependency ``fenceq_app``.

    api = Litestar(route_handlers=[create], plugins=[FenceqPlugin(app)])

    @post("/thumbnails")
    async def create(url: str, fenceq_app: fenceq.App) -> dict:
        job = await make_thumbnail.submit_async(url=url)
        return {"job_id": job.id}
"""

from __future__ import annotations

from litestar.config.app import AppConfig
from litestar.di import Provide
from litestar.plugins import InitPluginProtocol

from .asgi import STATE_KEY, Integration


class FenceqPlugin(Integration, InitPluginProtocol):
    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.lifespan.append(self.lifespan)
        app_config.dependencies[STATE_KEY] = Provide(lambda: self.app, sync_to_thread=False)
        return app_config
