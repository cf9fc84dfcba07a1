"""Streaming a run live (SPEC §18), as a table of deltas does it (SQLite); PostgreSQL
overrides publishing and following with NOTIFY/LISTEN and keeps no deltas."""

from __future__ import annotations

from collections.abc import Sequence

from tenure._types import RunStatus
from tenure.store._deltas import DeltaFeed, DeltaPiece, StoredDelta, TablePoller
from tenure.store._sqlbase import Cursor, SQLBase

# How many runs marked `streamed` a store remembers (see publish_deltas).
MARKED_KEPT = 10_000


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

        # Each run is marked `streamed` in the transaction of its first publication by this
        # store, not at every batch (a statement per run per batch cost a publication's
        # statements 14-19 % more instructions): the mark is never cleared, so a run marked
        # by a transaction that committed stays marked. Forgetting the set only marks again.
        marked: set[str] = vars(self).setdefault("_marked_streamed", set())
        marks = [
            {"id": run_id}
            for run_id in dict.fromkeys(p.lease.run_id for p in pieces)
            if run_id not in marked
        ]

        def tx(cur: Cursor) -> None:
            cur.executemany(self._q["publish_delta"], rows)
            if marks:
                cur.executemany(self._q["mark_streamed"], marks)

        if rows:
            self._write(tx)
            if len(marked) > MARKED_KEPT:
                marked.clear()
            marked.update(mark["id"] for mark in marks)

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
