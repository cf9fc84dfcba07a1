"""Streaming a run live (SPEC §18), as a table of deltas does it (SQLite); PostgreSQL
overrides publishing and following with NOTIFY/LISTEN and keeps no deltas."""

from __future__ import annotations

from collections.abc import Sequence

from tenure._types import RunStatus
from tenure.store._deltas import DeltaFeed, DeltaPiece, StoredDelta, TablePoller
from tenure.store._sqlbase import Cursor, SQLBase


class Streaming(SQLBase):
    def publish_deltas(self, pieces: Sequence[DeltaPiece]) -> None:
        rows = [
            {
                **self._lease_params(piece.lease),
                "sequence": piece.sequence,
                "chunk": piece.chunk,
                "text": piece.text,
            }
            for piece in pieces
        ]

        marks = [{"id": run_id} for run_id in dict.fromkeys(p.lease.run_id for p in pieces)]

        def tx(cur: Cursor) -> None:
            cur.executemany(self._q["publish_delta"], rows)
            cur.executemany(self._q["mark_streamed"], marks)

        if rows:
            self._write(tx)

    def follow_deltas(self, run_id: str) -> DeltaFeed:
        # One poller per store, made on first use (dict.setdefault: one wins a race).
        made = TablePoller(self._deltas_since, self._deltas_of)
        poller: TablePoller = vars(self).setdefault("_delta_poller", made)
        return poller.follow(run_id)

    def _deltas_since(self, after: int) -> list[tuple[int, str, StoredDelta]]:
        rows = self._read(self._q["deltas_since"], {"after": after})
        return [(row[0], row[1], StoredDelta(row[2], row[3], row[4])) for row in rows]

    def _deltas_of(self, run_id: str) -> list[tuple[int, StoredDelta]]:
        rows = self._read(self._q["deltas_after"], {"id": run_id, "after": 0})
        return [(row[0], StoredDelta(row[1], row[2], row[3])) for row in rows]

    def run_progress(self, run_id: str) -> tuple[RunStatus, int] | None:
        rows = self._read(self._q["run_progress"], {"id": run_id})
        return (RunStatus(rows[0][0]), int(rows[0][1])) if rows else None
