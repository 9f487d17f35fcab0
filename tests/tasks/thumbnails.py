"""A user's App, as docs/testing-your-tasks.md tests it."""

from __future__ import annotations

import dataclasses

import fenceq

app = fenceq.App(queues=["media"])
attempts: list[int] = []  # every attempt of flaky_fetch, in order


@dataclasses.dataclass
class Size:
    width: int
    height: int


@app.task(queue="media")
def make_thumbnail(ctx, url: str, size: Size) -> dict:
    pixels = ctx.checkpoint("fetch", lambda: len(url) * 100)
    return {"url": url, "pixels": pixels, "area": size.width * size.height}


@app.task(queue="media")
async def publish(ctx, url: str) -> str:
    follow_up = await make_thumbnail.submit_async(url=url, size=Size(2, 2))
    return follow_up.id


@app.task(queue="media", max_attempts=2)
def flaky_fetch(ctx, url: str) -> str:
    attempts.append(ctx.attempt)
    if ctx.attempt == 1:
        raise ConnectionError(f"{url} is not answering yet")
    return "fetched"


@app.task(queue="media", max_attempts=5)
def refuse(ctx, url: str) -> None:
    raise fenceq.NonRetryable(f"{url} is not an image")
