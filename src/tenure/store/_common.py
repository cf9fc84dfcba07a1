"""The transitions of SPEC §5 and §7, written once for every SQL dialect.

A dialect supplies its named queries (`store/sql/<dialect>/queries.sql`), a way to run a
function inside one write transaction, reads, and the conversion of its time values. Each
transition is one guarded UPDATE that RETURNs `(last_sequence, attempt)` when it applied;
the events that record it are inserted in the same transaction at the sequences it reserved.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from tenure._json import dumps
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
    Usage,
)
from tenure.store._base import NO_USAGE, Claimed, Lease, NewEvent, NewRun, Settlement, StaleRun
from tenure.store._rows import event_from_row, run_from_row

T = TypeVar("T")
# A run handed back by a worker that cannot serve it waits this long before it is claimable
# again, doubled at each such hand-back, up to the cap.
UNSERVED_BASE_SECONDS = 5.0
UNSERVED_CAP_SECONDS = 600.0
ClaimRow = tuple[str, int, int, str | None, int, int, str | None]


class Cursor(Protocol):
    """What sqlite3 and psycopg cursors have in common, as far as the store uses them."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, params: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


def _no_op() -> None:
    return None


def lifecycle(kind: EventKind, **payload: Any) -> NewEvent:
    return NewEvent(kind, payload)


def _event_rows(
    rows: list[dict[str, Any]],
    run_id: str,
    last: int,
    attempt: int,
    token: int,
    events: Sequence[NewEvent],
) -> list[int]:
    """Add the rows of `events`, which end at sequence `last`, to `rows`; their sequences."""
    first = last - len(events) + 1
    rows.extend(
        {
            "run_id": run_id,
            "sequence": first + i,
            "attempt": attempt,
            "lease_token": token,
            "kind": str(e.kind),
            "payload": dumps(e.payload),
        }
        for i, e in enumerate(events)
    )
    return list(range(first, last + 1))


