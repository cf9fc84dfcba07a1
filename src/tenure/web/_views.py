"""What the API and the dashboard show, computed from runs and events (no I/O here).

Content written by people or models (prompts, answers, tool arguments and results, submitted
values, notes) is replaced by HIDDEN unless the caller asked to reveal it; the structure of a
run (kinds, tools, effects, leases, tokens, errors, timings) is always shown. Which payload
keys are structure is an allowlist per event kind, so a key added later starts out hidden.

The calls a waiting run holds are the exception: a person asked to approve a call must see
what it does, so their arguments are shown unless the tool is declared `sensitive`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenure._types import (
    DEAD_LETTER_REASONS,
    Event,
    EventKind,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.agent._runviews import AgentCall, AgentStep, agent_steps

HIDDEN = "<hidden>"

_LIFECYCLE = {
    EventKind.CLAIMED,
    EventKind.REQUEUED,
    EventKind.DEAD_LETTERED,
    EventKind.CANCELLED,
    EventKind.REDRIVEN,
    EventKind.THROTTLED,
    EventKind.FORKED,  # where it came from, and the keys of the writes it repeats: no content
}
# Structural payload keys shown without reveal, per event kind.
_SHOWN: dict[str, frozenset[str]] = {
    # An agent function's name is code, like a tool's; its input is content, like a prompt.
    EventKind.REQUEST: frozenset(
        {
            "model",
            "tools",
            "max_iterations",
            "queue",
            "idempotency_key",
            "max_tokens",
            "max_cost",
            "agent",
        }
    ),
    # An agent function's step: where it is (position), what (step) and which (name) are
    # code; its arguments, result and the digest of its arguments are content.
    EventKind.LLM: frozenset({"model", "usage", "position", "step", "name"}),
    EventKind.TOOL: frozenset(
        {
            "name",
            "call_id",
            "effect",
            "error",
            "idempotency_key",
            "duration_ms",
            "resolved_by",
            "position",
            "step",
        }
    ),
    EventKind.STEP: frozenset(
        {"position", "step", "name", "effect", "error", "idempotency_key", "duration_ms"}
    ),
    EventKind.SLEEPING: frozenset({"position", "step", "name", "until", "parked"}),
    EventKind.ASSEMBLED: frozenset(),
    # The probe's verdict is structure; its result and reason may carry content.
    EventKind.PROBE: frozenset({"name", "idempotency_key", "verdict", "duration_ms"}),
}
_SHOWN_ELSEWHERE = frozenset(
    {"call_id", "call_ids", "tool", "tools", "kind", "effect", "approved", "decided_by",
     "submitted_by", "by", "execute", "reason", "cause", "deadline", "turn", "keys"}
)  # fmt: skip


def _hide_message(message: Any) -> Any:
    """A model turn with its text and call arguments hidden, its tool names kept."""
    if not isinstance(message, dict):
        return HIDDEN
    out: dict[str, Any] = {"role": message.get("role"), "content": HIDDEN}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": c.get("type"),
                "function": {"name": (c.get("function") or {}).get("name"), "arguments": HIDDEN},
            }
            if isinstance(c, dict)
            else HIDDEN
            for c in calls
        ]
    return out


def hide_payload(kind: EventKind | str, payload: Mapping[str, Any]) -> dict[str, Any]:
    if kind in _LIFECYCLE:
        return dict(payload)
    shown = _SHOWN.get(kind, _SHOWN_ELSEWHERE)
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key in shown:
            out[key] = value
        elif kind == EventKind.LLM and key == "message":
            out[key] = _hide_message(value)
        else:
            out[key] = HIDDEN
    return out


def event_json(event: Event, *, reveal: bool) -> dict[str, Any]:
    data = event.to_json()
    if not reveal:
        data["payload"] = hide_payload(event.kind, event.payload)
    return data


def _hide_held(call: Any) -> Any:
    """A held call's arguments stay in sight unless its tool is sensitive (or the record
    does not say that it is not)."""
    if not isinstance(call, dict) or "args" not in call:
        return call
    return call if call.get("sensitive") is False else {**call, "args": HIDDEN}


def _hide_waiting(waiting: Any) -> Any:
    if not isinstance(waiting, dict):
        return waiting
    out = dict(waiting)
    for key in ("calls", "pending"):
        calls = out.get(key)
        if isinstance(calls, list):
            out[key] = [_hide_held(c) for c in calls]
    for key in ("message", "turn"):
        if key in out:
            out[key] = _hide_message(out[key])
    return out


def run_json(run: Run, *, reveal: bool, call: AgentCall | None = None) -> dict[str, Any]:
    """A run's row; `agent` and `input` are its agent function's name and input (null for a
    run of the built-in loop)."""
    data = run.to_json()
    data.pop("request", None)
    data["agent"] = call.agent if call is not None else None
    data["input"] = call.input if call is not None else None
    if not reveal:
        if data["input"] is not None:
            data["input"] = HIDDEN
        if data.get("output") is not None:
            data["output"] = HIDDEN
        if data.get("waiting") is not None:
            data["waiting"] = _hide_waiting(data["waiting"])
    return data


def tree_json(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """A tree of runs (SPEC §21), parents before children: what each node shows."""
    return [
        {
            "id": r.id,
            "parent_id": r.parent_id,
            "status": str(r.status),
            "termination_reason": str(r.termination_reason or ""),
        }
        for r in runs
    ]


def tree_rows(runs: Sequence[Run]) -> list[tuple[Run, int]]:
    """A tree of runs (parents before children) in the order it is drawn, each with its
    depth: every run directly above its own children."""
    if not runs:
        return []
    children: dict[str, list[Run]] = {}
    for r in runs[1:]:
        children.setdefault(str(r.parent_id), []).append(r)
    rows: list[tuple[Run, int]] = []
    stack = [(runs[0], 0)]
    while stack:
        run, depth = stack.pop()
        rows.append((run, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(run.id, [])))
    return rows


# -- the calls a waiting run holds -------------------------------------------------------------

# What an effect means to the person who decides, in their words.
EFFECT_WORDS: dict[str, str] = {
    ToolEffect.READ_ONLY: "reads only; changes nothing",
    ToolEffect.IDEMPOTENT_WRITE: "writes; safe to run again",
    ToolEffect.NON_IDEMPOTENT_WRITE: "writes; not safe to run twice",
}
IRREVERSIBLE = "runs once; cannot be undone by tenure"


@dataclass(frozen=True)
class HeldCall:
    """One call of a held turn, as the person who decides it reads it."""

    call_id: str
    tool: str
    effect: str
    kind: str
    args: Any
    sensitive: bool
    description: str
    input_schema: Any

    @property
    def hidden(self) -> bool:
        return isinstance(self.args, str) and self.args == HIDDEN

    @property
    def warning(self) -> str:
        return IRREVERSIBLE if self.effect == ToolEffect.NON_IDEMPOTENT_WRITE else ""

    @property
    def effect_words(self) -> str:
        return EFFECT_WORDS.get(self.effect, "")

    @property
    def rows(self) -> list[tuple[str, str]]:
        """The arguments as (name, value) rows; anything but an object is one row."""
        if isinstance(self.args, dict):
            return [(str(k), _cell(v)) for k, v in self.args.items()]
        return [("", _cell(self.args))]

    @property
    def proposed(self) -> dict[str, Any]:
        """What the model proposed for each argument, for an input form to start from; a
        sensitive tool's proposal is never put into a form."""
        if self.sensitive or not isinstance(self.args, dict):
            return {}
        return self.args

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "description": self.description,
            "effect": self.effect,
            "kind": self.kind,
            "sensitive": self.sensitive,
            "args": self.args,
            "input_schema": self.input_schema,
        }


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


