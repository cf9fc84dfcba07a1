"""Fork: rerun a run from a step (SPEC §23). The plan, made from the original's row and
journal before anything is stored: what is kept, what runs again, which writes would repeat.

A fork is a new queued run whose journal is a copy of the original's events before the
sequence it is forked at, then its own `forked` event; it resumes from there like any
resumed run (SPEC §8; an agent function replays the kept steps under the current code).
The rule for writes:

- a write recorded before the sequence is kept as recorded, never repeated;
- a completed `non_idempotent_write` at or after it would run again, under the fork's own
  idempotency keys: the fork is refused, naming those writes, unless repeats are allowed;
- a write whose fence still stands (it was interrupted: nobody knows whether it happened)
  and which the fork would take up directly, at the sequence it is forked at, is refused
  unless its tool has a probe: the fork then starts in doubt and its first segment asks the
  probe about the original's call (SPEC §16). Forked from before the step that asked for
  it, the interrupted write is one that would repeat, like a completed one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tenure._errors import InvalidRequest
from tenure._types import Event, EventKind, RunStatus, ToolEffect
from tenure.store._records import ForkState

# A run in one of these holds no lease and no step can be added to it by a worker while it
# stays so: its journal is what a fork copies. A queued run could be claimed at any moment.
FORKABLE = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.WAITING_FOR_APPROVAL,
        RunStatus.WAITING_FOR_INPUT,
    }
)
# Events that record no step of the run: its lifecycle. Everything else is a step.
_LIFECYCLE = frozenset(
    {
        EventKind.REQUEST,
        EventKind.CLAIMED,
        EventKind.REQUEUED,
        EventKind.DEAD_LETTERED,
        EventKind.CANCELLED,
        EventKind.REDRIVEN,
        EventKind.THROTTLED,
        EventKind.FORKED,
        # A probe's verdict is about an interrupted write, the step that follows it.
        EventKind.PROBE,
        # The run's end: the answer its last step gave, assembled again by the fork's end.
        EventKind.ASSEMBLED,
    }
)
_WRITES = frozenset({EventKind.TOOL, EventKind.STEP})


@dataclass(frozen=True)
class ForkPlan:
    """What `rt.fork(run_id, at)` would do (SPEC §23), before it does anything.

    `kept`: the original's events before `at`, copied as recorded (`sequence`, `kind`,
    `name`). `again`: the steps recorded at or after `at`, which the fork runs again.
    `repeated_writes`: the completed non-idempotent writes among them, and an interrupted
    one the fork would run again (`in_doubt: true`): each `sequence` (None for an
    interrupted one), `name`, `idempotency_key` (the original's). `in_doubt`: the
    interrupted write the fork takes up at `at`, asked of its probe first (None when
    there is none). `blocked`: why the fork is refused whatever repeats are allowed.
    """

    run_id: str
    at: int
    status: RunStatus
    kept: tuple[dict[str, Any], ...]
    again: tuple[dict[str, Any], ...]
    repeated_writes: tuple[dict[str, Any], ...]
    in_doubt: dict[str, Any] | None
    blocked: str | None
    # What the plan was decided on: the fork is stored only while the original still holds.
    state: ForkState
    request: dict[str, Any]

    def refusal(self, allow_repeat_writes: bool) -> str | None:
        """Why the fork is refused (one line), or None."""
        if self.blocked is not None:
            return self.blocked
        if self.repeated_writes and not allow_repeat_writes:
            n = len(self.repeated_writes)
            named = "; ".join(_describe_write(w) for w in self.repeated_writes)
            return (
                f"forking run {self.run_id} at {self.at} would repeat {n} non-idempotent "
                f"write{'s' if n > 1 else ''}: {named}; fork after "
                f"{'them' if n > 1 else 'it'}, or allow repeated writes "
                "(allow_repeat_writes=True, --allow-repeat-writes)"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "at": self.at,
            "status": str(self.status),
            "kept": list(self.kept),
            "again": list(self.again),
            "repeated_writes": list(self.repeated_writes),
            "in_doubt": self.in_doubt,
            "blocked": self.blocked,
            "refused": self.refusal(False),
        }


def _describe_write(w: dict[str, Any]) -> str:
    where = "interrupted, in doubt" if w.get("in_doubt") else f"sequence {w['sequence']}"
    return f"{w['name']} ({where}, key {w['idempotency_key']})"


def _name(event: Event) -> str:
    p = event.payload
    if event.kind is EventKind.LLM:
        return "model"
    name = p.get("name")
    return str(name) if name is not None else str(event.kind)


def _summary(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sequence": event.sequence,
        "kind": str(event.kind),
        "name": _name(event),
    }
    if "position" in event.payload:
        out["position"] = event.payload["position"]
    if event.kind in _WRITES and "effect" in event.payload:
        out["effect"] = event.payload["effect"]
    return out


def _is_child_step(event: Event) -> bool:
    return event.kind is EventKind.STEP and event.payload.get("step") == "child"


def _completed_write(event: Event) -> bool:
    """A recorded non-idempotent write that ran: it returned a value or raised (a call a
    person denied was never run, and has no key)."""
    p = event.payload
    return (
        event.kind in _WRITES
        and p.get("effect") == ToolEffect.NON_IDEMPOTENT_WRITE
        and bool(p.get("idempotency_key"))
    )


def check_at(run_id: str, at: Any, last_sequence: int) -> int:
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= last_sequence:
        raise InvalidRequest(
            f"at must be a sequence of run {run_id} from 1 to {last_sequence} "
            f"(0 is its request), got {at!r}"
        )
    return at


def make_plan(run_id: str, at: Any, state: ForkState, events: Sequence[Event]) -> ForkPlan:
    """The plan of forking `run_id` at `at`, from its row (`state`) and its events up to
    `state.last_sequence`. Bad input raises InvalidRequest (one line)."""
    if state.status not in FORKABLE:
        raise InvalidRequest(
            f"run {run_id} is {state.status}: only a run that has ended or waits for a "
            "person can be forked"
        )
    at = check_at(run_id, at, state.last_sequence)
    journal = [e for e in events if e.sequence <= state.last_sequence]
    if not journal or journal[0].kind is not EventKind.REQUEST or journal[0].damaged:
        raise InvalidRequest(f"run {run_id} has no readable request event: it cannot be forked")
    damaged = next((e for e in journal if e.sequence < at and e.damaged), None)
    if damaged is not None:
        raise InvalidRequest(
            f"run {run_id}: event {damaged.sequence} is damaged ({damaged.damaged}); a fork "
            "would replay it"
        )
    kept = tuple(_summary(e) for e in journal if e.sequence < at)
    # A kept child step would hand the fork the original's children, which are not its own
    # (their parent is the original: the fork could neither wait for them nor be woken by
    # them). A child step at or after `at` runs again and makes the fork's own children.
    child = next(
        (e for e in journal if e.sequence < at and _is_child_step(e)),
        None,
    )
    later = [e for e in journal if e.sequence >= at]
    again = tuple(_summary(e) for e in later if e.kind not in _LIFECYCLE)
    repeated = [
        {
            "sequence": e.sequence,
            "name": _name(e),
            "idempotency_key": str(e.payload.get("idempotency_key")),
        }
        for e in later
        if _completed_write(e)
    ]
    in_doubt, blocked = None, None
    if child is not None:
        blocked = (
            f"run {run_id} created child runs before {at} (its step at sequence "
            f"{child.sequence}): a fork cannot take over the original's children; fork at "
            f"{child.sequence} or before, and the fork creates children of its own"
        )
    if state.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        call = _fence_call(state.fence_call)
        write = {
            "name": str(call.get("name", "?")),
            "idempotency_key": str(call.get("idempotency_key", "?")),
            "probe": state.fence_probe,
        }
        if again:  # the fork runs the steps that led to it again: it would repeat
            repeated.append({**write, "sequence": None, "in_doubt": True})
        elif state.fence_probe:
            in_doubt = write
        else:
            blocked = (
                f"run {run_id}'s write {write['name']} (key {write['idempotency_key']}) was "
                "interrupted and its tool has no probe: nobody can tell whether it happened, "
                f"and a fork at {at} would take it up; fork from before the step that asked "
                "for it, allowing repeated writes, to run it again"
            )
    return ForkPlan(
        run_id=run_id,
        at=at,
        status=state.status,
        kept=kept,
        again=again,
        repeated_writes=tuple(repeated),
        in_doubt=in_doubt,
        blocked=blocked,
        state=state,
        request=dict(journal[0].payload),
    )


def _fence_call(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def fork_fence_call(plan: ForkPlan) -> str | None:
    """The fence call a fork in doubt starts with: the original's call (its probe asks
    about the original's idempotency key), marked with the run it came from so that the
    fork's segment finds the call among its own pending ones."""
    if plan.in_doubt is None:
        return None
    return json.dumps({**_fence_call(plan.state.fence_call), "forked_from": plan.run_id})
