"""An OpenAI Agents SDK agent with a handoff, made durable with one call.

    python examples/openai_agents_handoff.py                   # a scripted model, offline
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 TENURE_MODEL=local \
        python examples/openai_agents_handoff.py

A triage agent hands the ticket off to a billing agent, which refunds the order (a
non-idempotent write, fenced: at most once) and answers. Each model call, the handoff and
the tool call are steps of the run, replayed after a crash instead of repeated. With
OPENAI_BASE_URL set, the model is that OpenAI-compatible endpoint (docs/local-model.md);
TENURE_DATABASE_URL picks the database (default sqlite:///openai_agents.db).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import Agent, function_tool

import tenure
from tenure import RunRequest, RunStatus
from tenure.integrations import openai_agents as durable

PAYMENTS = Path("payments-openai-agents.jsonl")  # the outside system: one line per refund it made


@function_tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (every call is a new payment)."""
    step = durable.step_context()
    key = step.idempotency_key if step else "-"
    with PAYMENTS.open("a") as f:
        f.write(json.dumps({"order_id": order_id, "amount": amount, "key": key}) + "\n")
    return f"refunded {amount}"


billing = Agent(name="billing", instructions="Refund the order the customer names.", tools=[refund])
triage = Agent(name="triage", instructions="Hand billing questions to billing.", handoffs=[billing])

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///openai_agents.db"))
if os.environ.get("OPENAI_BASE_URL"):
    model = os.environ.get("TENURE_MODEL", "gpt-4.1-mini")
    rt.add_model("default", tenure.providers.OpenAICompatible(model=model, timeout=60.0))
else:
    rt.add_model("default", tenure.providers.Scripted())
durable.register(rt, triage, effects={"refund": "non_idempotent_write"})

# What the scripted model answers, in order (ignored by a real model).
SCRIPT: list[dict[str, Any]] = [
    {"call": [{"tool": "transfer_to_billing", "args": {}}]},
    {"call": [{"tool": "refund", "args": {"order_id": "A-7", "amount": 700}}]},
    {"say": "Order A-7 is refunded: 7.00 EUR."},
]


def check(name: str, idempotency_key: str) -> int:
    """For `tenure crashtest`: how many refunds the payment system made under this key."""
    if not PAYMENTS.exists():
        return 0
    lines = PAYMENTS.read_text().splitlines()
    return sum(json.loads(line)["key"] == idempotency_key for line in lines if line.strip())


def main(prompt: str = "Please refund order A-7.") -> int:
    run_id = rt.enqueue(RunRequest(agent="triage", input={"prompt": prompt}, script=SCRIPT))
    rt.work(concurrency=1, burst=True)
    run = rt.status(run_id)
    assert run is not None
    if run.status is not RunStatus.COMPLETED:
        print(
            f"run {run_id}: {run.status} ({run.termination_reason}): {run.error}", file=sys.stderr
        )
        return 1
    print(run.output)
    made = PAYMENTS.read_text().count("\n") if PAYMENTS.exists() else 0
    print(f"refunds made: {made}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:2]))
