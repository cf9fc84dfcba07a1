"""Paused queues (`tenure_paused_queues`): the claim passes over the runs of a queue that has
a row there; how many runs each queue holds; and the limits of concurrency keys
(`tenure_concurrency_limits`, SPEC §22), which the claim enforces."""

from __future__ import annotations

from tenure.store._records import ConcurrencyKey, PausedQueue
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
