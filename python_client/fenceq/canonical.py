"""Canonical JSON and submission fingerprints (docs/guarantees.md §4), byte-identical
to what PostgreSQL computes in ``fenceq._canonical_json`` and
``fenceq._fingerprint``.

- object keys sorted by code point, separators ``,`` and ``:``;
- strings escaped as PostgreSQL's ``to_json(text)`` does (``\\"``, ``\\\\``,
  ``\\b \\f \\n \\r \\t``, other control characters as lowercase ``\\u00xx``;
  everything else, non-ASCII included, as is);
- numbers as PostgreSQL prints a jsonb number: plain decimal, no exponent,
  no negative zero;
- timestamps as UTC ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPE_TABLE = {code: _ESCAPES.get(chr(code), f"\\u{code:04x}") for code in range(0x20)}
_ESCAPE_TABLE.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def json_string(value: str) -> str:
    return '"' + value.translate(_ESCAPE_TABLE) + '"'


def json_number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    text = format(Decimal(repr(value)), "f")
    if text.startswith("-") and Decimal(text) == 0:
        text = text[1:]
    return text


def canonical_json(value: Any) -> str:
    """Canonical text of an already validated JSON value."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, (int, float)):
        return json_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(
            json_string(key) + ":" + canonical_json(value[key]) for key in sorted(value)
        ) + "}"
    raise TypeError("not a JSON value")


def utc_text(value: datetime) -> str:
    moment = value.astimezone(timezone.utc)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}Z"
    )


def fingerprint(
    *,
    queue: str,
    task: str,
    payload: Any,
    submission_id: str,
    job_id: str | None,
    priority: int | None,
    run_at: datetime | None,
    expires_at: datetime | None,
    max_attempts: int | None,
    active_key: str | None,
    force: bool,
    concurrency_key: str | None = None,
    depends_on: Any = None,
) -> str:
    """'fq1:' + SHA-256 of the canonical request document, as authored.
    Parameters added after version 1 enter the document only when not None,
    so every earlier request keeps its fingerprint."""

    def text(value: str | None) -> str:
        return "null" if value is None else json_string(value)

    def moment(value: datetime | None) -> str:
        return "null" if value is None else json_string(utc_text(value))

    def number(value: int | None) -> str:
        return "null" if value is None else str(value)

    document = (
        '{"active_key":' + text(active_key)
        + ('' if concurrency_key is None else ',"concurrency_key":' + json_string(concurrency_key))
        + ('' if not depends_on else ',"depends_on":['
           + ','.join(json_string(i) for i in sorted(set(depends_on))) + ']')
        + ',"expires_at":' + moment(expires_at)
        + ',"force":' + ("true" if force else "false")
        + ',"job_id":' + text(job_id)
        + ',"max_attempts":' + number(max_attempts)
        + ',"payload":' + canonical_json(payload)
        + ',"priority":' + number(priority)
        + ',"queue":' + json_string(queue)
        + ',"run_at":' + moment(run_at)
        + ',"submission_id":' + json_string(submission_id)
        + ',"task":' + json_string(task)
        + ',"v":1}'
    )
    return "fq1:" + hashlib.sha256(document.encode("utf-8")).hexdigest()