class SQLStore(ABC):
    url: str
    _q: dict[str, str]

    @abstractmethod
    def _write(self, fn: Callable[[Cursor], T]) -> T:
        """Run `fn` in one write transaction; retried whole on a transient failure."""

    @abstractmethod
    def _read(self, sql: str, params: dict[str, Any]) -> list[Any]: ...

    @abstractmethod
    def _time(self, value: Any) -> datetime | None:
        """A time value of this dialect as an aware UTC datetime."""

    @abstractmethod
    def _queues_param(self, queues: Sequence[str] | None) -> Any: ...

    @abstractmethod
    def migrate(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        return _no_op

    def now(self) -> datetime:
        value = self._time(self._read(self._q["now"], {})[0][0])
        assert value is not None
        return value

    # -- events --------------------------------------------------------------------------

    def _append(
        self,
        cur: Cursor,
        run_id: str,
        last: int,
        attempt: int,
        token: int,
        events: Sequence[NewEvent],
    ) -> list[int]:
        rows: list[dict[str, Any]] = []
        sequences = _event_rows(rows, run_id, last, attempt, token, events)
        self._insert_events(cur, rows)
        return sequences

    def _insert_events(self, cur: Cursor, rows: list[dict[str, Any]]) -> None:
        """The rows `_event_rows` made, in one statement."""
        if rows:
            cur.executemany(self._q["insert_event"], rows)

    def _guarded(
        self,
        name: str,
        params: dict[str, Any],
        run_id: str,
        events: Sequence[NewEvent],
        lease: Lease | None = None,
    ) -> list[int] | None:
        """One guarded UPDATE that RETURNs (last_sequence, attempt, lease_token), then its
        events. Events of an owner's write carry the owner's lease, not the row's: if a guard
        ever let a stale owner through, the audit would see the stale token."""

        return self._write(lambda cur: self._guarded_in(cur, name, params, run_id, events, lease))

    def _guarded_in(
        self,
        cur: Cursor,
        name: str,
        params: dict[str, Any],
        run_id: str,
        events: Sequence[NewEvent],
        lease: Lease | None = None,
        rows: list[dict[str, Any]] | None = None,
    ) -> list[int] | None:
        """The guarded statement, then its events: inserted now, or added to `rows` for
        the caller to insert with the rest of its transaction's events."""
        # Every statement that appends events reserves their sequences itself: `n` of them.
        row = cur.execute(self._q[name], {**params, "n": len(events)}).fetchone()
        if row is None:
            return None
        attempt, token = (lease.attempt, lease.token) if lease else (row[1], row[2])
        if rows is None:
            return self._append(cur, run_id, row[0], attempt, token, events)
        return _event_rows(rows, run_id, row[0], attempt, token, events)

    @staticmethod
    def _lease_params(lease: Lease) -> dict[str, Any]:
        return {"id": lease.run_id, "owner": lease.owner, "token": lease.token}

    # -- transitions ---------------------------------------------------------------------

    def enqueue(self, run: NewRun) -> tuple[str, bool]:
        return self.enqueue_many([run])[0]

    def enqueue_many(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        def tx(cur: Cursor) -> list[tuple[str, bool]]:
            out = []
            events: list[dict[str, Any]] = []  # every run's events, one insert at the end
            for run in runs:
                row = cur.execute(
                    self._q["enqueue"],
                    {
                        "id": run.run_id,
                        "queue": run.queue,
                        "request": run.request,
                        "idempotency_key": run.idempotency_key,
                        "delay": run.delay,
                        "last_sequence": len(run.events) - 1,
                    },
                ).fetchone()
                if row is None:
                    existing = cur.execute(
                        self._q["find_by_idempotency_key"],
                        {"idempotency_key": run.idempotency_key},
                    ).fetchone()
                    out.append((existing[0], False))
                    continue
                _event_rows(events, run.run_id, len(run.events) - 1, 0, 0, run.events)
                out.append((run.run_id, True))
            self._insert_events(cur, events)
            return out

        return self._write(tx)

    def start(self, run: NewRun, owner: str, lease_seconds: float) -> Lease:
        def tx(cur: Cursor) -> None:
            cur.execute(
                self._q["start"],
                {
                    "id": run.run_id,
                    "queue": run.queue,
                    "request": run.request,
                    "idempotency_key": run.idempotency_key,
                    "owner": owner,
                    "lease": lease_seconds,
                    "last_sequence": len(run.events) - 1,
                },
            )
            self._append(cur, run.run_id, len(run.events) - 1, 0, 1, run.events)

        self._write(tx)
        return Lease(run.run_id, owner, 1, 0)

    def _claimed(
        self,
        cur: Cursor,
        rows: Sequence[ClaimRow],
        owner: str,
        before: Sequence[NewEvent] = (),
        events: list[dict[str, Any]] | None = None,
    ) -> list[Claimed]:
        """The claims of `rows`, each with its `claimed` event (inserted now, or added to
        `events` for the caller to insert)."""
        out = []
        pending: list[dict[str, Any]] = [] if events is None else events
        for run_id, token, attempt, request, requeue_count, last, decision in rows:
            event = lifecycle(EventKind.CLAIMED, worker=owner, lease_token=token, attempt=attempt)
            _event_rows(pending, run_id, last, attempt, token, [*before, event])
            out.append(
                Claimed(Lease(run_id, owner, token, attempt), request, requeue_count, decision)
            )
        if events is None:
            self._insert_events(cur, pending)
        return out

    def _claim_params(
        self, owner: str, queues: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> dict[str, Any]:
        return {
            "owner": owner,
            "lease": lease_seconds,
            "limit": limit,
            "queues": self._queues_param(queues),
            "n": 1,  # the claimed event
        }

    def _claim_in(
        self,
        cur: Cursor,
        owner: str,
        params: dict[str, Any],
        events: list[dict[str, Any]] | None = None,
    ) -> list[Claimed]:
        rows = cur.execute(self._q["claim"], params).fetchall()
        return self._claimed(cur, rows, owner, events=events)

    def claim(
        self, owner: str, queues: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Claimed]:
        params = self._claim_params(owner, queues, lease_seconds, limit)
        return self._write(lambda cur: self._claim_in(cur, owner, params))

    def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> Claimed | None:
        params = {"id": run_id, "owner": owner, "lease": lease_seconds, "n": 1}
        claimed = self._write(
            lambda cur: self._claimed(
                cur, cur.execute(self._q["claim_run"], params).fetchall(), owner
            )
        )
        return claimed[0] if claimed else None

    def record_step(
        self,
        lease: Lease,
        lease_seconds: float,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        params = {
            **self._lease_params(lease),
            "lease": lease_seconds,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": usage.cost,
        }
        return self._guarded("record_step", params, lease.run_id, events, lease)

    def mark_fence(self, lease: Lease, effect: ToolEffect, lease_seconds: float) -> bool:
        params = {**self._lease_params(lease), "effect": str(effect), "lease": lease_seconds}
        return self._guarded("mark_fence", params, lease.run_id, []) is not None

    def clear_fence(self, lease: Lease, lease_seconds: float, event: NewEvent) -> int | None:
        params = {**self._lease_params(lease), "lease": lease_seconds}
        seqs = self._guarded("clear_fence", params, lease.run_id, [event], lease)
        return seqs[0] if seqs else None

    def requeue(self, lease: Lease, delay: float, error_class: FailureClass, error: str) -> bool:
        params = {
            **self._lease_params(lease),
            "delay": delay,
            "error_class": str(error_class),
            "error": error,
        }
        event = lifecycle(
            EventKind.REQUEUED,
            cause="failure",
            error_class=str(error_class),
            error=error,
            delay=round(delay, 3),
        )
        return self._guarded("requeue", params, lease.run_id, [event], lease) is not None

    def hand_back(self, lease: Lease, why: str, missing: Sequence[str] = ()) -> bool:
        unserved = bool(missing)
        error = f"{why}: {', '.join(missing)}" if unserved else ""
        params = {
            **self._lease_params(lease),
            "unserved": unserved,
            "unserved_base": UNSERVED_BASE_SECONDS,
            "unserved_cap": UNSERVED_CAP_SECONDS,
            "error": error,
        }
        cause = "unserved" if unserved else "unstarted"
        payload: dict[str, Any] = {"cause": cause, "worker": lease.owner, "why": why}
        if unserved:
            payload["missing"] = list(missing)
        event = lifecycle(EventKind.REQUEUED, **payload)
        return self._guarded("hand_back", params, lease.run_id, [event], lease) is not None

    def release(self, lease: Lease) -> bool:
        event = lifecycle(EventKind.REQUEUED, cause="drain", worker=lease.owner)
        return (
            self._guarded("release", self._lease_params(lease), lease.run_id, [event], lease)
            is not None
        )

    def _settle_params(self, lease: Lease, settlement: Settlement) -> dict[str, Any]:
        return {
            **self._lease_params(lease),
            "status": str(settlement.status),
            "reason": str(settlement.reason),
            "output": settlement.output,
            "error_class": str(settlement.error_class or ""),
            "error": settlement.error,
            "keep": settlement.is_dead_letter,
            "keep_fence": settlement.status is RunStatus.FAILED,
            "fence": str(settlement.only_while_fenced or ""),
            "n": len(settlement.events),
            "input_tokens": settlement.usage.input_tokens,
            "output_tokens": settlement.usage.output_tokens,
            "cost": settlement.usage.cost,
        }

    def settle(self, lease: Lease, settlement: Settlement) -> list[int] | None:
        work = [(lease, settlement, self._settle_params(lease, settlement))]

        def tx(cur: Cursor) -> list[int] | None:
            events: list[dict[str, Any]] = []
            (settled,) = self._settle_batch_in(cur, work, events)
            self._insert_events(cur, events)
            return settled

        return self._write(tx)

    def settle_and_claim(
        self,
        settles: Sequence[tuple[Lease, Settlement]],
        owner: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[list[int] | None], list[Claimed]]:
        work = [(lease, s, self._settle_params(lease, s)) for lease, s in settles]
        claim = self._claim_params(owner, queues, lease_seconds, limit) if limit > 0 else None

        def tx(cur: Cursor) -> tuple[list[list[int] | None], list[Claimed]]:
            events: list[dict[str, Any]] = []  # every event of the transaction, one insert
            settled = self._settle_batch_in(cur, work, events)
            claimed = [] if claim is None else self._claim_in(cur, owner, claim, events)
            self._insert_events(cur, events)
            return settled, claimed

        return self._write(tx)

    def _settle_batch_in(
        self,
        cur: Cursor,
        work: Sequence[tuple[Lease, Settlement, dict[str, Any]]],
        events: list[dict[str, Any]],
    ) -> list[list[int] | None]:
        """Settle every run of `work` with one statement."""
        rows = cur.execute(
            self._q["settle_batch"], {"batch": dumps([params for _, _, params in work])}
        ).fetchall()
        last = {(run_id, int(token)): int(sequence) for run_id, token, sequence in rows}
        out: list[list[int] | None] = []
        for lease, s, _ in work:
            sequence = last.get((lease.run_id, lease.token))
            out.append(
                None
                if sequence is None
                else _event_rows(
                    events, lease.run_id, sequence, lease.attempt, lease.token, s.events
                )
            )
        return out

    def cancel(self, run_id: str) -> bool:
        event = lifecycle(EventKind.CANCELLED)
        return self._guarded("cancel", {"id": run_id}, run_id, [event]) is not None

    def suspend(
        self,
        lease: Lease,
        status: RunStatus,
        waiting: dict[str, Any],
        request: str | None,
        timeout: float | None,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        params = {
            **self._lease_params(lease),
            "status": str(status),
            "waiting": dumps(waiting),
            "request": request,
            "timeout": timeout,
            "n": len(events),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": usage.cost,
        }
        return self._guarded("suspend", params, lease.run_id, events, lease)

    def decide_queued(
        self, run_id: str, expected: RunStatus, decision: dict[str, Any], event: NewEvent
    ) -> bool:
        params = {"id": run_id, "expected": str(expected), "decision": dumps(decision)}
        return self._guarded("decide_queued", params, run_id, [event]) is not None

    def decide_inline(
        self,
        run_id: str,
        expected: RunStatus,
        decision: dict[str, Any],
        event: NewEvent,
        owner: str,
        lease_seconds: float,
    ) -> Claimed | None:
        params = {
            "id": run_id,
            "expected": str(expected),
            "decision": dumps(decision),
            "owner": owner,
            "lease": lease_seconds,
            "n": 2,  # the decision's event, then the claimed event
        }

        def tx(cur: Cursor) -> list[Claimed]:
            rows = cur.execute(self._q["decide_inline"], params).fetchall()
            return self._claimed(cur, rows, owner, before=[event])

        claimed = self._write(tx)
        return claimed[0] if claimed else None

    def expire_waits(self, limit: int) -> int:
        event = lifecycle(
            EventKind.APPROVAL,
            approved=False,
            decided_by="reaper",
            note="no decision before the approval timeout",
        )

        def tx(cur: Cursor) -> int:
            rows = cur.execute(self._q["expire_waits"], {"limit": limit, "n": 1}).fetchall()
            for run_id, last, attempt, token in rows:
                self._append(cur, run_id, last, attempt, token, [event])
            return len(rows)

        return self._write(tx)

    def waiting_of(self, run_id: str) -> tuple[RunStatus, dict[str, Any] | None] | None:
        rows = self._read(self._q["waiting_of"], {"id": run_id})
        if not rows:
            return None
        status, raw = rows[0]
        return RunStatus(status), (json.loads(raw) if raw else None)

    def held_by(self, owner: str) -> list[Lease]:
        rows = self._read(self._q["held_by"], {"owner": owner})
        return [Lease(row[0], row[1], int(row[2]), int(row[3])) for row in rows]

    def stale_runs(self, limit: int) -> list[StaleRun]:
        return [
            StaleRun(
                run_id=row[0],
                lease_token=int(row[1]),
                pending_effect=ToolEffect(row[2]) if row[2] else None,
                has_request=bool(row[3]),
                requeue_count=int(row[4]),
            )
            for row in self._read(self._q["stale_runs"], {"limit": limit})
        ]

    @staticmethod
    def _seen_params(seen: StaleRun) -> dict[str, Any]:
        return {
            "id": seen.run_id,
            "token": seen.lease_token,
            "fence": str(seen.pending_effect or ""),
            "requeue_count": seen.requeue_count,
            "has_request": seen.has_request,
        }

    def requeue_stale(self, seen: StaleRun) -> bool:
        error = "lease expired: the worker stopped renewing it"
        event = lifecycle(EventKind.REQUEUED, cause="stale", lease_token=seen.lease_token)
        params = {**self._seen_params(seen), "error": error}
        return self._guarded("requeue_stale", params, seen.run_id, [event]) is not None

    def dead_letter_stale(self, seen: StaleRun, reason: TerminationReason, error: str) -> bool:
        event = lifecycle(
            EventKind.DEAD_LETTERED,
            reason=str(reason),
            cause="stale",
            error=error,
            lease_token=seen.lease_token,
        )
        params = {**self._seen_params(seen), "reason": str(reason), "error": error}
        return self._guarded("dead_letter_stale", params, seen.run_id, [event]) is not None

    def redrive(self, run_id: str, force: bool) -> bool:
        def tx(cur: Cursor) -> bool:
            fence = cur.execute(self._q["fence_of"], {"id": run_id}).fetchone()
            params = {"id": run_id, "force": force, "n": 1}
            row = cur.execute(self._q["redrive"], params).fetchone()
            if row is None:
                return False
            prior = fence[0] if fence else ""
            event = lifecycle(EventKind.REDRIVEN, force=force, pending_effect=prior)
            self._append(cur, run_id, row[0], row[1], row[2], [event])
            return True

        return self._write(tx)

    def purge(self, older_than_seconds: float) -> int:
        def tx(cur: Cursor) -> int:
            cutoff = cur.execute(self._q["purge_cutoff"], {"age": older_than_seconds}).fetchone()[0]
            cur.execute(self._q["purge_events"], {"cutoff": cutoff})
            return int(cur.execute(self._q["purge_runs"], {"cutoff": cutoff}).rowcount)

        return self._write(tx)

    # -- reads ---------------------------------------------------------------------------

    def get_run(self, run_id: str, with_request: bool = False) -> Run | None:
        rows = self._read(self._q["get_run"], {"id": run_id})
        if not rows:
            return None
        row = rows[0] if with_request else (*rows[0][:-1], None)
        return run_from_row(row, self._time)

    def run_status(self, run_id: str) -> RunStatus | None:
        rows = self._read(self._q["run_status"], {"id": run_id})
        return RunStatus(rows[0][0]) if rows else None

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        rows = self._read(self._q["events"], {"id": run_id, "after": after})
        return [event_from_row(row, self._time) for row in rows]

    def runs(
        self,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Run]:
        params = {
            "status": str(status) if status else None,
            "reason": str(reason) if reason else None,
            "queue": queue,
            "limit": limit,
        }
        return [run_from_row(row, self._time) for row in self._read(self._q["runs"], params)]

    def runs_after(
        self,
        after: str,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Run]:
        params = {
            "after": after,
            "status": str(status) if status else None,
            "reason": str(reason) if reason else None,
            "queue": queue,
            "limit": limit,
        }
        rows = self._read(self._q["runs_after"], params)
        return [run_from_row(row, self._time) for row in rows]

    def run_counts(self) -> dict[tuple[RunStatus, TerminationReason | None], int]:
        return {
            (RunStatus(status), TerminationReason(reason) if reason else None): int(count)
            for status, reason, count in self._read(self._q["run_counts"], {})
        }
