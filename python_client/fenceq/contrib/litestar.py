"""Litestar (docs/integrations.md#litestar): ``FenceqPlugin(app)`` opens
the App's clients with the application, closes them at shutdown, provides
the App to handlers as the dependency ``fenceq_app`` and one database
transaction per request as ``fenceq_tx``, committed when the handler
returns and rolled back when it raises.

    api = Litestar(route_handlers=[create], plugins=[FenceqPlugin(app, worker=True)])

    @post("/thumbnails")
    async def create(url: str, fenceq_tx: NamedDependency[AsyncTransaction]) -> dict:
        await fenceq_tx.execute("INSERT INTO uploads (url) VALUES (%s)", (url,))
        job = await make_thumbnail.using(fenceq_tx).submit_async(url=url)
        return {"job_id": job.id}
"""

from __future__ import annotations

from litestar.config.app import AppConfig
from litestar.di import Provide
from litestar.plugins import InitPluginProtocol

from .asgi import STATE_KEY, Integration

TRANSACTION_KEY = "fenceq_tx"


class FenceqPlugin(Integration, InitPluginProtocol):
    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.lifespan.append(self.lifespan)
        app_config.dependencies[STATE_KEY] = Provide(lambda: self.app, sync_to_thread=False)
        # Litestar ends a generator dependency after the handler, before the
        # response is sent, and throws the handler's exception into it.
        app_config.dependencies[TRANSACTION_KEY] = Provide(self.request_transaction)
        return app_config
