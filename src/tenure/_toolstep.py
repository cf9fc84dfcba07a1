"""The built-in loop's tool step (SPEC §6 steps 4 and 5): a model's call of a tool, run
through `Steps.fenced_call` (fenced when it writes), and its `tool` event."""

from __future__ import annotations

import time
from typing import Any

from tenure import _json
from tenure._steps import Steps
from tenure._types import EventKind, ToolEffect
from tenure.agent import _human
from tenure.agent._journal import Journal, PendingCall, idempotency_key
from tenure.agent._tools import InvalidArguments, Tool
from tenure.store._base import NewEvent

__all__ = ["tool_event", "tool_step"]


def tool_step(
    steps: Steps,
    tool: Tool | None,
    journal: Journal,
    pending: PendingCall,
    decision: str | None,
    approve_writes: bool,
) -> None:
    """Run one pending call of the model's last turn and record its result. `tool` is the
    call's tool if the run may use it and this process has it."""
    call = pending.call
    effect = tool.effect if tool else ToolEffect.NON_IDEMPOTENT_WRITE
    key = idempotency_key(steps.run_id, pending.llm_sequence, pending.index)
    started = time.monotonic()
    result: Any = None
    error: str | None = None
    ran = False
    refusal = _human.refusal(journal, pending, tool, approve_writes)
    if tool is None:
        error = f"tool {call.name!r} is not available to this run"
    elif refusal is not None:
        error = refusal
    else:
        args = _human.with_input(pending, tool, decision)
        try:
            values = tool.validate(args)
        except InvalidArguments as exc:
            error = str(exc)
        else:
            ran = True
            where = {"turn": pending.llm_sequence, "index": pending.index}
            result, error = steps.fenced_call(
                tool, args, key, where, lambda context: tool.call(context, values)
            )
    event = tool_event(pending, effect, key, result, error, started)
    if ran and effect.is_write:
        steps.record_written(call.name, event)
    else:
        steps.record([event])
    journal.add_result(call.id, result, None if error is None else _json.json_safe(error))


def tool_event(
    pending: PendingCall,
    effect: ToolEffect,
    key: str,
    result: Any,
    error: str | None,
    started: float,
    **extra: Any,
) -> NewEvent:
    """The `tool` event of a call (SPEC §14), paired with its call by turn and position."""
    call = pending.call
    payload = {
        "name": call.name,
        "call_id": call.id,
        "turn": pending.llm_sequence,
        "index": pending.index,
        "args": call.args,
        "effect": str(effect),
        "result": result,
        "error": error,
        "idempotency_key": key,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        **extra,
    }
    return NewEvent(EventKind.TOOL, payload)
