"""The demo workload against any OpenAI-compatible base URL: a real (local) model, or a fake.

    python bench/base_url.py --base-url http://127.0.0.1:8080/v1 --model local --runs 20

Each run is one of the demo's prompts ("Handle order o0001 for customer c042") with its
three tools — a read, an idempotent write, a non-idempotent write — answered by the model at
`--base-url` instead of the demo's script; `--concurrency` runs at once on one worker, on a
SQLite file in a temporary directory (or `--database URL`). Prints a Markdown table: runs by
outcome, wall time, run latency (median, p95), tokens and tool calls. What a model does with
the prompts is its own business: the figures say how tenure and that server behave together,
not how good the model is. Nothing is downloaded; nothing is left behind.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import tenure
from tenure import EventKind, RunRequest, ToolContext, ToolEffect
from tenure.demo._workload import workload
from tenure.providers import OpenAICompatible


def build(database: str, base_url: str, model: str, api_key: str, stream: bool) -> Any:
    rt = tenure.Runtime(database)
    rt.add_model(
        "endpoint",
        OpenAICompatible(
            model=model, base_url=base_url, api_key=api_key, timeout=120.0, stream=stream
        ),
    )
    orders: dict[str, str] = {}
    ledger: list[str] = []

    @rt.tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Read an order: its status and amount."""
        return {"order_id": order_id, "status": orders.get(order_id, "open"), "amount": 1200}

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def set_order_status(order_id: str, status: str) -> str:
        """Set an order's status (setting it again changes nothing)."""
        orders[order_id] = status
        return status

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def send_invoice(ctx: ToolContext, customer_id: str, amount_cents: int) -> str:
        """Send an invoice (every call is a new one)."""
        ledger.append(ctx.idempotency_key)
        return f"invoice {len(ledger)}"

    return rt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="local")
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--stream", action="store_true", help="stream the answers (SSE)")
    parser.add_argument("--database", help="default: a SQLite file in a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        database = args.database or f"sqlite:///{Path(tmp) / 'bench.db'}"
        rt = build(database, args.base_url, args.model, args.api_key, args.stream)
        try:
            ids = [
                rt.enqueue(RunRequest(prompt=r.prompt, model="endpoint", tools=r.tools))
                for r in workload(args.runs)
            ]
            started = time.monotonic()
            rt.work(concurrency=args.concurrency, burst=True)
            wall = time.monotonic() - started
            report(rt, ids, wall, args)
        finally:
            rt.close()


def report(rt: tenure.Runtime, ids: list[str], wall: float, args: argparse.Namespace) -> None:
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    tokens_in = tokens_out = tools = 0
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None
        outcomes[str(run.status)] += 1
        latencies.append((run.updated_at - run.created_at).total_seconds())
        for event in rt.events(run_id):
            if event.kind is EventKind.LLM:
                usage = event.payload.get("usage", {})
                tokens_in += int(usage.get("input_tokens", 0))
                tokens_out += int(usage.get("output_tokens", 0))
            elif event.kind is EventKind.TOOL:
                tools += 1
    p95 = sorted(latencies)[max(0, round(0.95 * len(latencies)) - 1)]
    print(f"# the demo workload against {args.base_url} (model {args.model})\n")
    print(
        "| system | runs | outcomes | wall s | run median s | run p95 s | tokens in/out "
        "| tool calls |"
    )
    print("|---|---|---|---|---|---|---|---|")
    shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    print(
        f"| tenure | {len(ids)} | {shown} | {wall:.2f} | {statistics.median(latencies):.2f} "
        f"| {p95:.2f} | {tokens_in}/{tokens_out} | {tools} |"
    )


if __name__ == "__main__":
    main()