def held_calls(
    calls: Iterable[Mapping[str, Any]],
    *,
    describe: Callable[[str], tuple[str, bool]],
    events: Iterable[Event] | None = None,
) -> list[HeldCall]:
    """The held calls as a person reads them.

    `describe(tool)` gives the tool's description and whether this process declares it
    sensitive; a call is sensitive when either its record or the tool says so, so a tool
    declared sensitive after the run was held is hidden too. The record keeps no sensitive
    arguments: with `events` (the caller asked to reveal them), they are read from the model's
    turn in the journal.
    """
    revealed = {call_id: args for call_id, _, args in _pending_calls(events or [])}
    out = []
    for call in calls:
        tool = str(call.get("tool"))
        description, declared = describe(tool)
        sensitive = bool(call.get("sensitive", True)) or declared
        args = call.get("args")
        if sensitive:
            args = revealed.get(str(call.get("call_id")), HIDDEN) if events is not None else HIDDEN
        out.append(
            HeldCall(
                call_id=str(call.get("call_id")),
                tool=tool,
                effect=str(call.get("effect") or ""),
                kind=str(call.get("kind") or "none"),
                args=args,
                sensitive=sensitive,
                description=description,
                input_schema=call.get("input_schema"),
            )
        )
    return out


# -- counts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    by_status: dict[str, int]
    by_reason: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def dead_letters(self) -> int:
        return sum(self.by_reason.get(str(r), 0) for r in DEAD_LETTER_REASONS)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "dead_letters": self.dead_letters,
            "by_status": self.by_status,
            "by_reason": self.by_reason,
        }


