"""The six properties of SPEC §19, judged on one finished case against its reference."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenure import _requests
from tenure._classify import describe
from tenure._types import Event, EventKind, Run, RunStatus, TerminationReason, ToolEffect
from tenure.agent._functions import StepLog
from tenure.agent._journal import Journal, idempotency_key
from tenure.audit import AuditReport
from tenure.testing._cases import REFERENCE, Case

PREFIX = "prefix continuation"
EFFECTS = "effects"
CONSUME_ONCE = "consume-once"
DETERMINISM = "recovery determinism"
CHECKPOINTS = "checkpoint validity"
FENCING = "fencing"
PROPERTIES = (PREFIX, EFFECTS, CONSUME_ONCE, DETERMINISM, CHECKPOINTS, FENCING)
# The events a step records: the built-in loop's model and tool steps and its answer; an
# agent function's `ctx.*` steps besides (SPEC §20: `step` events, each with a position).
STEP_KINDS = (EventKind.LLM, EventKind.TOOL, EventKind.STEP, EventKind.ASSEMBLED)
Check = Callable[[str, str], int]


@dataclass(frozen=True)
class Verdict:
    ok: bool | None  # None: the property does not apply to this case
    detail: str = ""


OK = Verdict(True)


def _fail(problems: list[str]) -> Verdict:
    return Verdict(False, "; ".join(problems)) if problems else OK


@dataclass(frozen=True)
class Ending:
    status: RunStatus
    reason: TerminationReason | None
    output: str | None


@dataclass
class Finished:
    """A case after its run ended: what the database holds, and what was traced."""

    case: Case
    run: Run | None
    events: list[Event]
    writes: dict[str, str]  # key suffix -> tool name, every write a process started
    audit: AuditReport

    def tool_events(self) -> dict[str, list[Event]]:
        """The events of executed calls by idempotency key: `tool` events, and an agent
        function's `step` events that carry a key (its `ctx.step` calls)."""
        found: dict[str, list[Event]] = {}
        for e in self.events:
            if e.damaged is not None or e.kind not in (EventKind.TOOL, EventKind.STEP):
                continue
            key = e.payload.get("idempotency_key")
            if e.kind is EventKind.TOOL or key:
                found.setdefault(str(key), []).append(e)
        return found

    def positions(self) -> Counter[int]:
        """How often each position of an agent function's steps was recorded."""
        return Counter(
            e.payload["position"]
            for e in self.events
            if e.kind in STEP_KINDS
            and e.damaged is None
            and isinstance(e.payload.get("position"), int)
        )

    def key(self, suffix: str) -> str:
        return f"{self.case.run_id}:{suffix}"


def _steps(events: list[Event]) -> list[tuple[int, str, Any]]:
    return [(e.sequence, str(e.kind), e.payload) for e in events if e.kind in STEP_KINDS]


def prefix(f: Finished) -> Verdict:
    problems = [
        f"step {key} recorded {len(events)} times"
        for key, events in f.tool_events().items()
        if len(events) > 1
    ]
    repeated = sorted((p, n) for p, n in f.positions().items() if n > 1)
    problems += [f"step at position {p} recorded {n} times" for p, n in repeated]
    if not f.case.killed:
        if problems or f.case.point is REFERENCE:
            return _fail(problems)
        return Verdict(None, "the worker was not killed: the point was not reached")
    before, after = _steps(f.case.before), _steps(f.events)
    if after[: len(before)] != before:
        problems.append(
            f"the {len(before)} steps recorded before the kill are not where the final "
            "journal starts"
        )
    return _fail(problems)


def effects(f: Finished, check: Check | None) -> Verdict:
    recorded = f.tool_events()
    if check is None:
        return Verdict(None, "no check() in the app's module: nothing to ask the outside system")
    completed = f.run is not None and f.run.status is RunStatus.COMPLETED
    problems = []
    for suffix, name in sorted(f.writes.items()):
        try:
            seen = int(check(name, f.key(suffix)))
        except Exception as exc:
            problems.append(f"check({name!r}, …:{suffix}) raised: {describe(exc)}")
            continue
        events = recorded.get(f.key(suffix), [])
        succeeded = any(e.payload.get("error") is None for e in events)
        if seen > 1:
            problems.append(f"{name} …:{suffix} written {seen} times")
        elif completed and succeeded and seen != 1:
            problems.append(f"{name} …:{suffix} recorded as done, but written {seen} times")
    return _fail(problems)


