"""A correct app: its charge passes the idempotency key to the ledger, and its refunds wait
for tenure's own guarded decision (`rt.approve`)."""

from __future__ import annotations

import asyncio
from typing import Any

import tenure
from tenure import Probe, ToolContext, ToolEffect

from . import _ledger

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())


@rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, timeout=5)
def charge(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Charge the customer (the ledger dedupes on the idempotency key)."""
    return {"charge": _ledger.write_once("charge", ctx.idempotency_key, amount)}


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, requires_approval=True)
def refund(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Refund the customer, once a person approved it."""
    return {"refund": _ledger.write("refund", ctx.idempotency_key, amount)}


def paid(ctx: ToolContext, amount: int) -> Probe:
    """Ask the ledger whether the payment under this key went through."""
    if _ledger.seen("pay", ctx.idempotency_key):
        return Probe.done({"payment": amount})
    return Probe.not_done()


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, probe=paid)
async def pay(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Pay the supplier through an async client (every call is a new payment)."""
    await asyncio.sleep(0)
    _ledger.write("pay", ctx.idempotency_key, amount)
    return {"payment": amount}


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)
