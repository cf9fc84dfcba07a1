"""One budget for a run tree in the store (SPEC §21): the root's ledger, shared by every
worker on the database.

A reservation and a settlement change the ledger's row under a lock (PostgreSQL:
`lock_budget`; SQLite: BEGIN IMMEDIATE), so that the compare-and-set reads the spending and
the calls in flight as the last writer left them.
"""

from __future__ import annotations

import uuid
from typing import Any

from tenure.store._base import Budget, BudgetGrant, Lease
from tenure.store._sqlbase import Cursor, SQLBase


class BudgetStore(SQLBase):
    def reserve_budget(
        self,
        root_id: str,
        lease: Lease,
        limits: tuple[int | None, float | None],
        tokens: int,
        cost: float,
        hold_seconds: float,
    ) -> BudgetGrant:
        key = {"root": root_id}
        max_tokens, max_cost = limits

        def tx(cur: Cursor) -> BudgetGrant:
            ensure = {**key, "max_tokens": max_tokens, "max_cost": max_cost}
            cur.execute(self._q["ensure_budget"], ensure)
            cur.execute(self._q["lock_budget"], key).fetchone()
            cur.execute(self._q["sweep_budget_reservations"], key)
            self._before_reserve()
            reservation = uuid.uuid4().hex
            params = {
                **key,
                "run_id": lease.run_id,
                "owner": lease.owner,
                "token": lease.token,
                "id": reservation,
                "tokens": tokens,
                "cost": cost,
                "hold": hold_seconds,
            }
            if cur.execute(self._q["reserve_budget"], params).fetchone() is not None:
                return BudgetGrant(reservation)
            found = self._budget(cur.execute(self._q["budget"], key).fetchone())
            # No row: the run's own row is gone, or its lease with it; the next write
            # under the lease says which.
            return BudgetGrant(None, spent=found is None or found.spent)

        return self._write(tx)

    def _before_reserve(self) -> None:
        """Between the ledger's lock and its compare-and-set (a test stalls here)."""

    def settle_budget(self, root_id: str, reservation: str, tokens: int, cost: float) -> None:
        key = {"root": root_id}

        def tx(cur: Cursor) -> None:
            cur.execute(self._q["lock_budget"], key).fetchone()
            params = {**key, "id": reservation, "tokens": tokens, "cost": cost}
            cur.execute(self._q["settle_budget"], params)
            cur.execute(self._q["drop_budget_reservation"], {"id": reservation})

        self._write(tx)

    def budget(self, root_id: str) -> Budget | None:
        rows = self._read(self._q["budget"], {"root": root_id})
        return self._budget(rows[0]) if rows else None

    @staticmethod
    def _budget(row: Any) -> Budget | None:
        if row is None:
            return None
        root, max_tokens, max_cost, spent_tokens, spent_cost, held_tokens, held_cost = row
        return Budget(
            root_id=str(root),
            max_tokens=None if max_tokens is None else int(max_tokens),
            max_cost=None if max_cost is None else float(max_cost),
            spent_tokens=int(spent_tokens),
            spent_cost=float(spent_cost),
            reserved_tokens=int(held_tokens),
            reserved_cost=float(held_cost),
        )
