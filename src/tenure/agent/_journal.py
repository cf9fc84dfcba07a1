"""The transcript of a run rebuilt from its events (SPEC §8: journal resume).

A new segment continues from the first step that has no event: tool calls of the last
recorded model turn that have no `tool` event yet are executed, then the model is called.
Completed steps are never executed again.

A `tool` event names its call by position — the sequence of the model turn that made it and
the call's index in that turn — because a provider's call id need not be unique within a
turn. Events written before positions were recorded are matched by call id, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tenure import _json
from tenure._types import Event, EventKind, RunRequest, Usage
from tenure.providers._base import ModelReply, ToolCall
from tenure.store._base import NO_USAGE


@dataclass(frozen=True)
class PendingCall:
    call: ToolCall
    llm_sequence: int
    index: int


def idempotency_key(run_id: str, llm_sequence: int, index: int) -> str:
    """`RUN_ID:SEQUENCE` of the model turn that made the call (`.INDEX` past its first call).

    The same on every attempt, because the model turn's event never moves.
    """
    return f"{run_id}:{llm_sequence}" if index == 0 else f"{run_id}:{llm_sequence}.{index}"


def tool_message(call_id: str, result: Any, error: str | None) -> dict[str, Any]:
    content = {"error": error} if error is not None else {"result": result}
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": json.dumps(content, default=str, ensure_ascii=False),
    }


@dataclass
class Journal:
    messages: list[dict[str, Any]]
    answers: int = 0
    usage: Usage = NO_USAGE  # frozen: shared, and replaced by `+=`
    pending: list[PendingCall] = field(default_factory=list)
    # A person's decisions, by the sequence of the model turn they decided.
    approvals: dict[int, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def rebuild(cls, request: RunRequest, events: Iterable[Event]) -> Journal:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": request.prompt})
        journal = cls(messages)
        for event in events:
            if event.kind is EventKind.LLM:
                journal._add_turn(event.sequence, event.payload["message"])
                journal.usage += Usage(**event.payload.get("usage", {}))
            elif event.kind is EventKind.TOOL:
                p = event.payload
                position = _position(p)
                journal.add_result(p["call_id"], p.get("result"), p.get("error"), position)
            elif event.kind is EventKind.APPROVAL and "turn" in event.payload:
                journal.approvals[event.payload["turn"]] = event.payload
            elif event.kind is EventKind.INPUT and "turn" in event.payload:
                journal.inputs[event.payload["turn"]] = event.payload
        return journal

    def _add_turn(self, sequence: int, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.answers += 1
        self.pending = [
            PendingCall(
                ToolCall(
                    id=c["id"],
                    name=c["function"]["name"],
                    args=json.loads(c["function"]["arguments"] or "{}"),
                ),
                sequence,
                i,
            )
            for i, c in enumerate(message.get("tool_calls") or [])
        ]

    def add_answer(self, sequence: int, reply: ModelReply) -> None:
        # As the `llm` event stores it: a resumed run reads this message back from there.
        self._add_turn(sequence, _json.json_safe(reply.message()))
        self.usage += reply.usage

    def add_result(
        self,
        call_id: str,
        result: Any,
        error: str | None,
        position: tuple[int, int] | None = None,
    ) -> None:
        """Record a call's result; `position` is (model turn's sequence, index in the turn).

        Without a position the first pending call with that id is the one answered: calls of
        a turn run in order, so it is the earliest one not yet answered.
        """
        self.messages.append(tool_message(call_id, result, error))
        if position is not None:
            answered = next(
                (p for p in self.pending if (p.llm_sequence, p.index) == position), None
            )
        else:
            answered = next((p for p in self.pending if p.call.id == call_id), None)
        if answered is not None:
            self.pending = [p for p in self.pending if p is not answered]


def _position(payload: dict[str, Any]) -> tuple[int, int] | None:
    turn, index = payload.get("turn"), payload.get("index")
    if isinstance(turn, int) and isinstance(index, int):
        return turn, index
    return None  # an event written before positions were recorded
