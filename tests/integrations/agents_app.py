"""An OpenAI Agents SDK agent made durable, for the crash tests: a triage agent that hands
off to a billing agent whose refund tool writes to the ledger file of
tests/crashtest/_ledger.py under its step's idempotency key."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool

import tenure
from tenure.integrations import openai_agents as durable

from ..crashtest import _ledger


@function_tool
def lookup(order_id: str) -> dict[str, Any]:
    """Read an order."""
    return {"order_id": order_id, "paid": 700}


@function_tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (every call is a new refund)."""
    step = durable.step_context()
    assert step is not None
    _ledger.write("refund", step.idempotency_key, amount, token=step.fencing_token)
    return f"refunded {amount}"


def refunded(ctx: tenure.ToolContext, arguments: dict[str, Any]) -> tenure.Probe:
    """Ask the ledger whether the refund under this key went through."""
    if _ledger.seen("refund", ctx.idempotency_key):
        return tenure.Probe.done(f"refunded {arguments['amount']}")
    return tenure.Probe.not_done()


billing = Agent(name="billing", instructions="Refund orders.", tools=[lookup, refund])
triage = Agent(name="triage", instructions="Route the ticket.", handoffs=[billing])

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())
durable.register(rt, triage, effects={"lookup": "read_only"}, probes={"refund": refunded})

SCRIPT: list[dict[str, Any]] = [
    {"call": [{"tool": "transfer_to_billing", "args": {}}]},
    {"call": [{"tool": "lookup", "args": {"order_id": "o7"}}]},
    {"call": [{"tool": "refund", "args": {"order_id": "o7", "amount": 700}}]},
    {"say": "refunded o7"},
]


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)
