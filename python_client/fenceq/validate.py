"""Input validation before dispatch (docs/guarantees.md §2), shared by both backends.

Each check raises the same QF code the SQL would raise, so a caller sees one
answer whichever side refuses. JSON values are validated and snapshotted into
canonical text at call time: later mutation of the caller's objects changes
nothing.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from .canonical import canonical_json
from .errors import config_error

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_JSON_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 128  # containers nested in one another (the server checks the same)
MAX_BATCH = 10_000
MAX_ERROR_CHARS = 65_536
_MIN_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)
_MAX_TIME = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


def _clean_text(value: str) -> bool:
    """No NUL and no unpaired surrogate (which UTF-8 cannot carry)."""
    if "\x00" in value:
        return False
    if value.isascii():  # a flag of the string: no surrogate to look for
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def name(value: Any, what: str, *, max_length: int = 255, nullable: bool = False,
         code: str = "QF102") -> str | None:
    if value is None:
        if nullable:
            return None
        raise config_error(code, f"{what} is required")
    if not isinstance(value, str) or not 1 <= len(value) <= max_length or not _clean_text(value):
        raise config_error(code, f"{what} must be a string of 1 to {max_length} characters")
    return value


def names(values: Any, what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise config_error("QF100", f"{what} must be a list of strings")
    result = list(values)
    if not result:
        raise config_error("QF100", f"{what} must be a non-empty list")
    if len(result) > MAX_BATCH:
        raise config_error("QF100", f"{what} may hold at most {MAX_BATCH} elements")
    return [name(item, what) for item in result]  # type: ignore[misc]


def job_id(value: Any, *, nullable: bool = False) -> str | None:
    return name(value, "job_id", max_length=36, nullable=nullable)


def dlq_id(value: Any) -> str:
    if not isinstance(value, str) or len(value) != 32 or any(c not in "0123456789abcdef" for c in value):
        raise config_error("QF102", "dlq_id must be 32 lowercase hex characters")
    return value


def integer(value: Any, what: str, *, nullable: bool = True, minimum: int = INT32_MIN,
            maximum: int = INT32_MAX) -> int | None:
    if value is None:
        if nullable:
            return None
        raise config_error("QF104", f"{what} is required")
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise config_error("QF104", f"{what} must be an integer from {minimum} to {maximum}")
    return value


def dependencies(value: Any) -> tuple[str, ...] | None:
    """A submit's depends_on: job ids, made canonical (distinct, sorted by
    code point); None or empty means no dependencies."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise config_error("QF100", "depends_on must be a list of job ids")
    ids = tuple(sorted({job_id(item) for item in value}))  # type: ignore[misc]
    if len(ids) > 100:
        raise config_error("QF100", "a job may depend on at most 100 jobs")
    return ids or None


def boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise config_error("QF100", f"{what} must be a bool")
    return value


def factor(value: Any, what: str = "backoff_factor") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise config_error("QF104", f"{what} must be a finite number of at least 1")
    return float(value)


def duration(value: Any, what: str, *, allow_zero: bool = False, nullable: bool = True,
             backwards: bool = False) -> timedelta | None:
    """A positive timedelta (>= 0 with allow_zero) short enough that now +
    value (now - value when backwards) stays within years 0001-9999."""
    if value is None:
        if nullable:
            return None
        raise config_error("QF100", f"{what} is required")
    if not isinstance(value, timedelta):
        raise config_error("QF105", f"{what} must be a datetime.timedelta")
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        raise config_error("QF105", f"{what} must be {'non-negative' if allow_zero else 'positive'}")
    now = datetime.now(timezone.utc)
    if value > (now - _MIN_TIME if backwards else _MAX_TIME - now):
        raise config_error("QF105", f"{what} reaches beyond years 0001-9999")
    return value


def moment(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise config_error("QF105", f"{what} must be a time-zone aware datetime")
    try:
        utc = value.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise config_error("QF105", f"{what} must be within years 0001-9999 UTC") from None
    if utc < _MIN_TIME:
        raise config_error("QF105", f"{what} must be within years 0001-9999 UTC")
    return value


class CheckedJSON:
    """A value already checked by ``json_value``, as its canonical text: the
    worker checks a handler's result once, when the handler returns, and
    hands this on, so the completion does not check it again."""

    __slots__ = ("text",)

    def __init__(self, value: Any, what: str):
        self.text = json_value(value, what)


def json_value(value: Any, what: str) -> str:
    """Validate a JSON value and return its canonical text (the snapshot)."""
    if type(value) is CheckedJSON:
        return value.text
    if value is None:
        return "null"
    _check_json(value, what, depth=0)
    text = canonical_json(value)
    if len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise config_error("QF103", f"{what} exceeds 1 MiB in canonical form")
    return text


def _check_json(value: Any, what: str, depth: int) -> None:
    if depth >= MAX_JSON_DEPTH and isinstance(value, (list, tuple, dict)):
        raise config_error("QF103", f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise config_error("QF103", f"{what} must be finite JSON (no NaN or Infinity)")
        return
    if isinstance(value, str):
        if not _clean_text(value):
            raise config_error("QF103", f"{what} holds a NUL character or an unpaired surrogate")
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise config_error("QF103", f"{what} has a non-string object key")
            if not _clean_text(key):
                raise config_error("QF103", f"{what} holds a NUL character or an unpaired surrogate")
            _check_json(item, what, depth + 1)
        return
    raise config_error("QF103", f"{what} must hold only JSON values (dict, list, str, int, float, bool, None)")


def error_text(value: Any) -> str:
    if not isinstance(value, str) or not _clean_text(value):
        raise config_error("QF100", "error must be a string without NUL characters")
    return value[:MAX_ERROR_CHARS]


def fence_parts(job: Any, owner: Any, generation: Any, token: Any) -> None:
    """The four fence parts must be well formed (QF106)."""
    ok = (
        isinstance(job, str) and 1 <= len(job) <= 36
        and isinstance(owner, str) and 1 <= len(owner) <= 255
        and isinstance(token, str) and 1 <= len(token) <= 255
        and _clean_text(job + owner + token)  # one check: a surrogate stays unpaired when joined
        and isinstance(generation, int) and not isinstance(generation, bool)
        and 1 <= generation <= INT64_MAX
    )
    if not ok:
        raise config_error("QF106", "the fence is malformed")


def sequence(values: Any, what: str) -> Sequence[Any]:
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
        raise config_error("QF100", f"{what} must be a list")
    result = list(values)
    if len(result) > MAX_BATCH:
        raise config_error("QF100", f"{what} may hold at most {MAX_BATCH} elements")
    return result
