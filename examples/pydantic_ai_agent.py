"""A pydantic-ai agent you already have, made durable with one call.

    python examples/pydantic_ai_agent.py                       # a scripted model, offline
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 TENURE_MODEL=local \
        python examples/pydantic_ai_agent.py

The agent looks an order up, refunds it (a non-idempotent write, fenced: at most once, its
idempotency key passed to the payment system) and answers with a structured `Refund`. Each
model request and tool call is a step of the run: kill the worker mid-run and another one
resumes from the journal without asking the model again or refunding twice. With
OPENAI_BASE_URL set, the model is that OpenAI-compatible endpoint (docs/local-model.md);
TENURE_DATABASE_URL picks the database (default sqlite:///pydantic_ai.db).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

import tenure
from tenure import RunRequest, RunStatus
from tenure.integrations import pydantic_ai as durable

PAYMENTS = Path("payments-pydantic-ai.jsonl")  # the outside system: one line per refund it made


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
    instructions="Look the order up, refund what was paid, and report the refund.",
)


@agent.tool
def lookup(ctx: RunContext[Shop], order_id: str) -> dict[str, Any]:
    """Read an order: what was paid for it."""
    return {"order_id": order_id, "paid": 700, "currency": ctx.deps.currency}


@agent.tool_plain
def refund(order_id: str, amount: int) -> str:
    """Refund an order (every call is a new payment)."""
    step = durable.step_context()
    key = step.idempotency_key if step else "-"
    with PAYMENTS.open("a") as f:
        f.write(json.dumps({"order_id": order_id, "amount": amount, "key": key}) + "\n")
    return f"refunded {amount}"


rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///pydantic_ai.db"))
if os.environ.get("OPENAI_BASE_URL"):
    model = os.environ.get("TENURE_MODEL", "gpt-4.1-mini")
    rt.add_model("default", tenure.providers.OpenAICompatible(model=model, timeout=60.0))
else:
    rt.add_model("default", tenure.providers.Scripted())
durable.register(rt, agent, effects={"lookup": "read_only", "refund": "non_idempotent_write"})

# What the scripted model answers, in order (ignored by a real model).
SCRIPT: list[dict[str, Any]] = [
    {"call": [{"tool": "lookup", "args": {"order_id": "A-7"}}]},
    {"call": [{"tool": "refund", "args": {"order_id": "A-7", "amount": 700}}]},
    {
        "call": [
            {
                "tool": "final_result",
                "args": {"order_id": "A-7", "refunded": 700, "currency": "EUR"},
            }
        ]
    },
]


def check(name: str, idempotency_key: str) -> int:
    """For `tenure crashtest`: how many refunds the payment system made under this key."""
    if not PAYMENTS.exists():
        return 0
    lines = PAYMENTS.read_text().splitlines()
    return sum(json.loads(line)["key"] == idempotency_key for line in lines if line.strip())


def main(prompt: str = "Please refund order A-7.") -> int:
    run_id = rt.enqueue(
        RunRequest(
            agent="refunds", input={"prompt": prompt, "deps": {"currency": "EUR"}}, script=SCRIPT
        )
    )
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
