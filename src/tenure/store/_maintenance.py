"""Transitions made by nobody's lease: the reaper (SPEC §7), a person's decision, an
operator's cancel and redrive, expired waits, retention. Each re-checks, inside its
statement, everything the decision it carries out was made on."""

from __future__ import annotations

from typing import Any

from tenure._heartbeat import DEAD_AFTER_BEATS
from tenure._json import dumps
from tenure._types import (
    EventKind,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.store._base import Claimed, Held, Lease, NewEvent, NewFork, StaleRun
from tenure.store._sqlbase import Cursor, SQLBase, lifecycle


class Maintenance(SQLBase):
    def cancel(self, run_id: str, expected: RunStatus | None = None) -> bool:
        event = lifecycle(EventKind.CANCELLED)
        params = {"id": run_id, "expected": str(expected) if expected else None}
        return self._guarded("cancel", params, run_id, [event]) is not None

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

    def held_by(self, owner: str) -> list[Held]:
        rows = self._read(self._q["held_by"], {"owner": owner})
        return [Held(Lease(row[0], row[1], int(row[2]), int(row[3])), row[4]) for row in rows]

    def stale_runs(self, limit: int) -> list[StaleRun]:
        return [
            StaleRun(
                run_id=row[0],
                lease_token=int(row[1]),
                pending_effect=ToolEffect(row[2]) if row[2] else None,
                has_request=bool(row[3]),
                requeue_count=int(row[4]),
                fence_probe=bool(row[5]),
                step_deadline=str(row[7]) if row[6] else None,
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
            "fence_probe": seen.fence_probe,
            "step_deadline": seen.step_deadline is not None,
        }

    def requeue_stale(self, seen: StaleRun) -> bool:
        if seen.step_deadline is not None:
            error = seen.step_deadline
            event = lifecycle(
                EventKind.REQUEUED, cause="step_deadline", why=error, lease_token=seen.lease_token
            )
        else:
            error = "lease expired: the worker stopped renewing it"
            event = lifecycle(EventKind.REQUEUED, cause="stale", lease_token=seen.lease_token)
        params = {**self._seen_params(seen), "error": error}
        return self._guarded("requeue_stale", params, seen.run_id, [event]) is not None

    def requeue_in_doubt_stale(self, seen: StaleRun, error: str) -> bool:
        # The cause stays `in_doubt`: it is what the next segment acts on (the probe first).
        said = {} if seen.step_deadline is None else {"step_deadline": True, "why": error}
        event = lifecycle(
            EventKind.REQUEUED, cause="in_doubt", stale=True, lease_token=seen.lease_token, **said
        )
        params = {**self._seen_params(seen), "error": error}
        return self._guarded("requeue_in_doubt_stale", params, seen.run_id, [event]) is not None

    def dead_letter_stale(self, seen: StaleRun, reason: TerminationReason, error: str) -> bool:
        event = lifecycle(
            EventKind.DEAD_LETTERED,
            reason=str(reason),
            cause="stale" if seen.step_deadline is None else "step_deadline",
            error=error,
            lease_token=seen.lease_token,
        )
        params = {**self._seen_params(seen), "reason": str(reason), "error": error}
        return self._guarded("dead_letter_stale", params, seen.run_id, [event]) is not None

    def redrive(self, run_id: str, force: bool) -> bool:
        def tx(cur: Cursor) -> bool:
            cur.execute(self._q["lock_parent"], {"id": run_id}).fetchall()
            fence = cur.execute(self._q["fence_of"], {"id": run_id}).fetchone()
            params = {"id": run_id, "force": force, "n": 1}
            row = cur.execute(self._q["redrive"], params).fetchone()
            if row is None:
                return False
            prior, probe = (fence[0], bool(fence[1])) if fence else ("", False)
            # A probe-able fence stays (the run goes back in doubt); the event says so.
            event = lifecycle(
                EventKind.REDRIVEN, force=force, pending_effect=prior, fence_probe=probe
            )
            self._append(cur, run_id, row[0], row[1], row[2], [event])
            return True

        return self._write(tx)

    def fork(self, new: NewFork) -> bool:
        params = {
            "fork_id": new.fork_id,
            "id": new.run_id,
            "at": new.at,
            "request": new.request,
            "last_sequence": new.seen_last_sequence,
            "seen_fence": str(new.seen_fence or ""),
            "seen_probe": new.seen_probe,
            "fence": str(new.fence or ""),
            "fence_probe": new.fence_probe,
            "fence_call": new.fence_call,
        }

        def tx(cur: Cursor) -> bool:
            cur.execute(self._q["fork_run"], params)
            if cur.rowcount != 1:  # the original moved on since the plan read it
                return False
            cur.execute(self._q["fork_events"], params)
            # The fork's own first event, under its own (unclaimed) token and attempt.
            self._append(cur, new.fork_id, new.at, 0, 0, [new.event])
            return True

        return self._write(tx)

    def purge(self, older_than_seconds: float) -> int:
        def tx(cur: Cursor) -> int:
            cutoff = cur.execute(self._q["purge_cutoff"], {"age": older_than_seconds}).fetchone()[0]
            cur.execute(self._q["purge_events"], {"cutoff": cutoff})
            params = {"cutoff": cutoff, "dead_beats": DEAD_AFTER_BEATS}
            cur.execute(self._q["purge_workers"], params)
            cur.execute(self._q["purge_budgets"], {"cutoff": cutoff})
            return int(cur.execute(self._q["purge_runs"], {"cutoff": cutoff}).rowcount)

        return self._write(tx)
