"""How the PostgreSQL backend has the driver build records from rows
(fenceq.backends.postgres.record_rows): by position only when the columns
are the record's fields in order and none is keyword-only, else by name
(no database needed: a cursor's description is all it reads)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from fenceq.backends.postgres import record_rows
from fenceq.types import SearchedJob


def cursor_with(names: list[str]) -> SimpleNamespace:
    return SimpleNamespace(description=[SimpleNamespace(name=name) for name in names])


@dataclasses.dataclass(frozen=True)
class Pair:
    first: str
    second: int


def test_columns_in_field_order_make_the_record_by_position() -> None:
    make = record_rows(Pair)(cursor_with(["first", "second"]))
    assert make(("a", 1)) == Pair("a", 1)


def test_columns_in_another_order_make_the_record_by_name() -> None:
    make = record_rows(Pair)(cursor_with(["second", "first"]))
    assert make((1, "a")) == Pair("a", 1)


def test_a_keyword_only_field_is_passed_by_name_even_in_field_order() -> None:
    names = [field.name for field in dataclasses.fields(SearchedJob)]
    values = tuple(range(len(names)))
    job = record_rows(SearchedJob)(cursor_with(names))(values)
    assert job.seq == values[names.index("seq")]
    assert job.job_id == values[names.index("job_id")]
