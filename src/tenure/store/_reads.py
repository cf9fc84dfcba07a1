"""Reads: runs, events and counts, as the API and the dashboard show them."""

from __future__ import annotations

import json
from typing import Any

import orjson

from tenure import _json
from tenure._types import (
    Event,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.store._records import ForkState, ReplayJournal
from tenure.store._rows import event_from_row, run_from_row
from tenure.store._sqlbase import SQLBase

# How deep a tree is read: a bound on the recursive read, far beyond any real tree.
MAX_TREE_DEPTH = 100


class Reads(SQLBase):
    def waiting_of(self, run_id: str) -> tuple[RunStatus, dict[str, Any] | None] | None:
        rows = self._read(self._q["waiting_of"], {"id": run_id})
        if not rows:
            return None
        status, raw = rows[0]
        return RunStatus(status), (json.loads(raw) if raw else None)

    def get_run(self, run_id: str, with_request: bool = False) -> Run | None:
        rows = self._read(self._q["get_run"], {"id": run_id})
        if not rows:
            return None
        row = rows[0] if with_request else (*rows[0][:-1], None)
        return run_from_row(row, self._time)

    def fork_state(self, run_id: str) -> ForkState | None:
        rows = self._read(self._q["fork_state"], {"id": run_id})
        if not rows:
            return None
        status, last, fence, probe, call = rows[0]
        return ForkState(
            RunStatus(status), int(last), ToolEffect(fence) if fence else None, bool(probe), call
        )

    def tree(self, run_id: str, limit: int = 1000) -> list[Run]:
        params = {"id": run_id, "limit": limit, "max_depth": MAX_TREE_DEPTH}
        return [run_from_row(row, self._time) for row in self._read(self._q["tree"], params)]

    def run_status(self, run_id: str) -> RunStatus | None:
        rows = self._read(self._q["run_status"], {"id": run_id})
        return RunStatus(rows[0][0]) if rows else None

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        rows = self._read(self._q["events"], {"id": run_id, "after": after})
        return [event_from_row(row, self._time) for row in rows]

    def journal(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._read(self._q["journal_text"], {"id": run_id})
        found = _journal_at_once(rows[0]) if rows else None
        if found is not None:
            return found
        return [
            (str(kind), _journal_payload(payload))
            for kind, payload in self._read(self._q["journal"], {"id": run_id})
        ]

    def replay_journal(self, run_id: str) -> ReplayJournal | None:
        rows = self._read(self._q["replay_journal"], {"id": run_id})
        steps, others = rows[0] if rows else (None, None)
        try:
            flat = orjson.loads(steps) if steps is not None else []
            rest = orjson.loads(others) if others is not None else []
        except orjson.JSONDecodeError:
            return None
        if type(flat) is not list or len(flat) % 4:
            return None
        try:
            order = [sequence for sequence, _, _ in rest]
            events = [(str(kind), payload) for _, kind, payload in rest]
        except (TypeError, ValueError):
            return None
        # Every payload tenure writes is one JSON object: anything else is left to `journal`.
        if order != sorted(order) or any(type(p) is not dict for _, p in events):
            return None
        return ReplayJournal(flat, events)

    def last_event(self, run_id: str) -> Event | None:
        rows = self._read(self._q["last_event"], {"id": run_id})
        return event_from_row(rows[0], self._time) if rows else None

    def request_event(self, run_id: str) -> Event | None:
        rows = self._read(self._q["request_event"], {"id": run_id})
        return event_from_row(rows[0], self._time) if rows else None

    def runs(
        self,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        params = _filters(status, reason, queue, limit, parent, roots)
        return [run_from_row(row, self._time) for row in self._read(self._q["runs"], params)]

    def search_runs(
        self,
        metadata: dict[str, Any] | None = None,
        since: float | None = None,
        until: float | None = None,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        params = {
            **_filters(status, reason, queue, limit, parent, roots),
            "meta": None if not metadata else _json.dumps(metadata),
            "since": since,
            "until": until,
        }
        rows = self._read(self._q["search_runs"], params)
        return [run_from_row(row, self._time) for row in rows]

    def runs_after(
        self,
        after: str,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        params = {"after": after, **_filters(status, reason, queue, limit, parent, roots)}
        rows = self._read(self._q["runs_after"], params)
        return [run_from_row(row, self._time) for row in rows]

    def run_counts(self) -> dict[tuple[RunStatus, TerminationReason | None], int]:
        return {
            (RunStatus(status), TerminationReason(reason) if reason else None): int(count)
            for status, reason, count in self._read(self._q["run_counts"], {})
        }


def _filters(
    status: RunStatus | None,
    reason: TerminationReason | None,
    queue: str | None,
    limit: int,
    parent: str | None = None,
    roots: bool = False,
) -> dict[str, Any]:
    """The parameters of a listing's filters (None: any)."""
    return {
        "status": str(status) if status else None,
        "reason": str(reason) if reason else None,
        "queue": queue,
        "limit": limit,
        "parent": parent,
        "roots": bool(roots),
    }


def _journal_at_once(row: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """A journal read as one row (`journal_text`), decoded by one orjson call; None when it
    cannot be read so (a payload that is not JSON, or what orjson does not read): the caller
    then reads it row by row, where each damaged event shows as damaged."""
    payloads, kinds, sequences = row
    if payloads is None:
        return []  # no event
    try:
        values = orjson.loads(payloads)
        order = orjson.loads(f"[{sequences}]")
    except orjson.JSONDecodeError:
        return None
    names = kinds.split(",")
    # Every payload tenure writes is one JSON object: anything else (a row written behind
    # its back) is left to the row-by-row read.
    if not (len(values) == len(names) == len(order)) or set(map(type, values)) != {dict}:
        return None
    if order != sorted(order):  # sequences are unique in a run: sorted is in order
        return None
    return list(zip(names, values, strict=True))


def _journal_payload(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str | bytes):  # decoded by the driver, and not an object
        return {"_damaged": "not a JSON object"}
    try:
        value = _json.loads(raw)
    except (ValueError, TypeError) as exc:
        return {"_damaged": f"not JSON: {exc}"}
    return value if isinstance(value, dict) else {"_damaged": "not a JSON object"}
