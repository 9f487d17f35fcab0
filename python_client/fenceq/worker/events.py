"""The worker's structured log events (``_worker_log.py`` formats them)."""

from __future__ import annotations

import logging
from typing import Any

from .._worker_log import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)


class Events:
    """Emits one named event with fields; every event names the worker."""

    def __init__(self, owner_id: str):
        self.owner_id = owner_id

    def emit(self, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
        if log.isEnabledFor(level):
            fields = {k: v for k, v in fields.items() if v is not None}
            fields.setdefault("worker", self.owner_id)
            log.log(level, message, extra={"event": event, "fenceq": fields})

    def exception(self, event: str, message: str, **fields: Any) -> None:
        """An unexpected error, with its traceback (call from an ``except``)."""
        log.exception(message, extra={"event": event, "fenceq": {**fields, "worker": self.owner_id}})
