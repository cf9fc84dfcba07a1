"""An agent function's run as people read it (SPEC §20): the function's name and input from
its `request` event, and its steps by position from its journal. No I/O: the command line,
the API and the dashboard hand the events in and decide what they may show.

A step is the first event recorded at its position, as replay reads it (`StepLog.rebuild`):
a later event at a position (the `sleeping` event of a parked sleep seen again) adds
nothing to it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenure._types import Event, EventKind

# The events an agent function's step is recorded as.
STEP_EVENTS = frozenset({EventKind.LLM, EventKind.TOOL, EventKind.STEP, EventKind.SLEEPING})


@dataclass(frozen=True)
class AgentCall:
    """What an agent function's run was asked: the function's name and its input."""

    agent: str
    input: Any


def agent_call(request: Event | Mapping[str, Any] | None) -> AgentCall | None:
    """The agent function a run calls, from its `request` event (or the request's JSON);
    None for a built-in run, or a request that cannot be read."""
    if isinstance(request, Event):
        if request.kind is not EventKind.REQUEST or request.damaged is not None:
            return None
        request = request.payload
    if not isinstance(request, Mapping):
        return None
    agent = request.get("agent")
    if not isinstance(agent, str) or not agent:
        return None
    return AgentCall(agent, request.get("input"))


@dataclass(frozen=True)
class AgentStep:
    """One step of an agent function's run, as its journal holds it."""

    position: int
    step: str  # model, tool, step, now, uuid, random, patched, approve, input, sleep
    name: str
    sequence: int
    attempt: int
    at: datetime
    result: Any
    error: str | None
    effect: str | None  # a tool's or a `ctx.step` function's
    duration_ms: float | None
    idempotency_key: str | None

    @property
    def is_write(self) -> bool:
        return self.effect in ("idempotent_write", "non_idempotent_write")

    def summary(self, width: int = 120) -> str:
        """The step's outcome in one line: its error, or its result."""
        if self.error is not None:
            return clip(f"error: {self.error}", width)
        return clip(result_text(self.result), width)

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "step": self.step,
            "name": self.name,
            "sequence": self.sequence,
            "attempt": self.attempt,
            "created_at": self.at.isoformat(),
            "result": self.result,
            "error": self.error,
            "effect": self.effect,
            "duration_ms": self.duration_ms,
            "idempotency_key": self.idempotency_key,
        }


def agent_steps(events: Iterable[Event]) -> list[AgentStep]:
    """The steps of an agent function's run by position (empty for a built-in run)."""
    steps: dict[int, AgentStep] = {}
    for event in events:
        if event.kind not in STEP_EVENTS or event.damaged is not None:
            continue
        p = event.payload
        position = p.get("position")
        if isinstance(position, bool) or not isinstance(position, int) or position in steps:
            continue
        steps[position] = _step(event, position, p)
    return [steps[p] for p in sorted(steps)]


def _step(event: Event, position: int, p: Mapping[str, Any]) -> AgentStep:
    kind = str(p.get("step") or ("sleep" if event.kind is EventKind.SLEEPING else event.kind))
    error = p.get("error")
    duration = p.get("duration_ms")
    effect = p.get("effect")
    key = p.get("idempotency_key")
    return AgentStep(
        position=position,
        step=kind,
        name=str(p.get("name", "")),
        sequence=event.sequence,
        attempt=event.attempt,
        at=event.created_at,
        result=_result(event, p),
        error=None if error is None else str(error),
        effect=str(effect) if effect else None,
        duration_ms=float(duration)
        if isinstance(duration, int | float) and not isinstance(duration, bool)
        else None,
        idempotency_key=str(key) if key else None,
    )


def _result(event: Event, p: Mapping[str, Any]) -> Any:
    if event.kind is EventKind.LLM:
        return model_said(p.get("message"))
    if event.kind is EventKind.SLEEPING:
        parked = " (parked in the queue)" if p.get("parked") else ""
        return f"until {p.get('until')}{parked}"
    return p.get("result")


def model_said(message: Any) -> str:
    """A model step's reply in words: the tools it asked for, or its text."""
    if not isinstance(message, Mapping):
        return ""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        names = [
            str((c.get("function") or {}).get("name")) if isinstance(c, Mapping) else "?"
            for c in calls
        ]
        return "asked for " + ", ".join(names)
    content = message.get("content")
    return "" if content is None else str(content)


def result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- input schemas -------------------------------------------------------------------------


@dataclass(frozen=True)
class Parameter:
    """One parameter of an agent function's input schema, as a person reads it."""

    name: str
    type: str
    required: bool
    default: Any
    description: str
    has_default: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default": self.default,
            "description": self.description,
        }


def parameters(schema: Any) -> list[Parameter]:
    """The properties of an object's JSON schema, in their order."""
    if not isinstance(schema, Mapping):
        return []
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return []
    required = set(schema.get("required") or [])
    defs = schema.get("$defs") if isinstance(schema.get("$defs"), Mapping) else {}
    out = []
    for name, spec in props.items():
        spec = spec if isinstance(spec, Mapping) else {}
        out.append(
            Parameter(
                name=str(name),
                type=type_name(spec, defs),
                required=name in required,
                default=spec.get("default"),
                description=str(spec.get("description", "")),
                has_default="default" in spec,
            )
        )
    return out


def type_name(spec: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> str:
    """A JSON schema's type in a few words: `string`, `integer | null`, `array of string`,
    `one of "a", "b"`, or a named model's name."""
    if "enum" in spec and isinstance(spec["enum"], list):
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"])
    if "const" in spec:
        return json.dumps(spec["const"], ensure_ascii=False)
    ref = spec.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list) and options:
            return " | ".join(
                type_name(o, defs) if isinstance(o, Mapping) else "?" for o in options
            )
    kind = spec.get("type")
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    if kind == "array":
        items = spec.get("items")
        return "array of " + type_name(items, defs) if isinstance(items, Mapping) else "array"
    if isinstance(kind, str):
        return kind
    return "any"
