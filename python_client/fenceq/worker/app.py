"""``App``, the registry of task handlers, and ``load_app`` for the CLI."""

from __future__ import annotations

import importlib
import os
import re
import sys
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from .executor import Handler
from .runtime import Worker

_NAME = re.compile(r"^.{1,255}$", re.DOTALL)


class App:
    """A registry of task handlers, and the queues its workers serve by default.

    ``@app.task("name")`` registers a handler ``fn(ctx)``: a plain function
    runs in a thread of its own, an ``async def`` on the worker's event loop.
    Its return value (JSON) becomes the job's result.
    """

    def __init__(self, name: str = "fenceq", *, queues: Iterable[str] = ("default",)):
        self.name = name
        self.queues = list(queues)
        self._tasks: dict[str, Handler] = {}

    def task(self, name: str | Handler | None = None) -> Any:
        """Decorator: ``@app.task("name")``, or bare ``@app.task`` to use the
        function's name."""
        if callable(name):
            self.register(name.__name__, name)
            return name

        def decorator(fn: Handler) -> Handler:
            self.register(name or fn.__name__, fn)
            return fn

        return decorator

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
        return Worker(self, **options)


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
