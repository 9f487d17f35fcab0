"""Cron expressions for periodic schedules (docs/guarantees.md §14).

The same grammar and the same evaluation as PostgreSQL's ``fenceq._cron_*``
functions (sql/postgres/054_schedules.sql), step for step, so that both
engines agree on every occurrence; SQLite schedules are evaluated here (its
SQL has no time zones). ``tests/test_cron.py`` holds the two to the same
answers, and both to a well-kept cron library outside daylight-saving
transitions.

Grammar: five fields (minute, hour, day of month, month, day of week)
separated by spaces or tabs, or one of ``@hourly @daily @weekly @monthly
@yearly``. A field is a comma-separated list of ``*``, ``*/S``, ``A``,
``A-B`` or ``A-B/S``, where A and B are one or two digits or (month, day of
week) a three-letter English name, and S one or two digits from 1. Names and
macros are case-insensitive; the expression is ASCII. Day of week 0-7, 0
and 7 Sunday. A field that starts with ``*`` is unrestricted: when day of
month and day of week are both restricted, a day matching either fires;
otherwise both must match (classic cron).

Evaluation, in the schedule's IANA time zone: a candidate is a local wall
time that matches; it fires at the first instant at which the local clock
reads that time or later. So a time skipped by a daylight-saving jump fires
at the first instant after the gap, and a time that occurs twice fires once,
at its first instance. Like PostgreSQL, the conversion assumes that a zone's
offset changes at most once in any 48 hours.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from .errors import config_error

UTC = timezone.utc
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0",
          "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *"}
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Every expression that can fire does so within 12 years (the first of a
# month on a given weekday, around a century without a leap day): searches
# give up after 28.
HORIZON_DAYS = 10227
_FIRST_DAY, _LAST_DAY = date(1, 1, 3), date(9999, 12, 30)
_ITEM = re.compile(r"(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?")
_SEPARATOR = re.compile(r"[ \t]+")
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, MONTH_NAMES), ("day of week", 0, 7, DAY_NAMES))


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the allowed values of each field, ascending
    (weekdays 0-6, Sunday 0), and whether day of month and day of week must
    both match."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    days_and: bool


def _bad(message: str) -> Exception:
    return config_error("QF100", f"cron expression {message}")


def _field(text: str, what: str, low: int, high: int, names: tuple[str, ...]) -> tuple[int, ...]:
    def value(token: str) -> int:
        if token.isdigit():
            number = int(token)
        elif token.upper() in names:
            number = low + names.index(token.upper())
        else:
            raise _bad(f"does not parse ({what} field)")
        if not low <= number <= high:
            raise _bad(f"is out of range ({what} field)")
        return number

    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if match is None or (match[2] is not None and match[3] is None and match[4] is not None):
            raise _bad(f"does not parse ({what} field)")
        first = low if match[1] else value(match[2])
        last = high if match[1] else value(match[3]) if match[3] else first
        step = int(match[4]) if match[4] else 1
        if first > last or step < 1:
            raise _bad(f"is out of range ({what} field)")
        values.update(range(first, last + 1, step))
    if what == "day of week":
        values = {v % 7 for v in values}
    return tuple(sorted(values))


def parse(expression: object) -> Cron:
    """Parse an expression (QF100 when it does not parse or can never fire)."""
    if not isinstance(expression, str) or not 1 <= len(expression) <= 255:
        raise _bad("must be a string of 1 to 255 characters")
    if not expression.isascii():
        raise _bad("does not parse")
    text = expression.strip(" \t")
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise _bad("names an unknown macro")
        text = MACROS[text.lower()]
    fields = _SEPARATOR.split(text)
    if len(fields) != 5:
        raise _bad("must have five fields")
    minutes, hours, days, months, weekdays = (
        _field(field, what, low, high, names) for field, (what, low, high, names) in zip(fields, _FIELDS))
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    if days_and and not any(day <= LONGEST_MONTH[month - 1] for month in months for day in days):
        raise _bad("can never fire")
    return Cron(minutes, hours, days, months, weekdays, days_and)


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def zone(name: object) -> zoneinfo.ZoneInfo:
    """The IANA zone of that exact name (QF100 for an unknown one)."""
    if not isinstance(name, str) or name not in _known_zones():
        raise config_error("QF100", "time_zone must name a known IANA time zone")
    return zoneinfo.ZoneInfo(name)


def _wall(instant: datetime, tz: zoneinfo.ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def _offset(instant: datetime, tz: zoneinfo.ZoneInfo) -> timedelta:
    return instant.astimezone(tz).utcoffset()  # type: ignore[return-value]


def first_instant(local: datetime, tz: zoneinfo.ZoneInfo) -> datetime:
    """The first instant (UTC) at which the local clock reads ``local``
    (naive) or later: its first instance, or the end of the gap it falls in."""
    as_utc = local.replace(tzinfo=UTC)
    before, after = _offset(as_utc - timedelta(hours=24), tz), _offset(as_utc + timedelta(hours=24), tz)
    early, late = as_utc - max(before, after), as_utc - min(before, after)
    for candidate in (early, late):
        if _wall(candidate, tz) == local:
            return candidate
    # In a gap: the wall time jumps past local between early and late.
    while late - early > timedelta(seconds=1):
        middle = early + timedelta(seconds=(late - early) // timedelta(seconds=1) // 2)
        if _wall(middle, tz) >= local:
            late = middle
        else:
            early = middle
    return late


def _day_matches(cron: Cron, day: date) -> bool:
    in_month = day.day in cron.days
    on_weekday = day.isoweekday() % 7 in cron.weekdays
    return (in_month and on_weekday) if cron.days_and else (in_month or on_weekday)


def _step(cron: Cron, tz: zoneinfo.ZoneInfo, instant: datetime, forward: bool) -> datetime | None:
    local = _wall(instant, tz)
    if forward:
        start = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
    else:
        # A local time of a fold's first pass may lie after the wall clock now.
        fold = max(_offset(instant - timedelta(hours=24), tz) - _offset(instant, tz), timedelta(0))
        start = (local + fold).replace(second=0, microsecond=0)
    hours = cron.hours if forward else cron.hours[::-1]
    minutes = cron.minutes if forward else cron.minutes[::-1]
    direction = 1 if forward else -1
    limit = date.fromordinal(min(start.toordinal() + HORIZON_DAYS, _LAST_DAY.toordinal()) if forward
                             else max(start.toordinal() - HORIZON_DAYS, _FIRST_DAY.toordinal()))
    day = start.date()
    while (day <= limit) if forward else (day >= limit):
        if day.month not in cron.months:
            # On to the first day of the next month, or the last of the previous.
            if (day.year, day.month) == ((9999, 12) if forward else (1, 1)):
                return None
            if forward:
                day = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
            else:
                day = day.replace(day=1) - timedelta(days=1)
            continue
        if _day_matches(cron, day):
            for hour in hours:
                if day == start.date() and (hour - start.hour) * direction < 0:
                    continue
                for minute in minutes:
                    if day == start.date() and hour == start.hour and (minute - start.minute) * direction < 0:
                        continue
                    at = first_instant(datetime.combine(day, time(hour, minute)), tz)
                    if (at > instant) if forward else (at <= instant):
                        return at
        day += timedelta(days=direction)
    return None


def next_after(cron: Cron, tz: zoneinfo.ZoneInfo, instant: datetime) -> datetime | None:
    """The first occurrence strictly after ``instant`` (aware), in UTC; None
    when there is none before year 10000."""
    return _step(cron, tz, instant, forward=True)


def latest_at_or_before(cron: Cron, tz: zoneinfo.ZoneInfo, instant: datetime) -> datetime | None:
    """The last occurrence at or before ``instant`` (aware), in UTC."""
    return _step(cron, tz, instant, forward=False)
