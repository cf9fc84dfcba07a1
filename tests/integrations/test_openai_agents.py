"""An OpenAI Agents SDK agent through the real agents and openai packages against the
loopback server: its requests are `llm` steps (usage and cost recorded), its handoff and
tools `step` steps, its structured output the run's output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, GuardrailFunctionOutput, function_tool, input_guardrail
from pydantic import BaseModel

import tenure
from tenure import EventKind, InvalidRequest, Outcome
from tenure.integrations import openai_agents as durable
from tests.providers.conftest import Endpoint, completion


class Refund(BaseModel):
    order_id: str
    refunded: int


def make_triage(refunds: list[str]) -> Agent[Any]:
    @function_tool
    def refund(order_id: str, amount: int) -> str:
        """Refund an order."""
        step = durable.step_context()
        assert step is not None
        refunds.append(step.idempotency_key)
        return f"refunded {amount}"

    billing = Agent(
        name="Billing desk", instructions="Refund orders.", tools=[refund], output_type=Refund
    )
    return Agent(name="triage", instructions="Route the ticket.", handoffs=[billing])


def test_requests_handoffs_tools_and_output_are_steps(
    make_runtime: Callable[..., tenure.Runtime],
    endpoint: Endpoint,
    make_provider: Callable[..., Any],
) -> None:
    endpoint.push(
        completion(calls=[("transfer_to_billing_desk", {})], usage=(100, 10)),
        completion(calls=[("refund", {"order_id": "o7", "amount": 700})], usage=(120, 10)),
        completion(json.dumps({"order_id": "o7", "refunded": 700}), usage=(150, 20)),
    )
    provider = make_provider(endpoint.url)
    provider.set_price("test-model", 1.0, 2.0)
    rt = make_runtime()
    rt.add_model("default", provider)
    refunds: list[str] = []
    durable.register(rt, make_triage(refunds), effects={"refund": "non_idempotent_write"})

    result = rt.run(tenure.RunRequest(agent="triage", input={"prompt": "refund order o7"}))

    assert result.outcome is Outcome.COMPLETED, result.error
    assert json.loads(result.output or "") == {"order_id": "o7", "refunded": 700}
    assert refunds == [f"{result.run_id}:3"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (370, 40)
    assert result.usage.cost == pytest.approx((370 * 1.0 + 40 * 2.0) / 1e6)
    steps = [
        (e.kind, e.payload["position"], e.payload["name"], e.payload.get("result"))
        for e in rt.events(result.run_id)
        if "position" in e.payload
    ]
    assert [s[:3] for s in steps] == [
        (EventKind.LLM, 0, "default"),
        (EventKind.STEP, 1, "handoff-Billing_desk"),
        (EventKind.LLM, 2, "default"),
        (EventKind.STEP, 3, "refund"),
        (EventKind.LLM, 4, "default"),
    ]
    assert steps[1][3] == "Billing desk" and steps[3][3] == "refunded 700"
    first, second = endpoint.requests[0]["body"], endpoint.requests[1]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ["transfer_to_billing_desk"]
    assert [t["function"]["name"] for t in second["tools"]] == ["refund"]
    assert second["messages"][0] == {"role": "system", "content": "Refund orders."}


def test_an_effect_for_a_tool_no_agent_has_is_refused(
    make_runtime: Callable[..., tenure.Runtime],
) -> None:
    rt = make_runtime()
    with pytest.raises(InvalidRequest, match="effects name tools it does not have: refnd"):
        durable.register(rt, make_triage([]), effects={"refnd": "read_only"})
    assert rt.agent_names == []


def test_guardrails_are_steps_that_run_once_and_a_tripwire_stops_before_the_model(
    make_runtime: Callable[..., tenure.Runtime],
) -> None:
    checked: list[str] = []

    @input_guardrail
    def no_secrets(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
        text = given if isinstance(given, str) else json.dumps(given)
        checked.append(text)
        return GuardrailFunctionOutput({"length": len(text)}, "password" in text)

    guarded = Agent(name="guarded", instructions="Answer.", input_guardrails=[no_secrets])
    rt = make_runtime()
    rt.add_model("default", tenure.providers.Scripted())
    durable.register(rt, guarded)

    ok = rt.run(
        tenure.RunRequest(agent="guarded", input={"prompt": "hello"}, script=[{"say": "hi"}])
    )
    assert ok.outcome is Outcome.COMPLETED, ok.error
    steps = [
        (e.payload["name"], e.payload.get("result"))
        for e in rt.events(ok.run_id)
        if "position" in e.payload
    ]
    verdict = {"output_info": {"length": 5}, "tripwire_triggered": False}
    assert steps[0] == ("guardrail-no_secrets", verdict)
    assert [name for name, _ in steps] == ["guardrail-no_secrets", "default"]

    stopped = rt.run(
        tenure.RunRequest(
            agent="guarded", input={"prompt": "my password is x"}, script=[{"say": "hi"}]
        )
    )
    assert stopped.outcome is Outcome.FAILED
    assert "InputGuardrailTripwireTriggered" in str(stopped.error)
    names = [e.payload["name"] for e in rt.events(stopped.run_id) if "position" in e.payload]
    assert names == ["guardrail-no_secrets"]  # the model was never asked
    assert len(checked) == 2
