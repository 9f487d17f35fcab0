"""From an operation's declared result type to the method's answer.

An ``Op`` declares its shape and its result type (``ops.py``). Each value
is decoded by the kind its declared type names: a record's fields
(``types.py``) for the columns of a row, the value type for a scalar. So a
``cancel_requested`` column is a boolean in a ``Job`` and a count in a
``QueueStats``, as each record declares. A backend turns its engine's wire
values into Python values with ``Kind`` (PostgreSQL's driver already does),
then ``answer`` shapes them: only the kinds a backend has a decoder for
are touched, the rest (the engine's text and numbers) are taken as they are.
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


@functools.cache
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


@functools.cache
def columns_by_kind(record: type) -> Mapping[Kind, tuple[str, ...]]:
    """The fields of a record class grouped by kind (a decoder visits only its own)."""
    grouped: dict[Kind, tuple[str, ...]] = {}
    for column, kind in column_kinds(record).items():
        grouped[kind] = grouped.get(kind, ()) + (column,)
    return grouped


# A backend's decoders: from one non-NULL wire value of a kind to its Python
# value. Kinds without one are passed through.
Decoders = Mapping[Kind, Callable[[Any], Any]]


def answer(op: Op, rows: list[dict[str, Any]], decoders: Decoders | None = None) -> Any:
    """The method's answer from the rows a call returned (a scalar arrives
    as the column ``value`` of the first row). Without ``decoders`` the
    driver's values are used as they are; the row dicts are decoded in
    place."""
    if op.shape == Shape.VOID:
        return None
    if op.shape == Shape.SCALAR:
        value = rows[0]["value"] if rows else None
        if value is None or not decoders or op.returns is None:
            return value
        decoder = decoders.get(kind_of(op.returns))
        return value if decoder is None else decoder(value)
    return shaped(op, [_record(op.returns, row, decoders) for row in rows])


def shaped(op: Op, records: list[Any]) -> Any:
    """A ROW or ROWS method's answer from its records (or rows)."""
    if op.shape == Shape.ROWS:
        return records
    return records[0] if records else None


def _record(record: type | None, row: dict[str, Any], decoders: Decoders | None) -> Any:
    if record is None:
        return row
    if decoders:
        columns = columns_by_kind(record)
        for kind, decoder in decoders.items():
            for column in columns.get(kind, ()):
                if row.get(column) is not None:
                    row[column] = decoder(row[column])
    return record(**row)
