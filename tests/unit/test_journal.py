"""The journal pairs a tool event with its call by position, not by the provider's call id."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tenure import Event, EventKind, RunRequest
from tenure.agent._journal import Journal
from tenure.providers import ModelReply, ToolCall

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TURN = ModelReply(None, (ToolCall("dup", "a", {}), ToolCall("dup", "b", {"x": 1})))


def _event(sequence: int, kind: EventKind, payload: dict[str, Any]) -> Event:
    return Event("r", sequence, 0, kind, payload, NOW)


def _rebuild(tool_payloads: list[dict[str, Any]]) -> Journal:
    events = [_event(2, EventKind.LLM, {"message": TURN.message()})]
    events += [_event(3 + i, EventKind.TOOL, p) for i, p in enumerate(tool_payloads)]
    return Journal.rebuild(RunRequest(prompt="p", model="m", tools=["a", "b"]), events)


def test_a_result_answers_the_call_at_its_position_only() -> None:
    journal = _rebuild([{"call_id": "dup", "turn": 2, "index": 0, "result": "a"}])
    assert [(p.call.name, p.llm_sequence, p.index) for p in journal.pending] == [("b", 2, 1)]


def test_a_result_for_the_second_position_leaves_the_first_pending() -> None:
    journal = _rebuild([{"call_id": "dup", "turn": 2, "index": 1, "result": "b"}])
    assert [p.call.name for p in journal.pending] == ["a"]


def test_an_old_event_without_a_position_answers_the_first_open_call_with_its_id() -> None:
    journal = _rebuild([{"call_id": "dup", "result": "a"}])
    assert [p.call.name for p in journal.pending] == ["b"]
    journal = _rebuild([{"call_id": "dup", "result": "a"}, {"call_id": "dup", "result": "b"}])
    assert journal.pending == []
    assert [m["role"] for m in journal.messages] == ["user", "assistant", "tool", "tool"]