def counts(raw: Mapping[tuple[RunStatus, TerminationReason | None], int]) -> Counts:
    by_status = {str(s): 0 for s in RunStatus}
    by_reason = {str(r): 0 for r in TerminationReason}
    for (status, reason), n in raw.items():
        by_status[str(status)] += n
        if reason is not None:
            by_reason[str(reason)] += n
    return Counts(by_status, by_reason)


# -- the timeline ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One row of a run's timeline."""

    sequence: int
    attempt: int
    lease_token: int
    kind: str
    at: datetime
    title: str
    effect: str = ""
    error: str = ""
    detail: str = ""
    duration_ms: float | None = None
    segment_start: bool = False


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _requeued_title(event: Event, payload: dict[str, Any]) -> str:
    cause = payload.get("cause", "?")
    delay = payload.get("delay")
    wait = f", retry in {delay:g}s" if isinstance(delay, int | float) else ""
    # A step past its deadline: which step, and its deadline (SPEC §15).
    deadline = cause == "step_deadline" or payload.get("step_deadline") is True
    why = f": {payload['why']}" if deadline and isinstance(payload.get("why"), str) else ""
    return f"requeued ({cause}{wait}){why}"


def _llm_title(event: Event, payload: dict[str, Any]) -> str:
    message = payload.get("message") or {}
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if calls:
        names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls)
        return f"{_at(payload)}model asked for {names}"
    return f"{_at(payload)}model answered"


def _input_title(event: Event, payload: dict[str, Any]) -> str:
    keys = payload.get("keys")
    fields = f" ({', '.join(map(str, keys))})" if isinstance(keys, list) and keys else ""
    return f"input from {payload.get('submitted_by', '?')}{fields}"


def _probe_title(event: Event, payload: dict[str, Any]) -> str:
    verdict = payload.get("verdict", "?")
    said = {
        "done": "the write had happened",
        "not_done": "the write had not happened; it runs again",
        "unknown": "could not tell",
    }.get(str(verdict), str(verdict))
    return f"probe of {payload.get('name', '?')}: {said}"


def _tool_title(event: Event, payload: dict[str, Any]) -> str:
    by_probe = " (result from its probe)" if payload.get("resolved_by") == "probe" else ""
    return f"{_at(payload)}tool {payload.get('name', '?')}{by_probe}"


def _at(payload: dict[str, Any]) -> str:
    """An agent function's step: its position first."""
    position = payload.get("position")
    if isinstance(position, bool) or not isinstance(position, int):
        return ""
    return f"step {position}: "


def _step_title(event: Event, payload: dict[str, Any]) -> str:
    return f"{_at(payload)}{payload.get('step', '?')} {payload.get('name', '?')}"


def _request_title(event: Event, payload: dict[str, Any]) -> str:
    agent = payload.get("agent")
    if isinstance(agent, str) and agent:
        return f"request: agent {agent}, model {payload.get('model', '?')}"
    return f"request: model {payload.get('model', '?')}"


_TITLES: dict[str, Callable[[Event, dict[str, Any]], str]] = {
    EventKind.CLAIMED: lambda e, p: (
        f"claimed by {p.get('worker', '?')} (lease token {e.lease_token})"
    ),
    EventKind.REQUEUED: _requeued_title,
    EventKind.DEAD_LETTERED: lambda e, p: f"dead-lettered: {p.get('reason', '?')}",
    EventKind.REDRIVEN: lambda e, p: "redriven" + (" (forced)" if p.get("force") else ""),
    EventKind.FORKED: lambda e, p: (
        f"forked from {p.get('from', '?')} at #{p.get('at', '?')}: the events above are its copy"
    ),
    EventKind.THROTTLED: lambda e, p: (
        f"parked for model {p.get('model', '?')} ({p.get('why', '?')}, {p.get('delay', '?')} s)"
    ),
    EventKind.TOOL: _tool_title,
    EventKind.PROBE: _probe_title,
    EventKind.LLM: _llm_title,
    EventKind.REQUEST: _request_title,
    EventKind.STEP: _step_title,
    EventKind.SLEEPING: lambda e, p: (
        f"{_step_title(e, p)} until {p.get('until', '?')}"
        + (" (parked in the queue)" if p.get("parked") else "")
    ),
    EventKind.ASSEMBLED: lambda e, p: "final answer",
    EventKind.APPROVAL: lambda e, p: (
        f"{'approved' if p.get('approved') else 'denied'} by {p.get('decided_by', '?')}"
    ),
    EventKind.INPUT: _input_title,
}


