"""A pydantic-ai agent through the real pydantic-ai and openai packages against the loopback
server: its requests are `llm` steps (usage and cost recorded), its tools `step` steps with
their effects, its structured output the run's output."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry

import tenure
from tenure import EventKind, InvalidRequest, Outcome
from tenure.integrations import pydantic_ai as durable
from tests.providers.conftest import Endpoint, completion


class Ticket(BaseModel):
    label: str
    order_id: str


def make_agent(seen: list[str]) -> Agent[None, Ticket]:
    agent = Agent(name="triage", output_type=Ticket, instructions="Label the ticket.")

    @agent.tool_plain
    def lookup(order_id: str) -> dict[str, Any]:
        """Read an order."""
        seen.append(order_id)
        if order_id != "o7":
            raise ModelRetry(f"no order {order_id}; orders look like o7")
        return {"order_id": order_id, "state": "paid"}

    return agent


def test_requests_tools_and_output_are_steps(
    make_runtime: Callable[..., tenure.Runtime],
    endpoint: Endpoint,
    make_provider: Callable[..., Any],
) -> None:
    endpoint.push(
        completion(calls=[("lookup", {"order_id": "7"})], usage=(100, 10)),
        completion(calls=[("lookup", {"order_id": "o7"})], usage=(120, 10)),
        completion(
            calls=[("final_result", {"label": "refund", "order_id": "o7"})], usage=(150, 20)
        ),
    )
    provider = make_provider(endpoint.url)
    provider.set_price("test-model", 1.0, 2.0)
    rt = make_runtime()
    rt.add_model("default", provider)
    seen: list[str] = []
    durable.register(rt, make_agent(seen), effects={"lookup": "read_only"})

    result = rt.run(tenure.RunRequest(agent="triage", input={"prompt": "ticket: refund 7"}))

    assert result.outcome is Outcome.COMPLETED, result.error
    assert json.loads(result.output or "") == {"label": "refund", "order_id": "o7"}
    assert seen == ["7", "o7"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (370, 40)
    assert result.usage.cost == pytest.approx((370 * 1.0 + 40 * 2.0) / 1e6)
    steps = [
        (e.kind, e.payload["position"], e.payload["name"])
        for e in rt.events(result.run_id)
        if "position" in e.payload
    ]
    assert steps == [
        (EventKind.LLM, 0, "default"),
        (EventKind.STEP, 1, "lookup"),
        (EventKind.LLM, 2, "default"),
        (EventKind.STEP, 3, "lookup"),
        (EventKind.LLM, 4, "default"),
    ]
    # The model saw the agent's tools and its output tool, and the tool's ModelRetry came
    # back to it as the answer to its call, as pydantic-ai gives it.
    first, second = endpoint.requests[0]["body"], endpoint.requests[1]["body"]
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup", "final_result"}
    assert first["messages"][0] == {"role": "system", "content": "Label the ticket."}
    retried = second["messages"][-1]
    assert retried["role"] == "tool" and "no order 7" in retried["content"]


def test_an_undeclared_tool_is_a_fenced_write_and_the_log_says_so(
    make_runtime: Callable[..., tenure.Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    rt = make_runtime()
    with caplog.at_level(logging.WARNING, logger="tenure.integrations"):
        durable.register(rt, make_agent([]))
    (record,) = caplog.records
    assert "'lookup' has no declared effect" in record.getMessage()
    assert "non_idempotent_write" in record.getMessage()
    assert "triage" in rt.agent_names


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"effects": {"lookup": "sometimes"}}, "unknown effect 'sometimes'"),
        ({"effects": {"lokup": "read_only"}}, "effects name tools it does not have: lokup"),
        ({"effects": {"lookup": "read_only"}, "probes": {"lookup": print}}, "needs no probe"),
    ],
)
def test_bad_registrations_are_refused_in_one_line(
    make_runtime: Callable[..., tenure.Runtime], kwargs: dict[str, Any], says: str
) -> None:
    rt = make_runtime()
    with pytest.raises(InvalidRequest, match=says) as caught:
        durable.register(rt, make_agent([]), **kwargs)
    assert "\n" not in str(caught.value)
    assert rt.agent_names == []
