"""A run that fails at its fourth step, fixed and forked from there.

    python examples/fork_repair.py            # on sqlite:///fork_repair.db
    TENURE_DATABASE_URL=postgresql://... python examples/fork_repair.py

`fulfil` is an agent function with four steps: it loads the order, charges the card (a
non-idempotent write), reserves the stock (an idempotent write) and prints the shipping
label. The label step has a bug: the run fails there and is dead-lettered, after the card
was charged.

Redriving it would not help (the bug is still there, and the code that fails is the code's,
not the world's); running it again from the start would charge the card twice. Instead:

1. read the fork's plan: what is kept (the order, the charge, the reservation), what runs
   again (the label), and which non-idempotent writes would repeat (none, from there);
2. deploy the fix (here: a switch flipped in this process; for you: new code on your
   workers);
3. fork the run at the label step's event. The fork replays the three kept steps from its
   journal under the new code, without running them, and runs the label step again.

Forking from before the charge is refused, naming the charge, unless repeated writes are
allowed. The original run stays as it was, dead-lettered, for the record.
"""

from __future__ import annotations

import os

import tenure
from tenure import AgentContext, ForkRefused, RunRequest, ToolContext, ToolEffect

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///fork_repair.db"))

# Stand in for the payment provider and the warehouse.
CHARGES: list[str] = []
RESERVED: dict[str, int] = {}
FIXED = False  # the label bug, before and after its fix is deployed


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
def charge(ctx: ToolContext, order_id: str, amount_cents: int) -> dict:
    """Charge the customer's card."""
    CHARGES.append(ctx.idempotency_key)
    return {"charged_cents": amount_cents}


@rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
def reserve(order_id: str, sku: str, quantity: int) -> dict:
    """Reserve stock for the order."""
    RESERVED[order_id] = quantity
    return {"reserved": quantity}


def load_order(order_id: str) -> dict:
    return {"id": order_id, "sku": "MUG-1", "quantity": 2, "grams": 900, "city": "Lyon"}


def shipping_label(order: dict) -> str:
    # The bug: orders carry grams, not kilograms.
    kilos = order["grams"] / 1000 if FIXED else order["kilograms"]
    return f"{order['id']} to {order['city']}, {kilos:.1f} kg"


@rt.agent
def fulfil(ctx: AgentContext, order_id: str) -> dict:
    """Charge, reserve and ship one order.

    Args:
        order_id: the order to fulfil
    """
    order = ctx.step(load_order, order_id, name="load_order")
    ctx.tool("charge", order_id=order_id, amount_cents=2598)
    ctx.tool("reserve", order_id=order_id, sku=order["sku"], quantity=order["quantity"])
    label = ctx.step(shipping_label, order, name="shipping_label")
    return {"order": order_id, "label": label}


def main() -> None:
    global FIXED
    run_id = rt.enqueue(RunRequest(agent="fulfil", input={"order_id": "A-1"}))
    rt.work(burst=True)
    run = rt.status(run_id)
    assert run is not None
    print(f"run {run_id}: {run.status} ({run.termination_reason}): {run.error}")

    # The fourth step (position 3) failed: its event is where the fork starts again.
    failed = next(e for e in rt.events(run_id) if e.payload.get("position") == 3)
    plan = rt.fork_plan(run_id, failed.sequence)
    kept = [k["name"] for k in plan.kept if "position" in k]
    print(f"fork at {plan.at}: kept {kept}, runs again {[a['name'] for a in plan.again]}")
    print(f"non-idempotent writes that would repeat: {list(plan.repeated_writes)}")

    charged = next(e for e in rt.events(run_id) if e.payload.get("name") == "charge")
    try:
        rt.fork(run_id, charged.sequence)
    except ForkRefused as refused:
        print(f"from the charge: refused: {refused}")

    FIXED = True  # the fix is deployed
    fork_id = rt.fork(run_id, failed.sequence)
    rt.work(burst=True)
    fork = rt.status(fork_id)
    assert fork is not None and fork.forked_from is not None
    print(
        f"fork {fork_id} (from {fork.forked_from.run_id} at {fork.forked_from.sequence}): "
        f"{fork.status}: {fork.output}"
    )
    print(f"cards charged: {len(CHARGES)}")


if __name__ == "__main__":
    main()