def _title(event: Event, payload: dict[str, Any]) -> str:
    title = _TITLES.get(event.kind)
    return title(event, payload) if title is not None else str(event.kind)


# Events that record a call's effect and how long it took: a tool's, a `ctx.step` function's.
_TIMED = (EventKind.TOOL, EventKind.STEP)


def timeline(events: Iterable[Event], *, reveal: bool) -> list[Step]:
    steps: list[Step] = []
    previous: datetime | None = None
    for event in events:
        payload = event.payload if reveal else hide_payload(event.kind, event.payload)
        duration: float | None = None
        if event.kind in _TIMED and isinstance(payload.get("duration_ms"), int | float):
            duration = float(payload["duration_ms"])
        elif event.kind == EventKind.LLM and previous is not None:
            duration = (event.created_at - previous).total_seconds() * 1000
        error = payload.get("error") or ""
        steps.append(
            Step(
                sequence=event.sequence,
                attempt=event.attempt,
                lease_token=event.lease_token,
                kind=str(event.kind),
                at=event.created_at,
                title=_title(event, payload),
                effect=str(payload.get("effect") or "") if event.kind in _TIMED else "",
                error=_short(error) if error else "",
                detail=json.dumps(payload, indent=1, default=str, ensure_ascii=False),
                duration_ms=duration,
                segment_start=event.kind == EventKind.CLAIMED,
            )
        )
        previous = event.created_at
    return steps


# -- an agent function's steps ---------------------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    """One step of an agent function's run, as the dashboard shows it: its outcome is
    content (None: hidden), except an error, the tools a model asked for, a sleep's end."""

    position: int
    step: str
    name: str
    effect: str
    outcome: str | None
    failed: bool
    duration_ms: float | None
    sequence: int
    attempt: int

    @property
    def is_write(self) -> bool:
        return self.effect in (ToolEffect.IDEMPOTENT_WRITE, ToolEffect.NON_IDEMPOTENT_WRITE)


def _outcome(step: AgentStep, reveal: bool) -> str | None:
    if step.error is not None or reveal:
        return step.summary(160)
    if step.step == "sleep" or (step.step == "model" and str(step.result).startswith("asked for")):
        return step.summary(160)
    return None


def step_rows(events: Iterable[Event], *, reveal: bool) -> list[StepRow]:
    return [
        StepRow(
            position=s.position,
            step=s.step,
            name=s.name,
            effect=s.effect or "",
            outcome=_outcome(s, reveal),
            failed=s.error is not None,
            duration_ms=s.duration_ms,
            sequence=s.sequence,
            attempt=s.attempt,
        )
        for s in agent_steps(events)
    ]


def steps_json(events: Iterable[Event], *, reveal: bool) -> list[dict[str, Any]]:
    """An agent function's steps by position; their results hidden unless revealed."""
    out = []
    for s in agent_steps(events):
        data = s.to_json()
        if not reveal and data["result"] is not None:
            data["result"] = _outcome(s, False) or HIDDEN
        out.append(data)
    return out


# -- the effect-aware dry run of a redrive ---------------------------------------------------


@dataclass(frozen=True)
class Write:
    sequence: int
    attempt: int
    lease_token: int
    tool: str
    idempotency_key: str
    at: datetime
    error: str
    args: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "attempt": self.attempt,
            "lease_token": self.lease_token,
            "tool": self.tool,
            "idempotency_key": self.idempotency_key,
            "created_at": self.at.isoformat(),
            "error": self.error,
            "args": self.args,
        }


@dataclass(frozen=True)
class NextCall:
    call_id: str
    tool: str
    effect: str
    args: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "effect": self.effect,
            "args": self.args,
        }


@dataclass(frozen=True)
class RedrivePlan:
    """What a redrive of this run would do, read from its journal."""

    run_id: str
    redrivable: bool
    needs_force: bool
    why: str
    writes_done: list[Write] = field(default_factory=list)
    next_calls: list[NextCall] = field(default_factory=list)
    interrupted: NextCall | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "redrivable": self.redrivable,
            "needs_force": self.needs_force,
            "why": self.why,
            "non_idempotent_writes_done": [w.to_json() for w in self.writes_done],
            "next_calls": [c.to_json() for c in self.next_calls],
            "interrupted_write": self.interrupted.to_json() if self.interrupted else None,
        }


