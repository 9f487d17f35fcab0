"""Structured logs for the worker.

Every worker log record carries an ``event`` name and a dict of fields
(``record.fenceq``): job id, task, generation, owner and so on. Two
formatters render them: ``JsonFormatter`` (one JSON object a line, for log
shippers and for the demo, which reads its workers' logs) and
``TextFormatter`` (``time level event key=value ... message``, for people).
Claim tokens never appear in either.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

LOGGER_NAME = "fenceq.worker"


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fenceq", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "message": record.getMessage(),
        }
        for key, value in event_fields(record).items():
            document.setdefault(key, value)
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``2024-05-01T10:00:00.123Z INFO  completed job_id=… generation=1  job completed``"""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={_text(value)}" for key, value in event_fields(record).items())
        event = getattr(record, "event", None)
        parts = [_timestamp(record), f"{record.levelname:<7}"]
        if event:
            parts.append(event)
        if fields:
            parts.append(fields)
        line = " ".join(parts) + "  " + record.getMessage()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() for c in text) or '"' in text:
        return json.dumps(text, ensure_ascii=False)
    return text


def configure(fmt: str = "text", level: str | int = "INFO", stream: TextIO | None = None) -> None:
    """Send fenceq's logs (``fenceq.*``) to ``stream`` (default stderr) in
    ``fmt`` ("text" or "json")."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("fenceq")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    root.propagate = False
