"""The owner's transitions (SPEC §5): what a segment holding a lease, or its worker, writes.
Every one is guarded by the lease it names; None or False means it did not apply."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tenure._errors import StoreError
from tenure._json import dumps, dumps_finite
from tenure._types import (
    EventKind,
    FailureClass,
    RunStatus,
    ToolEffect,
    Usage,
)
from tenure.store._base import NO_USAGE, ChildState, Claimed, Lease, NewEvent, NewRun, Settlement
from tenure.store._sqlbase import (
    ClaimRow,
    Cursor,
    SQLBase,
    _event_rows,
    lifecycle,
)

# A run handed back by a worker that cannot serve it waits this long before it is claimable
# again, doubled at each such hand-back, up to the cap.
UNSERVED_BASE_SECONDS = 5.0
UNSERVED_CAP_SECONDS = 600.0


class OwnerTransitions(SQLBase):
    def enqueue(self, run: NewRun) -> tuple[str, bool]:
        return self.enqueue_many([run])[0]

    def enqueue_many(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        return self._write(lambda cur: self._enqueue_in(cur, runs))

    def fire_schedule(
        self, name: str, seen: Any, tick: datetime, following: datetime, run: NewRun
    ) -> str | None:
        """A schedule's tick: the schedule advances from the next tick it was read with
        (`seen`) to `following`, and the tick's run is enqueued, in one transaction; None
        when the schedule moved since it was read (another worker fired it, or it was
        paused, changed or deleted)."""
        params = {
            "name": name,
            "seen": seen,
            "tick": self._time_param(tick),
            "next_fire": self._time_param(following),
            "run_id": run.run_id,
        }

        def tx(cur: Cursor) -> str | None:
            if cur.execute(self._q["advance_schedule"], params).fetchone() is None:
                return None
            return self._enqueue_in(cur, [run])[0][0]

        return self._write(tx)

    def _enqueue_in(self, cur: Cursor, runs: Sequence[NewRun]) -> list[tuple[str, bool]]:
        params = [
            {
                "id": run.run_id,
                "queue": run.queue,
                "request": run.request,
                "idempotency_key": run.idempotency_key,
                "delay": run.delay,
                "last_sequence": len(run.events) - 1,
                "priority": run.priority,
                "concurrency_key": run.concurrency_key,
                "parent_id": run.parent_id,
                "root_id": run.root_id,
            }
            for run in runs
        ]
        inserted = self._insert_runs(cur, params)
        out = []
        events: list[dict[str, Any]] = []  # every run's events, one insert at the end
        for run, created in zip(runs, inserted, strict=True):
            if not created:  # the key is taken (by an earlier run, or one of this batch)
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

    def _insert_runs(self, cur: Cursor, params: list[dict[str, Any]]) -> list[bool]:
        """The `enqueue` statement for each run, in order; whether each inserted its row
        (by the statement's count: SQLite's enqueue has no RETURNING, which costs it a
        result table per insert). No row: the key is taken."""
        out = []
        for p in params:
            cur.execute(self._q["enqueue"], p)
            out.append(cur.rowcount != 0)
        return out

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
        rows = self._claim_rows(cur, params)
        return self._claimed(cur, self._within_limits(cur, rows, owner), owner, events=events)

    def _claim_rows(self, cur: Cursor, params: dict[str, Any]) -> list[ClaimRow]:
        """The rows the claim statement took."""
        return cur.execute(self._q["claim"], params).fetchall()  # type: ignore[no-any-return]

    def _within_limits(self, cur: Cursor, rows: list[ClaimRow], owner: str) -> list[ClaimRow]:
        """The claimed rows, less those beyond their concurrency key's limit, which go back
        queued in this same transaction (SPEC §22). The claim passed over the runs of a full
        key, but it may take several runs of one key at once, and on a store where claims
        run side by side two claims may each have seen room for the last one: the keys are
        locked, then their running runs counted again, this claim's own included.
        A claim of runs without a limited key (as its statement saw the limits) does none
        of this: a limit set since applies from the next claim on."""
        keys = sorted({row[8] for row in rows if row[11]})
        if not keys:
            return rows
        self._lock_keys(cur, keys)
        over = {
            key: int(running) - int(limit)
            for key, limit, running in cur.execute(
                self._q["concurrency_room"], {"keys": self._queues_param(keys)}
            ).fetchall()
            if int(running) > int(limit)
        }
        if not over:
            return rows
        # Within a key, the runs taken last in the claim's order go back first.
        back: set[str] = set()
        for row in sorted(rows, key=lambda r: (-r[9], r[10], r[0]), reverse=True):
            key = row[8]
            if over.get(key, 0) > 0:
                over[key] -= 1
                back.add(row[0])
                params = {"id": row[0], "owner": owner, "token": row[1], "n": 1}
                if not cur.execute(self._q["unclaim"], params).fetchall():
                    # Cannot be (the row is this transaction's): roll the claim back whole
                    # rather than leave a run running beyond its key's limit.
                    raise StoreError(f"a claim could not give back run {row[0]}")
        return [row for row in rows if row[0] not in back]

    def claim(
        self, owner: str, queues: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Claimed]:
        params = self._claim_params(owner, queues, lease_seconds, limit)
        return self._write(lambda cur: self._claim_in(cur, owner, params))

    def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> Claimed | None:
        params = {"id": run_id, "owner": owner, "lease": lease_seconds, "n": 1}
        claimed = self._write(
            lambda cur: self._claimed(
                cur,
                self._within_limits(
                    cur, cur.execute(self._q["claim_run"], params).fetchall(), owner
                ),
                owner,
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

    def renew_leases(self, leases: Sequence[tuple[Lease, float]]) -> set[str]:
        if not leases:
            return set()
        batch = dumps(
            [
                {"id": lease.run_id, "owner": lease.owner, "token": lease.token, "lease": seconds}
                for lease, seconds in leases
            ]
        )
        rows = self._write(
            lambda cur: cur.execute(self._q["renew_leases"], {"batch": batch}).fetchall()
        )
        return {row[0] for row in rows}

    def mark_fence(
        self,
        lease: Lease,
        effect: ToolEffect,
        lease_seconds: float,
        call: dict[str, Any] | None = None,
        probe: bool = False,
    ) -> bool:
        params = {
            **self._lease_params(lease),
            "effect": str(effect),
            "lease": lease_seconds,
            "call": None if call is None else dumps(call),
            "probe": bool(probe),
        }
        return self._guarded("mark_fence", params, lease.run_id, []) is not None

    def resolve_fence(
        self, lease: Lease, lease_seconds: float, events: Sequence[NewEvent]
    ) -> list[int] | None:
        params = {**self._lease_params(lease), "lease": lease_seconds}
        return self._guarded("clear_fence", params, lease.run_id, events, lease)

    def mark_step_deadline(
        self, lease: Lease, last_sequence: int, fence: ToolEffect | None, why: str
    ) -> bool:
        params = {
            **self._lease_params(lease),
            "last_sequence": last_sequence,
            "fence": str(fence or ""),
            "why": why,
        }
        return self._guarded("mark_step_deadline", params, lease.run_id, []) is not None

    def requeue_in_doubt(
        self, lease: Lease, delay: float, error_class: FailureClass, error: str
    ) -> bool:
        return self._requeue("requeue_in_doubt", "in_doubt", lease, delay, error_class, error)

    def clear_fence(self, lease: Lease, lease_seconds: float, event: NewEvent) -> int | None:
        params = {**self._lease_params(lease), "lease": lease_seconds}
        seqs = self._guarded("clear_fence", params, lease.run_id, [event], lease)
        return seqs[0] if seqs else None

    def requeue(self, lease: Lease, delay: float, error_class: FailureClass, error: str) -> bool:
        return self._requeue("requeue", "failure", lease, delay, error_class, error)

    def _requeue(
        self,
        query: str,
        cause: str,
        lease: Lease,
        delay: float,
        error_class: FailureClass,
        error: str,
    ) -> bool:
        """An owner's requeue charged to the budget: after a failure (fence cleared), or in
        doubt (a probe-able fence kept); the `requeued` event says which."""
        params = {
            **self._lease_params(lease),
            "delay": delay,
            "error_class": str(error_class),
            "error": error,
        }
        event = lifecycle(
            EventKind.REQUEUED,
            cause=cause,
            error_class=str(error_class),
            error=error,
            delay=round(delay, 3),
        )
        return self._guarded(query, params, lease.run_id, [event], lease) is not None

    def hand_back(
        self,
        lease: Lease,
        why: str,
        missing: Sequence[str] = (),
        fence_call: str | None = None,
    ) -> bool:
        unserved = bool(missing)
        error = f"{why}: {', '.join(missing)}" if unserved else ""
        params = {
            **self._lease_params(lease),
            "unserved": unserved,
            "unserved_base": UNSERVED_BASE_SECONDS,
            "unserved_cap": UNSERVED_CAP_SECONDS,
            "error": error,
            "fence_call": fence_call,
        }
        cause = "unserved" if unserved else "unstarted"
        payload: dict[str, Any] = {"cause": cause, "worker": lease.owner, "why": why}
        if unserved:
            payload["missing"] = list(missing)
        if fence_call is not None:
            payload["in_doubt"] = True  # its fence goes back with it, for a probe to resolve
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
        batch = [params for _, _, params in work]
        if "settle_one" in self._q:  # SQLite
            rows = [row for params in batch for row in self._settle_one(cur, params)]
        else:
            # Each entry's nulls are its Nones (no output, no error): only a cost that is
            # not a finite number needs the full encoding.
            finite = all(math.isfinite(params["cost"]) for params in batch)
            text = dumps_finite(batch) if finite else dumps(batch)
            if any(lease.has_parent for lease, _, _ in work):
                ids = [params["id"] for params in batch]  # whose parents it locks first
                args = {"batch": text, "ids": ids}
                rows = cur.execute(self._q["settle_batch_parents_first"], args).fetchall()
            else:
                rows = cur.execute(self._q["settle_batch"], {"batch": text}).fetchall()
        self._after_settle()
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

    def _settle_one(self, cur: Cursor, params: dict[str, Any]) -> list[Any]:
        """One run's settle, its values bound, as (id, token, last sequence) if it applied:
        a store whose queries have `settle_one` (SQLite) settles a batch run by run."""
        raise NotImplementedError

    def _before_wait(self) -> None:
        """Between a parent's `held` (on PostgreSQL its row is locked from here) and its
        `wait_for_children` (a test stalls here)."""

    def _after_settle(self) -> None:
        """Between a settle's statement (its triggers have run: a child's end has decided
        whether to wake its parent) and its commit (a test stalls here)."""

    def wait_for_children(
        self, lease: Lease, children: Sequence[str], request: str | None
    ) -> list[int] | bool | None:
        waiting = dumps({"kind": "children", "children": list(children)})
        params = {
            **self._lease_params(lease),
            "waiting": waiting,
            "children": dumps(list(children)),
            "request": request,
        }
        event = lifecycle(EventKind.WAITING, children=list(children))

        def tx(cur: Cursor) -> list[int] | bool | None:
            if cur.execute(self._q["held"], params).fetchone() is None:
                return None
            self._before_wait()
            sequences = self._guarded_in(
                cur, "wait_for_children", params, lease.run_id, [event], lease
            )
            # Still held (the row is ours until this commits): every child it waits for
            # is terminal already.
            return False if sequences is None else sequences

        result: list[int] | bool | None = self._write(tx)
        return result

    def children_of(self, parent: str, ids: Sequence[str]) -> list[ChildState]:
        rows = self._read(self._q["children_of"], {"parent": parent, "ids": dumps(list(ids))})
        return [ChildState(*row) for row in rows]

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
