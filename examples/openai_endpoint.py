"""An agent on a real OpenAI-compatible endpoint, chosen by environment variables.

    OPENAI_API_KEY=sk-... python examples/openai_endpoint.py
    OPENAI_BASE_URL=http://localhost:11434/v1 TENURE_MODEL=qwen2.5 \
        python examples/openai_endpoint.py

OPENAI_BASE_URL (default: OpenAI itself), OPENAI_API_KEY (a local server needs none) and
TENURE_MODEL (default gpt-4.1-mini) pick the endpoint; TENURE_DATABASE_URL the database
(default sqlite:///endpoint.db). The model may call one read-only tool; its answer is printed.
A failure is classified (rate limit, server error, auth …) and a retryable one is retried with
backoff by the worker, like any other run.
"""

from __future__ import annotations

import os
import sys

import tenure
from tenure import RunRequest, RunStatus
from tenure.providers import OpenAICompatible

rt = tenure.Runtime(os.environ.get("TENURE_DATABASE_URL", "sqlite:///endpoint.db"))
rt.add_model(
    "default",
    OpenAICompatible(model=os.environ.get("TENURE_MODEL", "gpt-4.1-mini"), timeout=60.0),
)

FORECASTS = {"oslo": "light snow, -3 °C", "lisbon": "sunny, 18 °C"}


@rt.tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return FORECASTS.get(city.lower(), "no forecast for that city")


def main(prompt: str = "What is the weather in Oslo today?") -> int:
    run_id = rt.enqueue(RunRequest(prompt=prompt, tools=["weather"]))
    rt.work(concurrency=1, burst=True)
    run = rt.status(run_id)
    assert run is not None
    if run.status is not RunStatus.COMPLETED:
        print(
            f"run {run_id}: {run.status} ({run.termination_reason}): {run.error}", file=sys.stderr
        )
        return 1
    print(run.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:2]))
