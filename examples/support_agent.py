"""A support agent whose refunds wait for a person's approval.

    python examples/support_agent.py            # on sqlite:///support.db
    TENURE_DATABASE_URL=postgresql://... python examples/support_agent.py

The model is scripted (deterministic, no API key): it looks the order up, then asks to
refund it. `refund` is a non-idempotent write that requires approval, so the run stops in
`waiting_for_approval` with no lease held; here the script approves it itself, as an operator
would from `tenure approve`, the dashboard's Pending page or `rt.approve(...)`; the run then
resumes on a worker, the refund runs exactly once, and the agent answers.

As a worker for the command line: `tenure --app examples.support_agent:rt worker`.
"""

from __future__ import annotations

import os

import tenure
from tenure import RunRequest, RunStatus, ToolContext, ToolEffect

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///support.db"))
rt.add_model("default", tenure.providers.Scripted())

ORDERS = {"A-1001": {"customer": "ada@example.com", "total_cents": 4999, "status": "damaged"}}
REFUNDS: dict[str, int] = {}  # stands in for your payment provider: idempotency key -> cents


@rt.tool
def lookup_order(order_id: str) -> dict:
    """Look an order up by its id."""
    return ORDERS.get(order_id, {"error": "no such order"})


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
def refund(ctx: ToolContext, order_id: str, amount_cents: int) -> dict:
    """Refund an order (a person approves it first)."""
    REFUNDS[ctx.idempotency_key] = amount_cents
    return {"refunded_cents": amount_cents, "order_id": order_id}


SCRIPT = [
    {"call": [{"tool": "lookup_order", "args": {"order_id": "A-1001"}}]},
    {"call": [{"tool": "refund", "args": {"order_id": "A-1001", "amount_cents": 4999}}]},
    {"say": "I have refunded order A-1001 (49.99). Sorry about the damage!"},
]


def main() -> int:
    run_id = rt.enqueue(
        RunRequest(
            prompt="My order A-1001 arrived damaged, I want my money back.",
            tools=["lookup_order", "refund"],
            script=SCRIPT,
        )
    )
    rt.work(concurrency=2, burst=True)
    held = rt.status(run_id)
    assert held is not None
    print(f"run {run_id}: {held.status}")
    for call in rt.pending_calls(run_id):
        print(f"  waiting on {call['tool']}({call['args']}) [{call['effect']}]")
    rt.approve(run_id, True, decided_by="ada (support lead)", note="damaged on arrival")
    rt.work(concurrency=2, burst=True)
    done = rt.status(run_id)
    assert done is not None
    print(f"run {run_id}: {done.status}: {done.output}")
    print(f"refunds made: {len(REFUNDS)}")
    return 0 if done.status is RunStatus.COMPLETED and len(REFUNDS) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
