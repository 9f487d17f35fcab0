"""From an operation's declared result type to the method's answer.

An ``Op`` declares its shape and its result type (``ops.py``). Each value
is decoded by the kind its declared type names: a record's fields
(``types.py``) for the columns of a row, the value type for a scalar. So a
``cancel_requested`` column is a boolean in a ``Job`` and a count in a
``QueueStats``, as each record declares. A backend turns its engine's wire
values into Python values with ``Kind`` (PostgreSQL's driver already does),
then ``answer`` shapes them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping

from ..ops import Op, Shape


class Kind(enum.Enum):
    BOOLEAN = "boolean"
    INTEGER = "integer"
    DOUBLE = "double"
    TEXT = "text"
    TIMESTAMP = "timestamp"
    INTERVAL = "interval"
    JSON = "json"  # Any, dict, list: a JSON value, object or array


_KINDS = ((bool, Kind.BOOLEAN), (int, Kind.INTEGER), (float, Kind.DOUBLE), (str, Kind.TEXT),
          (datetime, Kind.TIMESTAMP), (timedelta, Kind.INTERVAL))


def kind_of(declared: Any) -> Kind:
    """The kind a declared Python type names (``X | None`` names X's)."""
    if typing.get_origin(declared) in (typing.Union, types.UnionType):
        declared = next(arg for arg in typing.get_args(declared) if arg is not type(None))
    for python_type, kind in _KINDS:
        if declared is python_type:
            return kind
    return Kind.JSON


@functools.cache
def column_kinds(record: type) -> Mapping[str, Kind]:
    """The kind of each field of a record class, by its declared type."""
    hints = typing.get_type_hints(record)
    return {f.name: kind_of(hints[f.name]) for f in dataclasses.fields(record)}


Decode = Callable[[Kind, Any], Any]


def answer(op: Op, rows: list[dict[str, Any]], decode: Decode | None = None) -> Any:
    """The method's answer from the rows a call returned (a scalar arrives
    as the column ``value`` of the first row). ``decode`` turns one
    non-NULL wire value of a kind into its Python value; without it the
    driver's values are used as they are."""
    if op.shape == Shape.VOID:
        return None
    if op.shape == Shape.SCALAR:
        value = rows[0]["value"] if rows else None
        if value is None or decode is None or op.returns is None:
            return value
        return decode(kind_of(op.returns), value)
    records = [_record(op.returns, row, decode) for row in rows]
    if op.shape == Shape.ROWS:
        return records
    return records[0] if records else None


def _record(record: type | None, row: dict[str, Any], decode: Decode | None) -> Any:
    if record is None:
        return row
    if decode is not None:
        kinds = column_kinds(record)
        row = {column: value if value is None else decode(kinds[column], value)
               for column, value in row.items()}
    return record(**row)
