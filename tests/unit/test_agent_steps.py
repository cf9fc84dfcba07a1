"""How an agent function's run reads to people (`tenure.agent._runviews`): its steps by position
as replay reads them, a damaged or odd event never taking a listing down, and an input
schema's parameters in words."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tenure import Event, EventKind
from tenure.agent._runviews import agent_call, agent_steps, parameters, type_name

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _event(sequence: int, kind: EventKind, payload: dict[str, Any], **extra: Any) -> Event:
    return Event("r", sequence, 0, kind, payload, AT, **extra)


def test_the_first_event_at_a_position_is_the_step() -> None:
    parked = {"position": 1, "step": "sleep", "name": "sleep", "until": "later", "parked": True}
    events = [
        _event(0, EventKind.REQUEST, {"agent": "triage", "input": {"a": 1}}),
        _event(1, EventKind.STEP, {"position": 0, "step": "now", "name": "now", "result": "t"}),
        _event(2, EventKind.SLEEPING, parked),
        _event(3, EventKind.SLEEPING, {**parked, "parked": False}),  # the park seen again
        _event(4, EventKind.STEP, {"position": True, "step": "now", "name": "now"}),
        _event(5, EventKind.STEP, {"damaged": "not JSON"}, damaged="not JSON"),
        _event(6, EventKind.TOOL, {"name": "charge", "call_id": "c1"}),  # the built-in loop's
    ]
    steps = agent_steps(events)
    assert [(s.position, s.step, s.name, s.sequence) for s in steps] == [
        (0, "now", "now", 1),
        (1, "sleep", "sleep", 2),
    ]
    assert steps[1].summary() == "until later (parked in the queue)"


def test_a_model_step_reads_as_what_it_said_or_asked_for() -> None:
    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "1", "function": {"name": "lookup", "arguments": "{}"}}],
    }
    events = [
        _event(1, EventKind.LLM, {"position": 0, "step": "model", "name": "m", "message": asked}),
        _event(2, EventKind.LLM, {"position": 1, "step": "model", "name": "m", "message": 7}),
    ]
    assert [s.summary() for s in agent_steps(events)] == ["asked for lookup", ""]


def test_the_agent_a_run_calls() -> None:
    call = agent_call(_event(0, EventKind.REQUEST, {"agent": "triage", "input": {"a": 1}}))
    assert call is not None and (call.agent, call.input) == ("triage", {"a": 1})
    assert agent_call(_event(0, EventKind.REQUEST, {"prompt": "hi"})) is None
    assert agent_call(_event(0, EventKind.REQUEST, {"damaged": "x"}, damaged="x")) is None
    assert agent_call(_event(1, EventKind.CLAIMED, {"agent": "triage"})) is None
    assert agent_call(None) is None


def test_parameters_of_an_input_schema_in_words() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ticket": {"type": "string", "description": "its id"},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "mode": {"enum": ["fast", "slow"], "default": "fast"},
            "address": {"$ref": "#/$defs/Address"},
            "anything": {},
        },
        "required": ["ticket", "address"],
    }
    found = {p.name: p for p in parameters(schema)}
    assert [(p.name, p.type, p.required) for p in found.values()] == [
        ("ticket", "string", True),
        ("tags", "array of string | null", False),
        ("mode", 'one of "fast", "slow"', False),
        ("address", "Address", True),
        ("anything", "any", False),
    ]
    assert (found["mode"].has_default, found["mode"].default) == (True, "fast")
    assert found["ticket"].description == "its id"
    assert parameters("not a schema") == [] and parameters({"properties": 3}) == []
    assert type_name({"type": ["string", "integer"]}) == "string | integer"
