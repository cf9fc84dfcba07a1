"""The tool step of the ladder (SPEC §6 steps 4 and 5): a call's tool run, fenced when it writes,
and its `tool` event. `Segment` takes it as a base; what it uses of the segment is listed
under TYPE_CHECKING below."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from tenure import _json, _loop, _policy
from tenure._classify import describe
from tenure._errors import Cancelled, ProviderError
from tenure._types import EventKind, FailureClass, RunRequest, ToolContext, ToolEffect, Usage
from tenure.agent import _human
from tenure.agent._journal import Journal, PendingCall, idempotency_key
from tenure.agent._tools import InvalidArguments, Tool
from tenure.store._base import NO_USAGE, Lease, NewEvent, Store

if TYPE_CHECKING:
    import contextlib
    import threading

    from tenure._ladder import Engine


class UnrecordedWrite(ProviderError):
    """A write ran but its event could not be stored: never reported as success."""

    def __init__(self, tool: str, cause: BaseException) -> None:
        super().__init__(
            FailureClass.UNKNOWN, f"write {tool} ran but its event was not stored: {cause}"
        )


class WriteInDoubt(ProviderError):
    """A write whose outcome is unknown: it timed out, was cancelled by something other than
    the segment's abort, or lost its event loop. It may have happened, so it is never an
    error result (a model told "it failed" calls it again): its fence stays standing and
    failure recovery takes the in-doubt way (SPEC §16: the probe, else a dead-letter)."""

    def __init__(self, tool: str, cause: BaseException) -> None:
        super().__init__(
            FailureClass.TIMEOUT, f"write {tool} did not answer, it may have happened: {cause}"
        )


class ToolSteps:
    """The tool step, fences included, of a `Segment`."""

    if TYPE_CHECKING:
        engine: Engine
        lease: Lease
        decision: str | None
        _fence: ToolEffect | None
        _fence_probe: bool
        _abort: threading.Event
        _written: list[int]

        @property
        def store(self) -> Store: ...
        @property
        def run_id(self) -> str: ...
        def step_deadline(
            self, timeout: float, what: str
        ) -> contextlib.AbstractContextManager[None]: ...
        def _check_held(self) -> None: ...
        def _record(self, events: list[NewEvent], usage: Usage = NO_USAGE) -> list[int]: ...
        def _lost(self) -> NoReturn: ...

    def _tool_step(self, request: RunRequest, journal: Journal, pending: PendingCall) -> None:
        call = pending.call
        tool = self.tool_of(request, call.name)
        effect = tool.effect if tool else ToolEffect.NON_IDEMPOTENT_WRITE
        key = idempotency_key(self.run_id, pending.llm_sequence, pending.index)
        started = time.monotonic()
        result: Any = None
        error: str | None = None
        ran = False
        approve_writes = self.engine.settings.approve_writes
        refusal = _human.refusal(journal, pending, tool, approve_writes)
        if tool is None:
            error = f"tool {call.name!r} is not available to this run"
        elif refusal is not None:
            error = refusal
        else:
            try:
                values = tool.validate(_human.with_input(pending, tool, self.decision))
            except InvalidArguments as exc:
                error = str(exc)
            else:
                ran = True
                result, error = self._invoke(tool, pending, key, values)
        event = tool_event(pending, effect, key, result, error, started)
        if ran and effect.is_write:
            self._clear_fence(call.name, event)
        else:
            self._record([event])
        journal.add_result(call.id, result, None if error is None else _json.json_safe(error))

    def _invoke(
        self, tool: Tool, pending: PendingCall, key: str, values: dict[str, Any]
    ) -> tuple[Any, str | None]:
        """Run a model's call of a tool, fenced when it writes."""
        where = {"turn": pending.llm_sequence, "index": pending.index}
        args = _human.with_input(pending, tool, self.decision)
        return self.fenced_call(
            tool, args, key, where, lambda context: tool.invoke(context, values)
        )

    def fenced_call(
        self,
        tool: Tool,
        args: dict[str, Any],
        key: str,
        where: dict[str, Any],
        invoke: Callable[[ToolContext], Any],
    ) -> tuple[Any, str | None]:
        """Run `invoke` as `tool`'s step: fenced when the tool writes, under its deadline.
        Returns (result, None) or (None, error text): a step's ordinary exception is its
        result. `where` locates the call in the run (a model turn and index, or an agent
        function's position) for the fence's record. Both the built-in loop and agent
        functions (SPEC §20) call this: it is the one place a write is fenced."""
        self._check_held()
        if tool.effect.is_write:
            # The fence names the call it stands for, so that any process can later ask the
            # tool's probe whether it happened (SPEC §16).
            call = {"name": tool.name, "args": args, "idempotency_key": key, **where}
            lease_for_tool = _policy.fence_lease(self.engine.settings.lease_seconds, tool.timeout)
            probe = tool.probe is not None
            if not self.store.mark_fence(self.lease, tool.effect, lease_for_tool, call, probe):
                self._lost()  # the write does not run: this segment holds no lease
            self._fence, self._fence_probe = tool.effect, probe
        context = ToolContext(
            self.run_id, self.lease.attempt, key, self.lease.token, tool.effect, self._abort
        )
        try:
            with self.step_deadline(tool.timeout, f"tool {tool.name}"):
                return to_json_value(invoke(context)), None
        except ProviderError:
            raise  # a classified failure fails the step: failure recovery decides
        except (_loop.TimedOut, Cancelled) as exc:
            if isinstance(exc, Cancelled) and self._abort.is_set():
                raise  # the run is no longer ours: nothing more is recorded
            # Cut off before it answered: only a call that returned (a value or its own
            # exception) has a known outcome.
            if tool.effect.is_write:
                raise WriteInDoubt(tool.name, exc) from exc
            return None, describe(exc)
        except Exception as exc:
            return None, describe(exc)

    def record_written(self, name: str, event: NewEvent) -> None:
        """The event of a write that returned, and its fence cleared, in one transaction."""
        self._clear_fence(name, event)

    def _clear_fence(self, name: str, event: NewEvent) -> None:
        self._check_held()  # a write whose segment lost its run leaves its fence standing
        try:
            sequence = self.store.clear_fence(self.lease, self.engine.settings.lease_seconds, event)
        except Exception as exc:
            raise UnrecordedWrite(name, exc) from exc
        if sequence is None:
            self._lost()
        self._fence, self._fence_probe = None, False
        self._written.append(sequence)

    def resolve_fence(self, events: list[NewEvent]) -> None:
        """Clear an in-doubt fence with the probe's events, in one transaction."""
        self._check_held()
        sequences = self.store.resolve_fence(self.lease, self.engine.settings.lease_seconds, events)
        if sequences is None:
            self._lost()
        self._fence, self._fence_probe = None, False
        self._written.extend(sequences)

    @property
    def fence_probe(self) -> bool:
        """The standing fence's tool has a probe: the run can go back in doubt."""
        return self._fence_probe

    def tool_of(self, request: RunRequest, name: str) -> Tool | None:
        """The tool a call names, if the run may use it and this process has it."""
        return self.engine.tools.get(name) if name in request.tools else None


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


def to_json_value(value: Any) -> Any:
    """The tool's return value as the store keeps it, and so as a resumed run reads it back:
    what JSON cannot hold (NaN, infinities, integers beyond 64 bits, lone surrogates) as the
    same text the store writes. The live transcript is built from this value, so that the
    model is shown the same message with or without a crash in between."""
    return _json.json_safe(json.loads(json.dumps(value, default=str)))
