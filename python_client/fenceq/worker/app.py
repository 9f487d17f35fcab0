"""``App``, the registry of task handlers, and ``load_app`` for the CLI."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ..signatures import Mismatch, json_value
from ..tasks import DatabaseClients, Submitter, Task
from .context import NonRetryable
from .executor import Handler
from .runtime import Worker

_NAME = re.compile(r"^.{1,255}$", re.DOTALL)


class App:
    """A registry of task handlers, the queues its workers serve by default,
    and (for producers) the database its tasks are submitted to.

    ``@app.task`` registers a handler and answers a ``fenceq.tasks.Task``:
    a plain function runs in a thread of its own, an ``async def`` on the
    worker's event loop, and its return value (JSON) becomes the job's
    result. A handler ``fn(ctx)`` reads ``ctx.payload``; a typed handler
    ``fn(ctx, url: str, width: int = 256)`` is called with the payload's
    keys as its arguments, checked on both sides (docs/tasks.md).

    ``url`` is where ``task.submit`` sends jobs (default: the client's rule,
    ``$FENCEQ_DATABASE_URL``, else ./fenceq.db); a producer needs no worker.
    The App opens its clients when first used; ``close()`` / ``await
    aclose()`` close them.
    """

    def __init__(self, name: str = "fenceq", *, queues: Iterable[str] = ("default",), url: str | None = None):
        self.name = name
        self.queues = list(queues)
        self.url = url
        self._tasks: dict[str, Handler] = {}
        self.declared: dict[str, Task] = {}  # every Task of @app.task, by its name and by each alias
        self.submitter: Submitter = DatabaseClients(url)

    def task(self, name: str | Handler | None = None, *, queue: str | None = None, aliases: Iterable[str] = (),
             max_attempts: int | None = None, priority: int | None = None) -> Any:
        """Decorator: ``@app.task``, ``@app.task("name")`` or
        ``@app.task(queue=…, aliases=[…], max_attempts=…, priority=…)``.

        The name: the one given, else ``module.function`` for a typed
        handler, else (a plain ``fn(ctx)``) the function's name, as fenceq
        always named them. ``aliases`` are further names the workers accept
        (a renamed task's jobs already queued); ``queue`` (default: the
        App's first), ``max_attempts`` and ``priority`` are the defaults of
        its submissions."""
        options = {"queue": queue, "aliases": tuple(aliases),
                   "defaults": {key: value for key, value in (("max_attempts", max_attempts),
                                                               ("priority", priority)) if value is not None}}
        if callable(name):
            return self._declare(name, None, **options)
        return lambda fn: self._declare(fn, name, **options)

    def _declare(self, fn: Handler, name: str | None, **options: Any) -> Task:
        if not callable(fn):
            raise TypeError("a task handler must be callable")
        task = Task(self, fn, name or fn.__name__, **options)
        if name is None and task.typed:
            task.name = f"{fn.__module__}.{fn.__qualname__}"
        handler = decoding_handler(task) if task.typed else fn
        for each in (task.name, *task.aliases):
            self.register(each, handler)
            self.declared[each] = task
        return task

    def register(self, name: str, fn: Handler) -> None:
        if not isinstance(name, str) or not _NAME.match(name) or "\x00" in name:
            raise ValueError("a task name must be a string of 1 to 255 characters")
        if not callable(fn):
            raise TypeError("a task handler must be callable")
        if name in self._tasks and self._tasks[name] is not fn:
            raise ValueError(f"task {name!r} is already registered")
        self._tasks[name] = fn

    def handler(self, name: str) -> Handler | None:
        return self._tasks.get(name)

    @property
    def tasks(self) -> Mapping[str, Handler]:
        return MappingProxyType(self._tasks)

    def worker(self, **options: Any) -> Worker:
        return Worker(self, **{"url": self.url, **options})

    # Producers ---------------------------------------------------------------------

    def client(self) -> Any:
        """The App's sync ``Client`` (opened when first used)."""
        return self.submitter.client()

    async def async_client(self) -> Any:
        """The App's ``AsyncClient`` for the running event loop."""
        return await self.submitter.async_client()

    def close(self) -> None:
        self.submitter.close()

    async def aclose(self) -> None:
        await self.submitter.aclose()


def decoding_handler(task: Task) -> Handler:
    """A typed task's handler as the worker calls it, ``fn(ctx)``: the
    payload checked and turned into the arguments (a payload that does not
    fit fails the job without retry: another try cannot fit it better), the
    result into JSON (dataclasses and models as dicts)."""
    fn, signature = task.fn, task.signature
    assert signature is not None

    def arguments(ctx: Any) -> dict[str, Any]:
        try:
            return signature.arguments(ctx.payload)
        except Mismatch as error:
            raise NonRetryable(f"the payload does not fit {task.name}: {error}") from None

    if inspect.iscoroutinefunction(fn):
        async def handler(ctx: Any) -> Any:
            return json_value(await fn(ctx, **arguments(ctx)))
    else:
        def handler(ctx: Any) -> Any:
            return json_value(fn(ctx, **arguments(ctx)))

    return functools.wraps(fn)(handler)


def load_app(spec: str) -> App:
    """``module:attribute`` (attribute defaults to ``app``) -> the App."""
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    app = getattr(module, attribute or "app")
    if not isinstance(app, App):
        raise TypeError(f"{spec} is not a fenceq.App")
    return app
