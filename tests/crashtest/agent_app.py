"""An app of agent functions (SPEC §20) for the crash tests: a read, a model step it
branches on, a fenced non-idempotent tool write with a probe, `ctx.step` writes (one
non-idempotent with a probe, one idempotent), `ctx.now` and `ctx.uuid`, and a person's
approval. Every write lands in the ledger file of `_ledger` with the recorded time and UUID
of its run, so a test can tell that a replayed step gave the same values."""

from __future__ import annotations

from typing import Any

import tenure
from tenure import Probe, ToolContext, ToolEffect

from . import _ledger

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())


@rt.tool
def lookup(order_id: str) -> dict[str, Any]:
    """Read an order."""
    return {"order_id": order_id, "open": True}


def paid(ctx: ToolContext, amount: int, ref: str) -> Probe:
    """Ask the ledger whether the payment under this key went through."""
    if _ledger.seen("pay", ctx.idempotency_key):
        return Probe.done({"paid": amount})
    return Probe.not_done()


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, probe=paid)
def pay(ctx: ToolContext, amount: int, ref: str) -> dict[str, Any]:
    """Pay the order (every call is a new payment)."""
    _ledger.write("pay", ctx.idempotency_key, amount, ref=ref, token=ctx.fencing_token)
    return {"paid": amount}


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5, requires_approval=True)
def refund(ctx: ToolContext, amount: int) -> dict[str, Any]:
    """Refund the order, once a person approved it."""
    _ledger.write("refund", ctx.idempotency_key, amount)
    return {"refunded": amount}


def book(ctx: ToolContext, order_id: str, amount: int, ref: str, at: str) -> int:
    """A `ctx.step` write: one ledger line per call."""
    token = ctx.fencing_token
    return _ledger.write("book", ctx.idempotency_key, amount, ref=ref, at=at, token=token)


def booked(ctx: ToolContext, order_id: str, amount: int, ref: str, at: str) -> Probe:
    found = [e for e in _ledger.entries() if e["key"] == ctx.idempotency_key]
    return Probe.done(len(found)) if found else Probe.not_done()


def note(ctx: ToolContext, text: str, ref: str) -> str:
    """A `ctx.step` write that honours its idempotency key."""
    _ledger.write_once("note", ctx.idempotency_key, 0, ref=ref, token=ctx.fencing_token)
    return text


@rt.agent
def settle(ctx: tenure.AgentContext, order_id: str, amount: int) -> dict[str, Any]:
    """Pay an order if the model says so, and book it.

    Args:
        order_id: the order
        amount: what to pay, in cents
    """
    at = ctx.now().isoformat()
    ref = ctx.uuid()
    order = ctx.tool("lookup", order_id=order_id)
    reply = ctx.model(f"Should order {order_id} be paid? {order}")
    if "pay" in (reply.text or ""):
        ctx.tool("pay", amount=amount, ref=ref)
        ctx.step(
            book, order_id, amount, ref, at, effect=ToolEffect.NON_IDEMPOTENT_WRITE, probe=booked
        )
        outcome = "paid"
    else:
        outcome = "skipped"
    ctx.step(note, f"{order_id} {outcome}", ref, effect=ToolEffect.IDEMPOTENT_WRITE)
    return {"order_id": order_id, "outcome": outcome}


@rt.agent
def give_back(ctx: tenure.AgentContext, order_id: str, amount: int) -> str:
    """Refund an order if a person agrees (twice: once by `ctx.approve`, once by the tool's
    own approval).

    Args:
        order_id: the order
        amount: what to refund, in cents
    """
    if not ctx.approve("refund", {"order_id": order_id, "amount": amount}):
        return "kept"
    ctx.tool("refund", amount=amount)
    return "refunded"


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)


def careless_note(ctx: ToolContext, text: str) -> str:
    """Declared idempotent, but it ignores its key: a repeated call writes again."""
    _ledger.write("careless_note", ctx.idempotency_key, 0)
    return text


@rt.agent
def careless(ctx: tenure.AgentContext, text: str) -> str:
    """Note a text through a step that is not what it says it is.

    Args:
        text: what to note
    """
    return str(ctx.step(careless_note, text, effect=ToolEffect.IDEMPOTENT_WRITE))


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@rt.agent
def ship(ctx: tenure.AgentContext, order_id: str) -> str:
    """Ship an order where a person says, once.

    Args:
        order_id: the order
    """
    where = ctx.input("ship to which city?", CITY)
    ctx.step(note, f"{order_id} to {where['city']}", order_id, effect=ToolEffect.IDEMPOTENT_WRITE)
    return str(where["city"])


@rt.agent
def pick(ctx: tenure.AgentContext, order_id: str) -> str:
    """Pick an order (a child run of `fan_out`).

    Args:
        order_id: the order
    """
    return f"picked {order_id}"


@rt.agent
def fan_out(ctx: tenure.AgentContext, orders: list[str]) -> list[str]:
    """Pick every order in a child run of its own, one created alone and the rest at once,
    and wait for all of them (SPEC §21).

    Args:
        orders: the orders
    """
    first = ctx.child(agent="pick", input={"order_id": orders[0]})
    rest = ctx.map("pick", [{"order_id": o} for o in orders[1:]])
    return [str(v) for v in ctx.gather(first, *rest)]
