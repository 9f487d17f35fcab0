"""The worker's structured log events (``_worker_log.py`` formats them)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from .._worker_log import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)


# Called with every event's name and fields, whatever the log level (the metrics).
Listener = Callable[[str, dict[str, Any]], None]


class Events:
    """Emits one named event with fields; every event names the worker."""

    def __init__(self, owner_id: str):
        self.owner_id = owner_id
        self.listeners: list[Listener] = []

    def wanted(self, level: int) -> bool:
        """Whether an event of this level reaches anyone (a listener, or the
        log): a hot path builds an event's fields only then."""
        return True if self.listeners else log.isEnabledFor(level)

    def emit(self, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
        for listener in self.listeners:
            try:
                listener(event, fields)
            except Exception:  # noqa: BLE001 - an observer must never stop the worker
                log.exception("event listener failed", extra={"event": "listener_error"})
        if log.isEnabledFor(level):
            fields = {k: v for k, v in fields.items() if v is not None}
            fields.setdefault("worker", self.owner_id)
            log.log(level, message, extra={"event": event, "fenceq": fields})

    def exception(self, event: str, message: str, **fields: Any) -> None:
        """An unexpected error, with its traceback (call from an ``except``)."""
        log.exception(message, extra={"event": event, "fenceq": {**fields, "worker": self.owner_id}})
