"""In-doubt writes resolved by a probe (SPEC §16).

A run requeued with its non-idempotent fence standing (its worker died inside the write, or
the write's step failed, or a drain caught it) comes back to a segment that, before anything
else, asks the write tool's probe whether the interrupted call happened:

- `done`: the `probe` event, a `tool` event carrying the probe's result (`resolved_by:
  "probe"`) and the fence cleared, in one transaction; the loop goes on as if the write had
  returned that result;
- `not_done`: the `probe` event and the fence cleared in one transaction; the write then
  runs again, fenced again, with the same idempotency key;
- `unknown`, or the probe raises or times out: dead-letter `not_retryable`, fence standing.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tenure import _policy
from tenure._classify import describe
from tenure._errors import Cancelled
from tenure._recovery import dead_letter
from tenure._steps import to_json_value
from tenure._toolstep import tool_event
from tenure._types import (
    EventKind,
    FailureClass,
    Outcome,
    Probe,
    TerminationReason,
    ToolContext,
)
from tenure.agent._journal import Journal, idempotency_key
from tenure.agent._tools import InvalidArguments, Tool
from tenure.store._base import NewEvent

if TYPE_CHECKING:
    from tenure._steps import Steps

# How often a segment waiting for its probe looks whether the run is still its own.
PROBE_POLL_SECONDS = 0.05
# The step's deadline lies this far past the probe's timeout: the segment's own verdict
# (`unknown`, a dead-letter) must come before the worker's hung-slot check gives the slot
# up, even when the waiting thread wakes late on a loaded machine.
PROBE_VERDICT_GRACE_SECONDS = 1.0


def resolve(
    steps: Steps, tool_of: Callable[[str], Tool | None], journal: Journal, fence_call: str
) -> Outcome | None:
    """Ask the probe about the call the standing fence names; None: the loop goes on, else
    the run was dead-lettered (`Outcome.FAILED`). `tool_of` gives the tool a call names, if
    the run may use it and this process has it."""
    call: dict[str, Any] = json.loads(fence_call)
    key = str(call.get("idempotency_key"))
    # A fork in doubt (SPEC §23) carries its original's call: the probe asks about the
    # original's key, and the call is found among the fork's pending ones by that key.
    keyed_by = str(call.get("forked_from") or steps.run_id)
    pending = next(
        (p for p in journal.pending if idempotency_key(keyed_by, p.llm_sequence, p.index) == key),
        None,
    )
    tool = tool_of(str(call.get("name")))

    def written(result: Any, started: float) -> NewEvent:
        assert tool is not None and pending is not None  # _ask says unknown otherwise
        # Recorded under the run's own key: a fork's own calls are keyed by the fork.
        own = idempotency_key(steps.run_id, pending.llm_sequence, pending.index)
        return tool_event(pending, tool.effect, own, result, None, started, resolved_by="probe")

    settled = resolve_call(steps, tool, call, written, located=pending is not None)
    if isinstance(settled, Probe):
        if settled.verdict == "done":
            assert pending is not None
            journal.add_result(pending.call.id, settled.result, None)
        return None
    return settled


def resolve_call(
    steps: Steps,
    tool: Tool | None,
    call: dict[str, Any],
    written: Callable[[Any, float], NewEvent],
    *,
    located: bool,
) -> Probe | Outcome:
    """Ask `tool`'s probe about the fenced `call` and record its verdict: `done` with the
    step's event `written(result, started)` and the fence cleared in one transaction;
    `not_done` with the fence cleared (the caller runs the write again, same key); `unknown`
    dead-letters the run (`Outcome.FAILED` is returned). `located`: the caller found the call
    among the steps it would run next (else the verdict is `unknown`)."""
    key = str(call.get("idempotency_key"))
    started = time.monotonic()
    verdict = _ask(steps, tool, located, call, key)
    payload: dict[str, Any] = {
        "name": call.get("name"),
        "args": call.get("args"),
        "idempotency_key": key,
        "verdict": verdict.verdict,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
    }
    if verdict.verdict == "unknown":
        payload["reason"] = verdict.reason
        return _dead_letter(steps, NewEvent(EventKind.PROBE, payload), verdict.reason)
    if verdict.verdict == "not_done":
        # The write runs again, fenced again, with the same idempotency key.
        steps.resolve_fence([NewEvent(EventKind.PROBE, payload)])
        return verdict
    result = to_json_value(verdict.result)
    payload["result"] = result
    steps.resolve_fence([NewEvent(EventKind.PROBE, payload), written(result, started)])
    return Probe.done(result)


def _ask(
    steps: Steps,
    tool: Tool | None,
    located: bool,
    call: dict[str, Any],
    key: str,
) -> Probe:
    """The probe's verdict; every way it cannot answer is `unknown`."""
    if tool is None or tool.probe is None:
        return Probe.unknown(f"no probe for tool {call.get('name')!r} in this process")
    if not located:
        return Probe.unknown("the fenced call is not among the run's pending calls")
    raw = dict(call.get("args") or {})
    try:
        # A step of an agent function has no schema: its arguments are recorded as given.
        described = tool.arguments is not None or tool.parameters is not None
        values = tool.validate(raw) if described else raw
    except InvalidArguments as exc:
        return Probe.unknown(f"the fenced call's arguments no longer validate: {exc}")
    context = ToolContext(
        steps.run_id, steps.lease.attempt, key, steps.lease.token, tool.effect, steps.abort
    )
    return _run_probe(steps, tool, context, values)


def _run_probe(steps: Steps, tool: Tool, context: ToolContext, values: dict[str, Any]) -> Probe:
    """The probe, on its own thread, given the tool's timeout (a probe only reads, so one
    left behind after its timeout does no harm; nothing it returns late is used)."""
    answer: list[Any] = []
    answered = threading.Event()

    def ask() -> None:
        assert tool.probe is not None
        try:
            answer.append(tool.probe(context, **values))
        except BaseException as exc:  # reported as the verdict, never raised here
            answer.append(exc)
        answered.set()

    thread = threading.Thread(target=ask, name=f"tenure-probe-{tool.name}", daemon=True)
    deadline = time.monotonic() + tool.timeout
    with steps.step_deadline(
        tool.timeout + PROBE_VERDICT_GRACE_SECONDS, f"probe of tool {tool.name}"
    ):
        thread.start()
        # Wait for the answer, the timeout, or the run leaving this segment (the keeper's
        # abort): then nothing more is written, whatever the probe says later. The wait
        # never sleeps past the timeout, so the timeout is noticed when it comes.
        while not answered.wait(max(0.0, min(PROBE_POLL_SECONDS, deadline - time.monotonic()))):
            if steps.abort.is_set():
                raise Cancelled("the run left this segment while its probe ran")
            if time.monotonic() >= deadline:
                return Probe.unknown(f"the probe did not answer within {tool.timeout:g}s")
    found = answer[0]
    if isinstance(found, BaseException):
        return Probe.unknown(f"the probe raised {describe(found)}")
    if not isinstance(found, Probe) or found.verdict not in ("done", "not_done", "unknown"):
        return Probe.unknown(f"the probe returned {found!r}, not a tenure.Probe")
    return found


def _dead_letter(steps: Steps, probe_event: NewEvent, reason: str) -> Outcome:
    verdict = _policy.DeadLetter(
        TerminationReason.NOT_RETRYABLE,
        f"the write's probe could not tell whether it happened: {reason}",
    )
    settlement = dead_letter(verdict, FailureClass.UNKNOWN, verdict.why, "probe")
    steps.settle(dataclasses.replace(settlement, events=(probe_event, *settlement.events)))
    return Outcome.FAILED
