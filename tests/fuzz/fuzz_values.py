"""Hostile and boundary values shared by both engines' fuzzers.

Everything here is a Hypothesis strategy of plain Python values (strings,
numbers, JSON documents, durations, moments). Each engine turns them into
what it sends: SQL literals for PostgreSQL (fuzz_pg.py), client arguments or
driver parameters for SQLite (fuzz_sqlite.py). Big values (MiBs, thousands
of levels) are built from a drawn size, never drawn element by element, so
Hypothesis stays fast, and each is built once per process and then reused
(the callers only serialise them, never change them).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone

from hypothesis import strategies as st

# Strings ----------------------------------------------------------------------

RTL = "\u202eevil\u202c"  # right-to-left override
COMBINING = "e" + "\u0301\u0302\u0303" * 30  # one letter under 90 combining marks
EMOJI = "\U0001f980\U0001f469\u200d\U0001f4bb\U0001f1fa\U0001f1f3"  # crab, ZWJ sequence, flag
ZERO_WIDTH = "\u200b\ufeff\u2060"

# Text PostgreSQL can carry (no NUL, no lone surrogate): the boundaries of
# fenceq's limits (1..36 for job ids, 1..255 for names) and the odd ones.
EDGE_TEXTS = [
    "", " ", "a", "x" * 36, "x" * 37, "n" * 255, "n" * 256, "é" * 255, "é" * 256,
    RTL, COMBINING, EMOJI, ZERO_WIDTH, "\U0010ffff", "\ufffd", "'", "''", "\\", "%s", "%(x)s",
    "$$", "--", "/*", ";", "\n\r\t", "\x01\x1f\x7f", "NULL", "null", "{}", "[]", "{a,b}",
    "' OR 1=1 --",
]
LONG_TEXT_SIZES = [1_000, 65_536, 65_537, 1_000_000]

_alphabet = st.characters(codec="utf-8", exclude_characters="\x00")


@functools.cache
def plain_text(max_size: int = 24) -> st.SearchStrategy[str]:
    return st.text(_alphabet, min_size=1, max_size=max_size)


def weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, chosen with the given weights (percent)."""
    assert sum(w for w, _ in choices) == 100

    def pick(roll: int) -> st.SearchStrategy:
        for weight, strategy in choices:
            if roll < weight:
                return strategy
            roll -= weight
        raise AssertionError(roll)

    return st.integers(0, 99).flatmap(pick)


@functools.cache
def hostile_text() -> st.SearchStrategy[str]:
    """Strings PostgreSQL text can hold, at fenceq's limits and beyond
    (long ones rarely: they are slow to send)."""
    return weighted(
        (55, st.sampled_from(EDGE_TEXTS)),
        (40, plain_text(40)),
        (5, st.builds(lambda n, c: c * n, st.sampled_from(LONG_TEXT_SIZES), st.sampled_from(["x", "é", EMOJI]))),
    )


# Strings only Python and SQLite can hold; PostgreSQL refuses them (22021).
UNENCODABLE_TEXTS = ["a\x00b", "\x00", "\ud800", "a\udfffb", "\udc00\ud800"]

# Integers -----------------------------------------------------------------------

INT_EDGES = [0, 1, -1, 2, 5, 100, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32,
             2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30]


@functools.cache
def integers() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(INT_EDGES), st.integers(-5, 10_000), st.integers())


FLOAT_EDGES = [0.0, -0.0, 0.5, 0.999999, 1.0, 1.5, 2.0, 10.0, 1e308, -1e308, 5e-324, 1e-320,
               float("inf"), float("-inf"), float("nan")]

# JSON ---------------------------------------------------------------------------

DEPTHS = [1, 2, 127, 128, 129, 1_000, 5_000, 20_000, 200_000]
MEBIBYTE = 1024 * 1024
HUGE_SIZES = [MEBIBYTE - 64, MEBIBYTE - 2, MEBIBYTE + 1, 2 * MEBIBYTE, 5 * MEBIBYTE]

