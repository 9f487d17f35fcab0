"""How the pages show values: times in UTC, ages in words, JSON pretty and
clipped. Every value is escaped by the templates (autoescape); these only
shape text."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

PAYLOAD_CHARS = 4000   # a job page shows at most this much of a payload, result or error
CELL_CHARS = 80        # a table cell


def when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def age(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def clip(text: Any, limit: int = CELL_CHARS) -> str:
    """Text cut to ``limit`` characters, saying how much was left out."""
    if text is None:
        return ""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit:,} more characters)"


def json_text(value: Any, limit: int = PAYLOAD_CHARS) -> str:
    """A JSON value, indented, clipped."""
    return clip(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True), limit)


def json_line(value: Any, limit: int = CELL_CHARS) -> str:
    return clip(json.dumps(value, ensure_ascii=False, sort_keys=True), limit)


def figure(value: Any) -> str:
    """A queue_stats cell: numbers as they are, flags as yes/no, intervals as ages."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return age(value)
    if isinstance(value, datetime):
        return when(value)
    return "—" if value is None else clip(value)


FILTERS = {"when": when, "age": age, "clip": clip, "json_text": json_text, "json_line": json_line,
           "figure": figure}
