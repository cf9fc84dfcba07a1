"""Why a held call was made, as the person deciding it reads it (no I/O here).

Two refunds of different orders look alike by their calls alone; what tells them apart is the
run's prompt and what the model said in the turn that asked for the calls. Both are content
written by people or models, shown to whoever decides, like the held calls' arguments, except
when the run has called a tool declared `sensitive`: the held turn's (whose arguments are
hidden) or an earlier turn's (the model's words may repeat what that tool was given or
returned, and the prompt may carry what it was for). Then both are HIDDEN, with the reason.
How long the run has waited is structure: always shown.

Whatever of a row cannot be read (an event that is damaged, a request that is not an object,
a waiting record that cannot be decoded) is named in `damaged`; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenure._types import Event, EventKind, Run

HIDDEN = "<hidden>"


@dataclass(frozen=True)
class HeldContext:
    """What a waiting run's held calls were asked for in, and how long it has waited.

    `prompt` and `model_text` are None where they cannot be read (`damaged` says why) and
    HIDDEN where `hidden` gives the reason; `model_text` is "" when the model said nothing
    before its calls. `waited_seconds` is by the database's clock."""

    prompt: str | None
    model_text: str | None
    waiting_since: datetime | None
    waited_seconds: float | None
    hidden: str = ""
    damaged: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "model_text": self.model_text,
            "waiting_since": self.waiting_since.isoformat() if self.waiting_since else None,
            "waited_seconds": self.waited_seconds,
            "hidden": self.hidden or None,
            "damaged": self.damaged or None,
        }


def held_context(
    run: Run,
    events: Iterable[Event],
    now: datetime,
    *,
    declared_sensitive: Callable[[str], bool],
    reveal: bool = False,
) -> HeldContext:
    """The context of `run`'s held turn, read from its stored request (`run.request`), else
    its `request` event, and from its journal's `llm` event of the held turn.

    `declared_sensitive(tool)` says whether this process declares the tool sensitive; a held
    call is sensitive too when its record says so or does not say that it is not."""
    events = list(events)
    damaged: list[str] = []
    waiting = run.waiting if isinstance(run.waiting, Mapping) else None
    turn = waiting.get("turn") if waiting is not None else None
    if not isinstance(turn, int) or isinstance(turn, bool):
        turn = None
        damaged.append("the held calls cannot be read (the run's waiting record is damaged)")
    prompt = _prompt(run.request, events, damaged)
    if turn is None:
        model_text = None
    elif _is_agent_run(run.request, events):
        model_text = _agent_model_text(events, turn, damaged)
    else:
        model_text = _model_text(events, turn, damaged)
    hidden = _hidden(waiting, events, declared_sensitive)
    since, waited = _waited(run, now, damaged)
    if hidden and not reveal:
        prompt = model_text = HIDDEN
    return HeldContext(
        prompt, model_text, since, waited, "" if reveal else hidden, "; ".join(damaged)
    )


def _prompt(request: Any, events: list[Event], damaged: list[str]) -> str | None:
    # A waiting run keeps its request; its `request` event (sequence 0) says the same, and
    # stands in for a stored request that cannot be read.
    if isinstance(request, Mapping) and isinstance(request.get("prompt"), str):
        return str(request["prompt"])
    first = next((e for e in events if e.kind is EventKind.REQUEST), None)
    if first is not None and isinstance(first.payload.get("prompt"), str):
        return str(first.payload["prompt"])
    why = first.damaged if first is not None and first.damaged else "no prompt recorded"
    damaged.append(f"the prompt cannot be read ({why})")
    return None


def _model_text(events: list[Event], turn: int, damaged: list[str]) -> str | None:
    event = next((e for e in events if e.sequence == turn), None)
    if event is None or event.kind is not EventKind.LLM:
        damaged.append(f"the model's turn (event {turn}) is not in the journal")
        return None
    message = event.payload.get("message")
    text = _text(message.get("content")) if isinstance(message, Mapping) else None
    if text is None:
        why = event.damaged or "its message has no readable text"
        damaged.append(f"the model's turn (event {turn}) cannot be read ({why})")
    return text


def _is_agent_run(request: Any, events: list[Event]) -> bool:
    """An agent function's run (SPEC §20): its waiting record's `turn` is the position of the
    step that waits, not the sequence of a model turn."""
    if not isinstance(request, Mapping):
        first = next((e for e in events if e.kind is EventKind.REQUEST), None)
        request = first.payload if first is not None else None
    return isinstance(request, Mapping) and isinstance(request.get("agent"), str)


def _agent_model_text(events: list[Event], position: int, damaged: list[str]) -> str | None:
    """What the model said in the agent function's last model step before the waiting one
    ("" if it has asked the model nothing yet)."""
    last = None
    for event in events:
        at = event.payload.get("position") if event.kind is EventKind.LLM else None
        if isinstance(at, int) and not isinstance(at, bool) and at < position:
            last = event
    if last is None:
        return ""
    message = last.payload.get("message")
    text = _text(message.get("content")) if isinstance(message, Mapping) else None
    if text is None:
        damaged.append(f"the model's step (event {last.sequence}) has no readable text")
    return text


def _text(content: Any) -> str | None:
    """The text of a chat message's content: a string, nothing, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return None


def _hidden(
    waiting: Mapping[str, Any] | None,
    events: list[Event],
    declared_sensitive: Callable[[str], bool],
) -> str:
    """Why the prompt and the model's words are hidden ("" if they are not)."""
    calls = waiting.get("calls") if waiting is not None else None
    if not isinstance(calls, list):
        return "the held calls cannot be read"
    names: list[str] = []
    for call in calls:
        if not isinstance(call, Mapping):
            return "the held calls cannot be read"
        name = str(call.get("tool"))
        if call.get("sensitive", True) or declared_sensitive(name):
            names.append(name)
    for event in events:
        message = event.payload.get("message") if event.kind is EventKind.LLM else None
        asked = message.get("tool_calls") if isinstance(message, Mapping) else None
        for call in asked if isinstance(asked, list) else []:
            function = call.get("function") if isinstance(call, Mapping) else None
            called = function.get("name") if isinstance(function, Mapping) else None
            if isinstance(called, str) and declared_sensitive(called):
                names.append(called)
    if not names:
        return ""
    unique = sorted(set(names))
    return f"sensitive tool{'s' if len(unique) > 1 else ''} {', '.join(unique)}"


def _waited(run: Run, now: datetime, damaged: list[str]) -> tuple[datetime | None, float | None]:
    # A run's row is updated when it is held for a person and not again until decided (or
    # cancelled, or expired): its `updated_at` is when it began to wait.
    if run.damaged and "updated_at" in run.damaged:
        damaged.append("when it began to wait cannot be read")
        return None, None
    return run.updated_at, max(0.0, (now - run.updated_at).total_seconds())
