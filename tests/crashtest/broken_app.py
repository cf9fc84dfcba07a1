"""A broken app, for the harness to catch: the charge is declared an idempotent write but
ignores `ctx.idempotency_key` (a retried charge charges again), and the approval flow
re-reads whether the run still waits and refunds by itself, outside tenure's decision
(so k people clicking at once refund k times)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import tenure
from tenure import DecisionConflict, RunStatus, ToolContext, ToolEffect

from . import _ledger

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())
# Between reading "still waiting" and acting on it, as a call to a payment API takes.
ACT_AFTER_READ_SECONDS = 1.0


@rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout=5)
def charge(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Charge the customer (the key goes in as a note only: the ledger never dedupes)."""
    return {"charge": _ledger.write("charge", ctx.idempotency_key, amount)}


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, requires_approval=True)
def refund(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Report the refund that the approval handler already made."""
    return {"refunded": amount}


def decide(run_id: str, decided_by: str) -> None:
    """The click handler: checks the run still waits and loads what it waits for (as a page
    handler loads its state), refunds, then tells tenure. Check, then act: every click that
    read "waiting" refunds, however fast the first one's approval commits."""
    run = rt.status(run_id)
    if run is None or run.status is not RunStatus.WAITING_FOR_APPROVAL or not run.waiting:
        return
    turn = run.waiting["turn"]
    # Read with the check, not after the wait: read after it, the calls are already gone
    # once another click's approval committed (on SQLite, within a millisecond of waking),
    # and the handler would refund once only by luck of scheduling.
    calls = rt.pending_calls(run_id)
    time.sleep(ACT_AFTER_READ_SECONDS)
    for call in calls:
        _ledger.write("refund", f"{run_id}:{turn}", call["args"]["amount"])
    with contextlib.suppress(DecisionConflict):
        rt.approve(run_id, True, decided_by)


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)
