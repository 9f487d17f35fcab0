"""What the SQLite client computes for set_schedule and tick (SQLite has no
time zones): the statement files take the occurrences, evaluated here with
``fenceq.cron`` inside the call's own write transaction.

- set_schedule: the cron expression and time zone are checked (QF100) and
  ``:next_run_at`` is the first occurrence after the clock (none while
  paused).
- tick: ``tick_due.sql`` reads the due schedules and the clock in the same
  transaction; for each, the latest occurrence due (none when it lies before
  ``next_run_at``), the first after that clock and the fingerprint of the
  job it submits become one element of ``:ticks``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable

from .. import canonical, cron

# Runs a statement file in the open transaction and returns its answer rows.
ReadFile = Callable[[str], list[dict[str, Any]]]


def _utc_text(value: datetime | None) -> str | None:
    return None if value is None else canonical.utc_text(value)


def submission_id(schedule: str, occurrence: datetime) -> str:
    """The submission id of a schedule's job for one occurrence (UTC, whole seconds)."""
    return f"fenceq:schedule:{schedule}:{canonical.utc_text(occurrence)[:19]}Z"


def set_schedule_parameters(bound: dict[str, Any], read: ReadFile) -> dict[str, Any]:
    expression, zone = cron.parse(bound["cron"]), cron.zone(bound["time_zone"])
    upcoming = None if bound["paused"] else cron.next_after(expression, zone, datetime.now(timezone.utc))
    return {"next_run_at": _utc_text(upcoming)}


def tick_parameters(bound: dict[str, Any], read: ReadFile) -> dict[str, Any]:
    ticks = []
    for due in read("tick_due"):
        expression, zone = cron.parse(due["cron"]), cron.zone(due["time_zone"])
        now = datetime.fromisoformat(due["now"])
        occurrence = cron.latest_at_or_before(expression, zone, now)
        if occurrence is not None and occurrence < datetime.fromisoformat(due["next_run_at"]):
            occurrence = None  # the zone's rules changed since next_run_at was computed
        fingerprint = None if occurrence is None else canonical.fingerprint(
            queue=due["queue"], task=due["task"],
            payload=None if due["payload"] is None else json.loads(due["payload"]),
            submission_id=submission_id(due["schedule"], occurrence), job_id=None,
            priority=due["priority"], run_at=occurrence, expires_at=None,
            max_attempts=due["max_attempts"], active_key=due["active_key"], force=False)
        ticks.append({"schedule": due["schedule"], "revision": due["revision"],
                      "next_run_at": due["next_run_at"], "occurrence": _utc_text(occurrence),
                      "following": _utc_text(cron.next_after(expression, zone, now)),
                      "fingerprint": fingerprint})
    return {"ticks": json.dumps(ticks, ensure_ascii=False, separators=(",", ":"))}


# The operations whose statement files take parameters computed here.
COMPUTED_IN_TRANSACTION = {"set_schedule": set_schedule_parameters, "tick": tick_parameters}
