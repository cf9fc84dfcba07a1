"""A pydantic-ai agent made durable, for the crash tests: a read tool that takes the agent's
deps, a non-idempotent write that lands in the ledger file of tests/crashtest/_ledger.py
under its step's idempotency key, and a structured output."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

import tenure
from tenure.integrations import pydantic_ai as durable

from ..crashtest import _ledger


class Shop(BaseModel):
    currency: str


class Refund(BaseModel):
    order_id: str
    refunded: int
    currency: str


agent = Agent(
    name="refunds",
    deps_type=Shop,
    output_type=Refund,
    instructions="Refund the order the customer names.",
)


@agent.tool
def lookup(ctx: RunContext[Shop], order_id: str) -> dict[str, Any]:
    """Read an order."""
    return {"order_id": order_id, "paid": 700, "currency": ctx.deps.currency}


@agent.tool_plain
def refund(order_id: str, amount: int) -> str:
    """Refund an order (every call is a new refund)."""
    step = durable.step_context()
    assert step is not None
    _ledger.write("refund", step.idempotency_key, amount, token=step.fencing_token)
    return f"refunded {amount}"


rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())

SCRIPT: list[dict[str, Any]] = [
    {"call": [{"tool": "lookup", "args": {"order_id": "o7"}}]},
    {"call": [{"tool": "refund", "args": {"order_id": "o7", "amount": 700}}]},
    {
        "call": [
            {
                "tool": "final_result",
                "args": {"order_id": "o7", "refunded": 700, "currency": "EUR"},
            }
        ]
    },
]


def check(name: str, idempotency_key: str) -> int:
    return _ledger.seen(name, idempotency_key)


def refunded(ctx: tenure.ToolContext, arguments: dict[str, Any]) -> tenure.Probe:
    """Ask the ledger whether the refund under this key went through."""
    if _ledger.seen("refund", ctx.idempotency_key):
        return tenure.Probe.done(f"refunded {arguments['amount']}")
    return tenure.Probe.not_done()


durable.register(rt, agent, effects={"lookup": "read_only"}, probes={"refund": refunded})
