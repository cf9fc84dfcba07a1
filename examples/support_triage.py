"""A support-triage agent written as your own code: an agent function (`@rt.agent`).

    python examples/support_triage.py            # on sqlite:///triage.db
    TENURE_DATABASE_URL=postgresql://... python examples/support_triage.py

`triage` asks the model to label each ticket and routes on the answer: a refund waits for a
person's approval, then runs as a fenced non-idempotent write with a probe (so a worker that
dies inside it never refunds twice); a question is answered by the built-in model/tool loop,
each of its calls a step of the same run. Every `ctx.*` call is a durable step: after a
crash the function is called again from the top and each recorded step returns its recorded
result without running.

The model is scripted per ticket (deterministic, no API key). Here the script approves the
held refund itself, as an operator would from `tenure approve`, the dashboard's Pending page
or `rt.approve(...)`.

As a worker for the command line: `tenure --app examples.support_triage:rt worker`.
"""

from __future__ import annotations

import os

import tenure
from tenure import AgentContext, Probe, RunRequest, RunStatus, ToolContext, ToolEffect

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///triage.db"))
rt.add_model("default", tenure.providers.Scripted())

# Stands in for your payment provider: refunds by idempotency key.
REFUNDS: dict[str, int] = {}
DOCS = {"shipping": "Orders ship within 2 working days.", "returns": "Returns are free."}


def refunded(ctx: ToolContext, order_id: str, amount_cents: int) -> Probe:
    """Ask the payment provider whether an interrupted refund happened."""
    if ctx.idempotency_key in REFUNDS:
        return Probe.done({"refunded_cents": REFUNDS[ctx.idempotency_key]})
    return Probe.not_done()


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, probe=refunded)
def refund(ctx: ToolContext, order_id: str, amount_cents: int) -> dict:
    """Refund an order."""
    REFUNDS[ctx.idempotency_key] = amount_cents
    return {"refunded_cents": amount_cents, "order_id": order_id}


@rt.tool
def search_docs(topic: str) -> str:
    """Search the help centre."""
    return DOCS.get(topic, "nothing found")


@rt.agent
def triage(ctx: AgentContext, ticket_id: str, text: str, order_id: str = "") -> dict:
    """Route a support ticket: refunds after approval, questions answered from the docs.

    Args:
        ticket_id: the ticket's id
        text: what the customer wrote
        order_id: the order the ticket is about, if any
    """
    label = ctx.model(f"Label this ticket as refund or question: {text}").text or ""
    if "refund" in label:
        if not ctx.approve("refund", {"ticket_id": ticket_id, "order_id": order_id}):
            return {"ticket": ticket_id, "label": "refund", "status": "denied"}
        done = ctx.tool("refund", order_id=order_id, amount_cents=4999)
        return {"ticket": ticket_id, "label": "refund", "status": "refunded", "refund": done}
    answer = ctx.agent_loop(f"Answer from the docs: {text}", tools=["search_docs"])
    return {"ticket": ticket_id, "label": "question", "answer": answer}


def ticket(ticket_id: str, text: str, script: list[dict], **more: str) -> RunRequest:
    return RunRequest(
        agent="triage", input={"ticket_id": ticket_id, "text": text, **more}, script=script
    )


TICKETS = [
    ticket(
        "T-1", "My order arrived broken, money back please", [{"say": "refund"}], order_id="A-7"
    ),
    ticket(
        "T-2",
        "When will my order ship?",
        [
            {"say": "question"},
            {"call": [{"tool": "search_docs", "args": {"topic": "shipping"}}]},
            {"say": "It ships within 2 working days."},
        ],
    ),
]


def main() -> int:
    ids = rt.enqueue_many(TICKETS)
    rt.work(concurrency=2, burst=True)
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None
        print(f"run {run_id}: {run.status}")
        for call in rt.pending_calls(run_id):
            print(f"  waiting on {call['tool']}({call['args']})")
            rt.approve(run_id, True, decided_by="ada (support lead)")
    rt.work(concurrency=2, burst=True)
    ok = True
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None
        print(f"run {run_id}: {run.status}: {run.output}")
        for event in rt.events(run_id):
            if "position" in event.payload:
                print(f"  step {event.payload['position']}: {event.payload['step']} "
                      f"{event.payload['name']}")  # fmt: skip
        ok = ok and run.status is RunStatus.COMPLETED
    print(f"refunds made: {len(REFUNDS)}")
    return 0 if ok and len(REFUNDS) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