# JSON texts that are not what they seem: escapes PostgreSQL refuses (NUL,
# lone surrogates), a valid surrogate pair, numbers past double precision,
# duplicate keys, and texts that are not JSON at all.
ODD_JSON_TEXTS = [
    '"\\u0000"', '"\\ud800"', '"\\udfff"', '"\\udc00\\ud800"', '"\\ud83e\\udd80"', '"\\u202e"',
    '1e1000', '-0', '0.1e-400', '123456789012345678901234567890', '{"a":1,"a":2}', 'NaN', 'Infinity',
    '[1,]', '{', "'a'", '', ' ', '{"k":"' + RTL + '"}', '"' + COMBINING + '"', '[' + '1,' * 10 + '1]',
]


@functools.cache
def deep_text(depth: int, opener: str) -> str:
    closer = {"[": "]", '{"k":': "}"}[opener]
    return opener * depth + "1" + closer * depth


@functools.cache
def deep_value(depth: int, as_object: bool) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"k": value} if as_object else [value]
    return value


@functools.cache
def huge_text(size: int, shape: str) -> str:
    """A JSON text of about ``size`` bytes: one long string, a long array or
    a wide object."""
    if shape == "string":
        return '"' + "x" * (size - 2) + '"'
    if shape == "array":
        return "[" + ",".join(["1"] * (size // 2)) + "]"
    return "{" + ",".join(f'"k{i:07d}":1' for i in range(size // 13)) + "}"


@functools.cache
def huge_value(size: int, shape: str) -> object:
    if shape == "string":
        return "x" * (size - 2)
    if shape == "array":
        return [1] * (size // 2)
    return {f"k{i:07d}": 1 for i in range(size // 13)}


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), plain_text(20),
                         st.sampled_from([RTL, COMBINING, EMOJI, ZERO_WIDTH, "\\", '"']))
small_json = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(plain_text(8), inner, max_size=4)),
    max_leaves=12)


@functools.cache
def json_documents() -> st.SearchStrategy[object]:
    """Python JSON values: small ones, deep ones and huge ones."""
    return weighted(
        (90, small_json),
        (7, st.builds(deep_value, st.sampled_from(DEPTHS[:6]), st.booleans())),
        (3, st.builds(huge_value, st.sampled_from(HUGE_SIZES[:3]), st.sampled_from(["string", "array", "object"]))),
    )


@functools.cache
def json_texts() -> st.SearchStrategy[str]:
    """JSON texts: canonical small ones, deep, huge and odd ones."""
    import json

    return weighted(
        (70, small_json.map(lambda v: json.dumps(v, ensure_ascii=False))),
        (10, st.builds(deep_text, st.sampled_from(DEPTHS), st.sampled_from(["[", '{"k":']))),
        (3, st.builds(huge_text, st.sampled_from(HUGE_SIZES), st.sampled_from(["string", "array", "object"]))),
        (17, st.sampled_from(ODD_JSON_TEXTS)),
    )


# Durations and moments -------------------------------------------------------------

TIMEDELTA_EDGES = [timedelta(0), timedelta(microseconds=1), timedelta(microseconds=-1), timedelta(seconds=1),
                   timedelta(seconds=30), timedelta(hours=1), timedelta(days=1), timedelta(days=-1),
                   timedelta(days=365 * 7000), timedelta(days=365 * 8000), timedelta.max, timedelta.min,
                   timedelta(days=2_932_896), timedelta(seconds=0.5)]


@functools.cache
def timedeltas() -> st.SearchStrategy[timedelta]:
    return st.one_of(st.sampled_from(TIMEDELTA_EDGES), st.timedeltas(),
                     st.timedeltas(timedelta(0), timedelta(minutes=5)))


@functools.cache
def _zones() -> st.SearchStrategy[timezone]:
    return st.sampled_from([timezone.utc, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12)),
                            timezone(timedelta(hours=23, minutes=59)), timezone(-timedelta(hours=23, minutes=59))])


DATETIME_EDGES = [datetime.min.replace(tzinfo=timezone.utc), datetime.max.replace(tzinfo=timezone.utc),
                  datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),
                  datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
                  datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(2000, 1, 1),  # the last is naive
                  datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)]


@functools.cache
def moments() -> st.SearchStrategy[datetime]:
    """Aware datetimes near now (past and future), at the limits, and naive ones."""
    now = datetime.now(timezone.utc)
    near = st.builds(lambda d, z: (now + d).astimezone(z),
                     st.timedeltas(-timedelta(days=2), timedelta(days=2)), _zones())
    return st.one_of(near, near, st.sampled_from(DATETIME_EDGES),
                     st.datetimes(timezones=_zones()), st.datetimes())
