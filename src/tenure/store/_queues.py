"""Paused queues (`tenure_paused_queues`): the claim passes over the runs of a queue that has
a row there; how many runs each queue holds, and what they spent; and the limits of concurrency keys
(`tenure_concurrency_limits`, SPEC §22), which the claim enforces."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tenure._schedules import Schedule
from tenure._types import Usage
from tenure.store._records import ConcurrencyKey, PausedQueue
from tenure.store._rows import _decode_request
from tenure.store._sqlbase import SQLBase


class QueueControls(SQLBase):
    def pause_queue(self, queue: str, by: str = "") -> bool:
        params = {"queue": queue, "by": by}
        return self._write(
            lambda cur: cur.execute(self._q["pause_queue"], params).fetchone() is not None
        )

    def resume_queue(self, queue: str) -> bool:
        params = {"queue": queue}
        return self._write(
            lambda cur: cur.execute(self._q["resume_queue"], params).fetchone() is not None
        )

    def paused_queues(self) -> list[PausedQueue]:
        found = []
        for queue, paused_at, paused_by in self._read(self._q["paused_queues"], {}):
            at = self._time(paused_at)
            assert at is not None  # a NOT NULL column
            found.append(PausedQueue(str(queue), at, str(paused_by)))
        return found

    def queue_counts(self) -> dict[tuple[str, str], int]:
        return {
            (str(queue), str(status)): int(n)
            for queue, status, n in self._read(self._q["queue_counts"], {})
        }

    def queue_totals(self, window: float) -> dict[str, Usage]:
        return {
            str(queue): Usage(int(tokens_in or 0), int(tokens_out or 0), float(cost or 0.0))
            for queue, tokens_in, tokens_out, cost in self._read(
                self._q["queue_totals"], {"window": float(window)}
            )
        }

    def set_concurrency_limit(self, key: str, limit: int | None) -> bool:
        """Set (or with None remove) the key's limit; False when there was none to remove."""
        if limit is None:
            params: dict[str, object] = {"key": key}
            return self._write(
                lambda cur: (
                    cur.execute(self._q["clear_concurrency_limit"], params).fetchone() is not None
                )
            )
        params = {"key": key, "max_running": limit}
        self._write(lambda cur: cur.execute(self._q["set_concurrency_limit"], params))
        return True

    def concurrency_keys(self) -> list[ConcurrencyKey]:
        limits = {str(k): int(n) for k, n in self._read(self._q["concurrency_limits"], {})}
        counts: dict[tuple[str, str], int] = {
            (str(k), str(status)): int(n)
            for k, status, n in self._read(self._q["concurrency_counts"], {})
        }
        keys = sorted(set(limits) | {k for k, _ in counts})
        return [
            ConcurrencyKey(
                key,
                limits.get(key),
                running=counts.get((key, "running"), 0),
                queued=counts.get((key, "queued"), 0),
            )
            for key in keys
        ]

    # -- schedules (SPEC §22) ----------------------------------------------------------

    def put_schedule(
        self, name: str, cron: str, timezone: str, request: str, next_fire: datetime
    ) -> None:
        params = {
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "request": request,
            "next_fire": self._time_param(next_fire),
        }
        self._write(lambda cur: cur.execute(self._q["put_schedule"], params))

    def schedules(self) -> list[Schedule]:
        return [self._schedule(row) for row in self._read(self._q["schedules"], {})]

    def due_schedules(self, limit: int = 100) -> list[tuple[Schedule, Any]]:
        """Schedules whose next tick has come, each with its next tick as stored (what a
        firing's compare-and-set names)."""
        rows = self._read(self._q["due_schedules"], {"limit": limit})
        return [(self._schedule(row), row[5]) for row in rows]

    def pause_schedule(self, name: str) -> bool:
        return self._changed("pause_schedule", {"name": name})

    def resume_schedule(self, name: str, next_fire: datetime) -> bool:
        params = {"name": name, "next_fire": self._time_param(next_fire)}
        return self._changed("resume_schedule", params)

    def delete_schedule(self, name: str) -> bool:
        return self._changed("delete_schedule", {"name": name})

    def _changed(self, query: str, params: dict[str, Any]) -> bool:
        return self._write(lambda cur: cur.execute(self._q[query], params).fetchone() is not None)

    def _schedule(self, row: Any) -> Schedule:
        name, cron, timezone, request, paused, next_fire, last_fire, run_id, fired, created = row
        created_at = self._time(created)
        assert created_at is not None  # a NOT NULL column
        return Schedule(
            name=str(name),
            cron=str(cron),
            timezone=str(timezone),
            request=_decode_request(request),
            paused=bool(paused),
            next_fire=self._time(next_fire),
            last_fire=self._time(last_fire),
            last_run_id=run_id,
            fired=int(fired),
            created_at=created_at,
        )