def consume_once(f: Finished, check: Check | None) -> Verdict:
    if not f.case.holds:
        return Verdict(None)
    decisions = Counter(
        e.payload.get("turn")
        for e in f.events
        if e.kind in (EventKind.APPROVAL, EventKind.INPUT) and e.damaged is None
    )
    recorded = f.tool_events()
    problems = []
    for hold in f.case.holds:
        if decisions[hold.turn] != 1:
            problems.append(f"turn {hold.turn}: {decisions[hold.turn]} decisions recorded")
        errors = [o["error"] for o in hold.outcomes if o.get("error")]
        problems.extend(f"turn {hold.turn}: a decider failed: {e}" for e in errors[:1])
        for index, call in enumerate(hold.calls):
            key = held_key(f.case.run_id, hold.turn, index, call)
            runs = len(recorded.get(key, []))
            seen = int(check(call["tool"], key)) if check is not None else 0
            if max(runs, seen) > 1:
                problems.append(
                    f"turn {hold.turn}: the held call {call['tool']} ran {max(runs, seen)} times "
                    f"for {len(hold.outcomes) + hold.killed} deciders"
                )
    apart = [h.turn for h in f.case.holds if any(o.get("met") is False for o in h.outcomes)]
    if problems or not apart:
        return _fail(problems)
    # Held, but not proven under the race: a decision was written before every decider had
    # reached its own (the rendezvous timed out; a lock of the app's around its decision?).
    return Verdict(True, f"turn {apart[0]}: the deciders did not all meet before deciding")


def held_key(run_id: str, turn: int, index: int, call: dict[str, Any]) -> str:
    """The idempotency key of a held call: RUN_ID:TURN:INDEX for a model's call, and
    RUN_ID:POSITION for an agent function's step (SPEC §20)."""
    position = call.get("position")
    if isinstance(position, int):
        return f"{run_id}:{position}"
    return idempotency_key(run_id, turn, index)


def ending(run: Run | None) -> Ending | None:
    return None if run is None else Ending(run.status, run.termination_reason, run.output)


def in_doubt(f: Finished) -> bool:
    """Dead-lettered because the kill interrupted a non-idempotent write (SPEC §7): its
    fence stood when the worker died and stands still. The documented end, not a bug."""
    before, run = f.case.before_run, f.run
    fenced = ToolEffect.NON_IDEMPOTENT_WRITE
    return (
        before is not None
        and before.pending_effect is fenced
        and run is not None
        and run.termination_reason is TerminationReason.NOT_RETRYABLE
        and run.pending_effect is fenced
    )


def determinism(f: Finished, reference: Ending | None) -> Verdict:
    if f.case.stuck:
        return Verdict(False, f.case.stuck)
    got = ending(f.run)
    if got == reference:
        return OK
    if in_doubt(f):
        return Verdict(True, "in doubt: dead-lettered with its write's fence standing")
    assert got is not None and reference is not None
    return Verdict(
        False,
        f"ended {got.status}/{got.reason} {got.output!r}, the reference "
        f"{reference.status}/{reference.reason} {reference.output!r}",
    )


def _audit_problems(f: Finished) -> list[str]:
    mine = f"run {f.case.run_id}"
    return [v.removeprefix(mine + " ") for v in f.audit.violations if v.startswith(mine)]


def checkpoints(f: Finished) -> Verdict:
    problems = [p for p in _audit_problems(f) if "token" not in p]
    run = f.run
    if run is None:
        return Verdict(False, "the run is gone")
    if run.damaged:
        problems.append(f"damaged row: {run.damaged}")
    try:
        first = f.events[0]
        if first.kind is not EventKind.REQUEST:
            raise ValueError(f"the first event is {first.kind}, not request")
        request = _requests.from_json(json.dumps(first.payload))
        if run.request is not None:
            _requests.from_json(json.dumps(run.request))
        if request.agent is None:
            Journal.rebuild(request, f.events)
        else:
            problems.extend(_step_log_problems(f.events))
    except Exception as exc:
        problems.append(f"does not reload: {describe(exc)}")
    return _fail(problems)


def _step_log_problems(events: list[Event]) -> list[str]:
    """An agent function's journal (SPEC §20) rebuilds: its steps at positions 0, 1, 2 …
    without a gap, each naming its kind, name and arguments' digest."""
    log = StepLog.rebuild(  # raises on a damaged step record
        (str(e.kind), e.payload if e.damaged is None else {**e.payload, "_damaged": e.damaged})
        for e in events
    )
    gaps = sorted(set(range(log.last + 1)) - set(log.steps))
    problems = [f"no step recorded at position {p}" for p in gaps[:1]]
    problems += [
        f"step at position {r.position} does not say what it was"
        for r in log.steps.values()
        if not (r.step and r.name and r.digest) or "None" in (r.name, r.digest)
    ][:1]
    return problems


def fencing(f: Finished) -> Verdict:
    return _fail([p for p in _audit_problems(f) if "token" in p])


def judge(f: Finished, reference: Ending | None, check: Check | None) -> dict[str, Verdict]:
    return {
        PREFIX: prefix(f),
        EFFECTS: effects(f, check),
        CONSUME_ONCE: consume_once(f, check),
        DETERMINISM: determinism(f, reference),
        CHECKPOINTS: checkpoints(f),
        FENCING: fencing(f),
    }
