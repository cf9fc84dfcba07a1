"""A broken app, for the harness to catch: the charge is declared an idempotent write but
ignores `ctx.idempotency_key` (a retried charge charges again), and the approval flow
checks whether the run still waits and refunds by itself, before tenure's decision
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
# The first click is served at once, the others this much later (a cold start, a slow page):
# by then the first click's approval has long committed, unless the harness holds every
# decision until all the clicks reached theirs.
LATE_CLICK_SECONDS = 0.5


@rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout=5)
def charge(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Charge the customer (the key goes in as a note only: the ledger never dedupes)."""
    return {"charge": _ledger.write("charge", ctx.idempotency_key, amount)}


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, requires_approval=True)
def refund(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Report the refund that the approval handler already made."""
    return {"refunded": amount}


def decide(run_id: str, decided_by: str) -> None:
    """The click handler: checks the run still waits, refunds what it waits for, then tells
    tenure. Check, then act: every click that read "waiting" refunds."""
    if decided_by != "decider-1":
        time.sleep(LATE_CLICK_SECONDS)
    run = rt.status(run_id)
    if run is None or run.status is not RunStatus.WAITING_FOR_APPROVAL or not run.waiting:
        return
    turn = run.waiting["turn"]
    for call in rt.pending_calls(run_id):
        _ledger.write("refund", f"{run_id}:{turn}", call["args"]["amount"])
    with contextlib.suppress(DecisionConflict):
        rt.approve(run_id, True, decided_by)


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)
