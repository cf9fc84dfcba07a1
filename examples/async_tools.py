"""`async def` tools and an async model provider, on one worker.

    python examples/async_tools.py

Eight runs each ask an async model (a stand-in for an async SDK client) for a quote; the
model calls two async tools: `exchange_rate` (read-only, awaits a slow "API" for 0.5 s) and
`book_quote` (a non-idempotent write, fenced, that hands `ctx.idempotency_key` to the "API"
as a real client would). Every coroutine runs on the process's one event loop thread, so a
worker at concurrency 8 waits on the eight rate look-ups together: the batch takes about
as long as one run, not eight. TENURE_DATABASE_URL picks the database (default
sqlite:///async_tools.db).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import tenure
from tenure import RunRequest, RunStatus, ToolContext, ToolEffect
from tenure.providers import ModelCall, ModelReply, ToolCall

RUNS = 8
API_SECONDS = 0.5

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///async_tools.db"))
booked: dict[str, float] = {}  # the "booking API": one quote per idempotency key


@rt.tool(timeout=10)
async def exchange_rate(currency: str) -> float:
    """The price of one unit of a currency in US dollars."""
    await asyncio.sleep(API_SECONDS)  # stands in for `await client.get(...)`
    return {"EUR": 1.08, "GBP": 1.27}.get(currency.upper(), 1.0)


@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=10)
async def book_quote(ctx: ToolContext, amount_usd: float) -> str:
    """Book a quote for an amount in US dollars."""
    ctx.raise_if_cancelled()  # the run was cancelled or taken over: write nothing
    await asyncio.sleep(0.01)
    booked.setdefault(ctx.idempotency_key, amount_usd)  # a retry would not book twice
    return f"quote {len(booked)} booked"


class QuoteModel:
    """An async provider: `complete` is a coroutine function, awaited on the same loop."""

    async def complete(self, call: ModelCall) -> ModelReply:
        await asyncio.sleep(0.01)  # stands in for `await client.messages.create(...)`
        # A tool result reaches the model as JSON: {"result": …} (or {"error": …}).
        results = [json.loads(m["content"]) for m in call.messages if m["role"] == "tool"]
        if not results:
            return ModelReply(None, (ToolCall("rate", "exchange_rate", {"currency": "EUR"}),))
        if len(results) == 1:
            amount = round(100 * float(results[0]["result"]), 2)
            return ModelReply(None, (ToolCall("book", "book_quote", {"amount_usd": amount}),))
        return ModelReply(f"100 EUR is quoted; {results[1]['result']}")


rt.add_model("quotes", QuoteModel())


def main() -> int:
    requests = [
        RunRequest(prompt="Quote 100 EUR", model="quotes", tools=["exchange_rate", "book_quote"])
        for _ in range(RUNS)
    ]
    run_ids = rt.enqueue_many(requests)
    started = time.monotonic()
    rt.work(concurrency=RUNS, burst=True, poll_interval=0.02)
    took = time.monotonic() - started
    runs = [rt.status(run_id) for run_id in run_ids]
    completed = sum(1 for run in runs if run is not None and run.status is RunStatus.COMPLETED)
    print(f"{completed} of {RUNS} runs completed in {took:.1f} s")
    print(f"quotes booked: {len(booked)}")
    return 0 if completed == RUNS else 1


if __name__ == "__main__":
    raise SystemExit(main())