def _pending_calls(events: Iterable[Event]) -> list[tuple[str, str, Any]]:
    """(call id, tool, args) of the last model turn's calls that have no tool event: what a
    resumed run executes first (SPEC §8)."""
    pending: list[tuple[str, str, Any]] = []
    for event in events:
        if event.kind == EventKind.LLM:
            message = event.payload.get("message") or {}
            pending = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    args = function.get("arguments")
                pending.append((str(call.get("id")), str(function.get("name")), args))
        elif event.kind == EventKind.TOOL:
            # A turn may repeat a call id: the event answers only the first call still open.
            answered = next((p for p in pending if p[0] == event.payload.get("call_id")), None)
            pending = [p for p in pending if p is not answered]
    return pending


def redrive_plan(
    run: Run,
    events: list[Event],
    *,
    has_request: bool,
    effect_of: Callable[[str], ToolEffect],
    reveal: bool,
) -> RedrivePlan:
    writes = [
        Write(
            sequence=e.sequence,
            attempt=e.attempt,
            lease_token=e.lease_token,
            tool=str(e.payload.get("name")),
            idempotency_key=str(e.payload.get("idempotency_key", "")),
            at=e.created_at,
            error=str(e.payload.get("error") or ""),
            args=e.payload.get("args") if reveal else HIDDEN,
        )
        for e in events
        if e.kind == EventKind.TOOL and e.payload.get("effect") == ToolEffect.NON_IDEMPOTENT_WRITE
    ]
    next_calls = [
        NextCall(call_id, name, str(effect_of(name)), args if reveal else HIDDEN)
        for call_id, name, args in _pending_calls(events)
    ]
    fenced = run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    interrupted = next((c for c in next_calls if c.effect == ToolEffect.NON_IDEMPOTENT_WRITE), None)
    if not run.is_dead_letter:
        reason = f" ({run.termination_reason})" if run.termination_reason else ""
        why = f"the run is {run.status}{reason}, not dead-lettered: nothing to redrive"
        return RedrivePlan(run.id, False, False, why, writes, next_calls)
    if not has_request:
        why = "the run has no stored request to run again"
        return RedrivePlan(run.id, False, False, why, writes, next_calls)
    # "Completed" and "recorded", not "happened": with the fence standing, one write did
    # start and may have happened, and the plan must not say in one breath that none did.
    done = (
        f"{len(writes)} non-idempotent write(s) completed and are recorded in the journal; "
        "a redrive resumes after them, so none of them runs again"
        if writes
        else "No non-idempotent write completed in this run"
    )
    if fenced and run.fence_probe:
        which = f" ({interrupted.tool})" if interrupted else ""
        why = (
            f"{done}. The fence stands: a non-idempotent write{which} started and was "
            "interrupted before its result was recorded. Its tool has a probe: a redrive "
            "sends the run back in doubt, and the next segment asks the probe first — if the "
            "write happened, its result is recorded and it does not run again; if not, it runs "
            "once with the same idempotency key; if the probe cannot tell, the run is "
            "dead-lettered again. No force needed"
        )
        return RedrivePlan(run.id, True, False, why, writes, next_calls, interrupted)
    if fenced:
        which = f" ({interrupted.tool})" if interrupted else ""
        why = (
            f"{done}. The fence stands: a non-idempotent write{which} started and was "
            "interrupted before its result was recorded, so it may have happened; a redrive "
            "would run it again, so it needs force after you check"
        )
        return RedrivePlan(run.id, True, True, why, writes, next_calls, interrupted)
    return RedrivePlan(run.id, True, False, done + ".", writes, next_calls)


# -- live leases -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """A segment identity and the runs it holds under a lease right now."""

    owner: str
    runs: list[Run]

    @property
    def kind(self) -> str:
        return self.owner.partition(":")[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "runs": [
                {
                    "id": r.id,
                    "queue": r.queue,
                    "lease_token": r.lease_token,
                    "lease_expires": r.lease_expires.isoformat() if r.lease_expires else None,
                    "pending_effect": str(r.pending_effect or ""),
                    "attempt": r.attempt,
                }
                for r in self.runs
            ],
        }


def leases(running: Iterable[Run]) -> list[Holder]:
    by_owner: dict[str, list[Run]] = {}
    for run in running:
        by_owner.setdefault(run.claimed_by, []).append(run)
    return [Holder(owner, runs) for owner, runs in sorted(by_owner.items())]
