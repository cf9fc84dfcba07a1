"""Worker rows (`tenure_workers`): each worker process's own heartbeat, beside its leases."""

from __future__ import annotations

import json
from typing import Any

from tenure._json import dumps
from tenure.store._base import WorkerInfo, WorkerRow
from tenure.store._sqlbase import SQLBase


class WorkerRows(SQLBase):
    def register_worker(self, worker: WorkerInfo) -> None:
        params = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": dumps(list(worker.queues)) if worker.queues is not None else None,
            "slots": worker.slots,
            "heartbeat_seconds": worker.heartbeat_seconds,
        }
        self._write(lambda cur: cur.execute(self._q["register_worker"], params))

    def beat_worker(self, worker_id: str, slots_in_use: int, stopping: bool = False) -> bool:
        params = {"id": worker_id, "slots_in_use": slots_in_use, "stopping": stopping}
        return self._write(
            lambda cur: cur.execute(self._q["beat_worker"], params).fetchone() is not None
        )

    def stop_worker(self, worker_id: str) -> bool:
        return self._write(
            lambda cur: (
                cur.execute(self._q["stop_worker"], {"id": worker_id}).fetchone() is not None
            )
        )

    def workers(self, limit: int = 100) -> list[WorkerRow]:
        return [self._worker_row(row) for row in self._read(self._q["workers"], {"limit": limit})]

    def _worker_row(self, row: Any) -> WorkerRow:
        started, seen = self._time(row[8]), self._time(row[9])
        assert started is not None and seen is not None  # NOT NULL columns
        return WorkerRow(
            id=row[0],
            host=row[1],
            pid=int(row[2]),
            queues=_queues(row[3]),
            slots=int(row[4]),
            slots_in_use=int(row[5]),
            heartbeat_seconds=float(row[6]),
            state=row[7],
            started_at=started,
            last_seen=seen,
            stopped_at=self._time(row[10]),
        )


def _queues(raw: str | None) -> list[str] | None:
    """The stored JSON array; a damaged one reads as every queue rather than failing the
    listing (readers never fall over)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return [str(q) for q in value] if isinstance(value, list) else None
