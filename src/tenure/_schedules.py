"""Cron schedules (SPEC §22): when a schedule's ticks fall, and the firing of due ticks by a
worker's maintenance pass.

Every worker fires due schedules. Each tick creates exactly one run whatever the number of
workers and hosts: the schedule's row advances by a compare-and-set on the next tick it was
read with, in the same transaction as the enqueue, and the run's idempotency key is
`schedule:NAME:TICK` besides. Ticks missed while no worker ran fire once, for the latest.

Times: a cron expression is read in the schedule's time zone (`zoneinfo`). A wall-clock time
that occurs twice (when clocks go back) fires once, at its first occurrence; one that does
not occur (when clocks go forward) fires at the first time after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tenure._errors import InvalidRequest

if TYPE_CHECKING:
    from croniter import croniter as Croniter

log = logging.getLogger("tenure.schedules")

MAX_SCHEDULE_NAME = 200


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: its cron expression and time zone, the request each tick enqueues,
    whether it is paused, its next tick, and its last fire (tick, run, how many so far)."""

    name: str
    cron: str
    timezone: str
    request: dict[str, Any] | None
    paused: bool
    next_fire: datetime | None
    last_fire: datetime | None
    last_run_id: str | None
    fired: int
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "timezone": self.timezone,
            "paused": self.paused,
            "next_fire": self.next_fire.isoformat() if self.next_fire else None,
            "last_fire": self.last_fire.isoformat() if self.last_fire else None,
            "last_run_id": self.last_run_id,
            "fired": self.fired,
            "queue": (self.request or {}).get("queue", "default"),
            "created_at": self.created_at.isoformat(),
        }


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_SCHEDULE_NAME:
        raise InvalidRequest(
            f"a schedule name must be a non-empty string of at most {MAX_SCHEDULE_NAME} "
            f"characters, got {name!r}"
        )
    return name


def zone(name: Any) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"timezone must be a time zone name such as 'UTC', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a path
        raise InvalidRequest(f"unknown time zone {name[:100]!r}") from None


def _croniter() -> type[Croniter]:
    """croniter, imported on first use: importing tenure does not wait for it."""
    from croniter import croniter

    return croniter


def check_cron(cron: Any) -> str:
    """Five fields (minute hour day month weekday), or one of croniter's names such as
    `@hourly`; not croniter's optional seconds and years. An expression that never fires
    (`0 0 31 2 *`) is refused too."""
    if not isinstance(cron, str):
        raise InvalidRequest(f"a cron expression must be a string, got {cron!r}")
    five = cron.strip().startswith("@") or len(cron.split()) == 5
    if not five or "\x00" in cron or not _croniter().is_valid(cron):
        raise InvalidRequest(
            f"not a cron expression (minute hour day month weekday): {cron[:100]!r}"
        )
    next_after(cron, ZoneInfo("UTC"), datetime(2000, 1, 1, tzinfo=UTC))
    return cron


def next_after(cron: str, tz: ZoneInfo, after: datetime) -> datetime:
    """The first tick strictly after `after`, in UTC."""
    it = _croniter()(cron, after.astimezone(tz))
    while True:
        try:
            candidate = it.get_next(datetime)
        except ValueError:  # croniter's: no date matches within its search
            raise InvalidRequest(f"the cron expression {cron!r} never fires") from None
        if _first_occurrence(candidate, tz):
            return candidate.astimezone(UTC)


def latest_at_or_before(cron: str, tz: ZoneInfo, now: datetime) -> datetime:
    """The last tick at or before `now`, in UTC."""
    croniter = _croniter()
    it = croniter(cron, now.astimezone(tz))
    if croniter.match(cron, now.astimezone(tz)) and now.astimezone(tz).second == 0:
        candidate = now.astimezone(tz)
        if _first_occurrence(candidate, tz):
            return candidate.astimezone(UTC)
    while True:
        candidate = it.get_prev(datetime)
        if _first_occurrence(candidate, tz):
            return candidate.astimezone(UTC)


def _first_occurrence(t: datetime, tz: ZoneInfo) -> bool:
    """Whether `t` is the first instant its wall-clock time names (not the repeat when
    clocks go back)."""
    wall = t.astimezone(tz).replace(tzinfo=None)
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC) == t.astimezone(UTC)


def tick_key(name: str, tick: datetime) -> str:
    return f"schedule:{name}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


class Scheduler:
    """Fires the due ticks of every schedule; called by each worker's maintenance pass.
    `enqueue(schedule, tick, next_fire)` enqueues the tick's run and advances the
    schedule in one transaction, returning the run's id, or None when another worker
    advanced it first."""

    def __init__(
        self,
        due: Callable[[], tuple[datetime, list[tuple[Schedule, Any]]]],
        fire: Callable[[Schedule, Any, datetime, datetime], str | None],
    ) -> None:
        self._due = due
        self._fire = fire

    def fire_due(self) -> int:
        now, due = self._due()
        fired = 0
        for schedule, seen in due:
            try:
                tz = zone(schedule.timezone)
                tick = latest_at_or_before(schedule.cron, tz, now)
                following = next_after(schedule.cron, tz, now)
            except ValueError as exc:  # InvalidRequest and croniter's errors are ValueErrors
                log.error("schedule %s cannot be fired: %s", schedule.name, exc)
                continue
            if self._fire(schedule, seen, tick, following) is not None:
                fired += 1
        return fired
