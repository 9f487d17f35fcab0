"""What the ASGI frameworks' integrations share: the App's clients opened
with the web application and closed with it."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from ..worker.app import App

STATE_KEY = "fenceq_app"


@contextlib.asynccontextmanager
async def clients_open(app: App) -> AsyncIterator[dict[str, App]]:
    """Open the App's async client on the server's loop (a wrong URL fails
    the start, not the first request) and close its clients at shutdown.
    Its value is the lifespan state Starlette keeps (``request.state.fenceq_app``)."""
    await app.async_client()
    try:
        yield {STATE_KEY: app}
    finally:
        await app.aclose()


class Integration:
    """``lifespan`` for the framework, and the App as a dependency."""

    def __init__(self, app: App):
        self.app = app

    def __call__(self) -> App:
        return self.app

    def lifespan(self, web_app: Any) -> contextlib.AbstractAsyncContextManager[dict[str, App]]:
        return clients_open(self.app)
