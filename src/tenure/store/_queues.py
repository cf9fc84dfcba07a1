"""Paused queues (`tenure_paused_queues`): the claim passes over the runs of a queue that has
a row there; how many runs each queue holds, and what they spent."""

from __future__ import annotations

from tenure._types import Usage
from tenure.store._records import PausedQueue
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
