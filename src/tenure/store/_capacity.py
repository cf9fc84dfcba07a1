"""Provider capacity in the store (SPEC §17): one row per model shared by every worker on
the database, its calls in flight, and parking a run that waits for it.

A reservation changes the model's row under a lock (PostgreSQL: `lock_model`; SQLite:
BEGIN IMMEDIATE), so that the compare-and-set that takes from the buckets and counts the
calls in flight reads what the last writer left.
"""

from __future__ import annotations

import uuid
from typing import Any

from tenure._limits import Limits, capacity, refusal_wait
from tenure._types import EventKind
from tenure.store._base import Grant, Lease, ModelState, NewEvent
from tenure.store._sqlbase import Cursor, SQLBase


class CapacityStore(SQLBase):
    def set_model_limits(self, model: str, limits: Limits) -> None:
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        params = {
            "model": model,
            "rpm": rpm,
            "tpm": tpm,
            "concurrency": limits.concurrency,
            "requests": capacity(rpm) if rpm is not None else None,
            "tokens": capacity(tpm) if tpm is not None else None,
        }
        self._write(lambda cur: cur.execute(self._q["set_model_limits"], params))

    def reserve_capacity(
        self,
        model: str,
        lease: Lease,
        tokens: float,
        hold_seconds: float,
        headroom_seconds: float = 0.0,
    ) -> Grant | None:
        key = {"model": model}
        take = {**key, "tokens": tokens, "headroom": headroom_seconds}

        def tx(cur: Cursor) -> Grant | None:
            if cur.execute(self._q["lock_model"], key).fetchone() is None:
                return None
            cur.execute(self._q["sweep_reservations"], key)
            if cur.execute(self._q["reserve_capacity"], take).fetchone():
                reservation = uuid.uuid4().hex
                params = {
                    **key,
                    "id": reservation,
                    "run_id": lease.run_id,
                    "token": lease.token,
                    "tokens": tokens,
                    "hold": hold_seconds,
                }
                cur.execute(self._q["add_reservation"], params)
                return Grant(reservation)
            state = self._model_state(cur.execute(self._q["model_capacity"], key).fetchone())
            circuit = 0.0
            if state.circuit_open_until is not None:
                circuit = (state.circuit_open_until - state.now).total_seconds()
            wait = refusal_wait(
                state.limits,
                state.requests,
                state.tokens,
                state.in_use,
                circuit,
                tokens,
                headroom_seconds,
            )
            return Grant(None, wait, circuit_open=circuit > 0)

        return self._write(tx)

    def settle_capacity(self, model: str, reservation: str, refund: float) -> None:
        def tx(cur: Cursor) -> None:
            cur.execute(self._q["lock_model"], {"model": model})
            cur.execute(self._q["settle_capacity"], {"model": model, "refund": refund})
            cur.execute(self._q["drop_reservation"], {"id": reservation})

        self._write(tx)

    def open_circuit(self, model: str, seconds: float) -> None:
        params = {"model": model, "seconds": seconds}
        self._write(lambda cur: cur.execute(self._q["open_circuit"], params))

    def open_circuits(self) -> dict[str, float]:
        rows = self._read(self._q["open_circuits"], {})
        return {str(name): float(seconds) for name, seconds in rows}

    def models(self, name: str | None = None) -> list[ModelState]:
        rows = self._read(self._q["model_capacity"], {"model": name})
        return [self._model_state(row) for row in rows]

    def _model_state(self, row: Any) -> ModelState:
        name, rpm, tpm, concurrency, requests, tokens, in_use, open_until, now = row
        clock = self._time(now)
        assert clock is not None
        return ModelState(
            name=name,
            limits=Limits(rpm, tpm, concurrency),
            in_use=int(in_use),
            requests=None if requests is None else float(requests),
            tokens=None if tokens is None else float(tokens),
            circuit_open_until=self._time(open_until),
            now=clock,
        )

    def park(
        self,
        lease: Lease,
        delay: float,
        payload: dict[str, Any],
        kind: EventKind = EventKind.THROTTLED,
    ) -> bool:
        params = {**self._lease_params(lease), "delay": delay}
        event = NewEvent(kind, payload)
        return self._guarded("park", params, lease.run_id, [event], lease) is not None
