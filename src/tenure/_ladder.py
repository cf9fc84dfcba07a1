"""One segment of a run (SPEC §6): journal → steps → settle, or failure recovery.

Every write a segment makes names its lease (owner + fencing token). A write that matches no
row means the run is no longer ours: the segment stops at once, writes nothing more and
settles nothing, because the row belongs to whoever holds it now.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from tenure import _indoubt, _policy, _recovery, _requests
from tenure._classify import describe
from tenure._errors import (
    Cancelled,
    LeaseLost,
    ProviderError,
    RunCancelled,
    Throttled,
    UnknownModel,
)
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
    Usage,
)
from tenure.agent import _human
from tenure.agent._journal import Journal, PendingCall, idempotency_key
from tenure.agent._tools import InvalidArguments, Tool, Toolbox
from tenure.providers._base import ModelCall, ModelReply, Provider
from tenure.store._base import NO_USAGE, Lease, NewEvent, Settlement, Store

if TYPE_CHECKING:
    from tenure._capacity import Capacity
    from tenure._keeper import Keeper
    from tenure._publisher import DeltaPublisher

log = logging.getLogger("tenure")


@dataclass(frozen=True)
class Settings:
    lease_seconds: float = _policy.DEFAULT_LEASE_SECONDS
    max_requeues: int = _policy.DEFAULT_MAX_REQUEUES
    backoff_base: float = _policy.DEFAULT_BACKOFF_BASE
    backoff_cap: float = _policy.DEFAULT_BACKOFF_CAP
    approve_writes: bool = False
    approval_timeout: float | None = None


@dataclass
class Engine:
    store: Store
    tools: Toolbox
    models: dict[str, Provider]
    settings: Settings
    keeper: Keeper | None = None  # renews the leases of segments in flight (SPEC §15)
    model_timeouts: dict[str, float] = field(default_factory=dict)  # by model name
    deltas: DeltaPublisher | None = None  # publishes streaming calls' text (SPEC §18)
    capacity: Capacity | None = None  # the models with limits (SPEC §17)

    def model_timeout(self, name: str) -> float:
        return self.model_timeouts.get(name, _policy.DEFAULT_MODEL_TIMEOUT)


@dataclass(frozen=True)
class Ending:
    """A segment's normal end, returned for its caller to commit."""

    settlement: Settlement


def outcome_of(settlement: Settlement) -> Outcome:
    return Outcome.COMPLETED if settlement.status is RunStatus.COMPLETED else Outcome.FAILED


class UnrecordedWrite(ProviderError):
    """A write ran but its event could not be stored: never reported as success."""

    def __init__(self, tool: str, cause: BaseException) -> None:
        super().__init__(
            FailureClass.UNKNOWN, f"write {tool} ran but its event was not stored: {cause}"
        )


@dataclass
class Segment:
    engine: Engine
    lease: Lease
    raw_request: str | None
    requeue_count: int
    interactive: bool = False
    request: RunRequest | None = None
    collect_steps: bool = True
    decision: str | None = None  # raw JSON of a person's decision this segment continues
    _defer_end: bool = False  # return the normal end instead of settling it here
    _fence: ToolEffect | None = None
    _written: list[int] = field(default_factory=list)
    _usage: Usage = field(default_factory=Usage)
    # Set by the lease keeper when the run is no longer ours; aborts the step in flight.
    _abort: threading.Event = field(default_factory=threading.Event)
    _lost_cancelled: bool = False
    _deadline: float | None = None  # the step in flight's deadline (time.monotonic)
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16), from the claim: asked
    # of its tool's probe before anything else.
    fence_call: str | None = None
    _fence_probe: bool = False

    def __post_init__(self) -> None:
        if self.fence_call is not None:  # the fence the run was requeued with still stands
            self._fence, self._fence_probe = ToolEffect.NON_IDEMPOTENT_WRITE, True

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    # -- what the lease keeper asks --------------------------------------------------------

    @property
    def lease_seconds(self) -> float:
        return self.engine.settings.lease_seconds

    def renewable(self, now: float) -> bool:
        """Renewed only while the step in flight is within its deadline: a hung step lets
        its lease expire, and the reaper handles the run as a dead worker's."""
        return self._deadline is None or now <= self._deadline

    def overdue(self, now: float) -> bool:
        """The step in flight has run past its deadline (a hung tool or model call)."""
        return self._deadline is not None and now > self._deadline

    def lose(self, cancelled: bool) -> None:
        """The keeper's renewal missed: the run is no longer ours. The step in flight is
        aborted and every later write is refused without asking the database."""
        self._lost_cancelled = cancelled
        self._abort.set()

    def _last_write(self) -> None:
        """Before the write that ends this segment's hold on the run (a settle, a requeue,
        a hold for a person): the keeper stops renewing first, so that a renewal racing
        this write never mistakes the run's new state for a lost lease."""
        keeper = self.engine.keeper
        if keeper is not None:
            keeper.release(self)
        self._check_held()

    def _check_held(self) -> None:
        if self._abort.is_set():
            raise RunCancelled(self.run_id) if self._lost_cancelled else LeaseLost(self.run_id)

    # -- the ladder ----------------------------------------------------------------------

    def execute(self) -> RunResult:
        """Execute the segment; its ending is settled here."""
        result = self._execute(defer_end=False)
        assert isinstance(result, RunResult)
        return result

    def execute_until_end(self) -> RunResult | Ending:
        """Execute the segment; a normal end is returned, not settled, for the caller to
        commit (a worker's completer commits several with its next claim)."""
        return self._execute(defer_end=True)

    def _execute(self, defer_end: bool) -> RunResult | Ending:
        self._defer_end = defer_end
        keeper = self.engine.keeper
        if keeper is not None:
            keeper.keep(self)
        try:
            return self._execute_kept()
        finally:
            if keeper is not None:
                keeper.release(self)

    def _execute_kept(self) -> RunResult | Ending:
        try:
            request = self.request or _requests.from_json(self.raw_request)
        except Exception as exc:
            # A payload that cannot be read can never run: fail it now, never strand it
            # (whatever the exception: one that escaped here would leave the run running).
            return self._recover(ProviderError(FailureClass.CONFIGURATION, str(exc)))
        try:
            missing = [] if self.interactive else self._missing(request)
            if missing:
                return self._hand_back_unserved(missing)
            return self._loop(request)
        except LeaseLost:
            return self._result(Outcome.LEASE_LOST)
        except RunCancelled:
            return self._result(Outcome.CANCELLED)
        except Cancelled:  # a step aborted because the keeper found the run gone
            return self._result(Outcome.CANCELLED if self._lost_cancelled else Outcome.LEASE_LOST)
        except Throttled as exc:
            if self.interactive or self._abort.is_set():
                return self._recover(exc)
            return self._park(exc)
        except Exception as exc:
            if self._abort.is_set():  # whatever the aborted step raised: nothing to record
                return self._result(
                    Outcome.CANCELLED if self._lost_cancelled else Outcome.LEASE_LOST
                )
            return self._recover(exc)

    def _missing(self, request: RunRequest) -> list[str]:
        """What this process lacks to execute the run: its model, its tools."""
        missing = [] if request.model in self.engine.models else [f"model {request.model!r}"]
        tools = self.engine.tools
        return missing + [f"tool {name!r}" for name in request.tools if tools.get(name) is None]

    def _hand_back_unserved(self, missing: list[str]) -> RunResult:
        """Never execute a run without its tools or model (a made-up answer would complete
        it): give it back untouched, for a worker that has them. Queues route runs to the
        workers that can serve them; this is the net under a misrouted run."""
        why = f"{self.lease.owner} cannot serve this run; it lacks"
        log.warning("run %s handed back: %s %s", self.run_id, why, ", ".join(missing))
        self._last_write()
        if not self.store.hand_back(self.lease, why, missing):
            self._lost()
        error = ProviderError(FailureClass.CONFIGURATION, f"{why} {', '.join(missing)}")
        return self._result(Outcome.REQUEUED, error=error)

    def _loop(self, request: RunRequest) -> RunResult | Ending:
        # The first segment of a run has no steps to resume: skip reading its journal.
        first = self.lease.attempt == 0
        journal = Journal.rebuild(request, [] if first else self.store.events(self.run_id))
        provider = self.engine.models.get(request.model)
        if provider is None:
            raise ProviderError(FailureClass.CONFIGURATION, str(UnknownModel(request.model)))
        if self.fence_call is not None:
            ended = _indoubt.resolve(self, request, journal, self.fence_call)
            if ended is not None:
                return ended
        while True:
            held = self._hold(request, journal)
            if held is not None:
                return self._suspend(request, held)
            for pending in list(journal.pending):
                self._tool_step(request, journal, pending)
            if journal.answers >= request.max_iterations:
                return self._finish(TerminationReason.MAX_ITERATIONS)
            if _over_budget(request, journal.usage):
                return self._finish(TerminationReason.BUDGET_EXHAUSTED)
            call = ModelCall(
                messages=list(journal.messages),
                tools=self.engine.tools.specs(request.tools),
                run_id=self.run_id,
                attempt=self.lease.attempt,
                request=request,
                abort=self._abort,
            )
            reply = self._ask(provider, call)
            llm = NewEvent(EventKind.LLM, _llm_payload(reply))
            if not reply.tool_calls:
                return self._complete(reply, llm)
            (sequence,) = self._record([llm], reply.usage)
            journal.add_answer(sequence, reply)

    # -- steps ---------------------------------------------------------------------------

    def _ask(self, provider: Provider, call: ModelCall) -> ModelReply:
        """The model step. A streaming provider's text is published while it arrives
        (SPEC §18); the call's last deltas are out before its `llm` event is recorded."""
        deltas = self.engine.deltas
        stream = deltas.open(self.lease) if deltas is not None else None
        if stream is not None:
            call = dataclasses.replace(call, on_delta=stream.add)
        try:
            return self._call_model(call.request.model, provider, call)
        finally:
            if stream is not None:
                stream.close()

    def _call_model(self, model: str, provider: Provider, call: ModelCall) -> ModelReply:
        capacity = self.engine.capacity
        if capacity is not None and capacity.active:
            return capacity.call(self, model, provider, call)
        with self.step_deadline(self.engine.model_timeout(model)):
            return provider.complete(call)

    @property
    def abort_signal(self) -> threading.Event:
        """Set when the run is no longer this segment's: what a step in flight watches."""
        return self._abort

    def result_of(self, outcome: Outcome) -> RunResult:
        return self._result(outcome)

    @contextlib.contextmanager
    def step_deadline(self, timeout: float) -> Iterator[None]:
        """A step in flight: the keeper renews the lease until `timeout` has passed."""
        self._deadline = time.monotonic() + timeout
        try:
            yield
        finally:
            self._deadline = None

    def _record(self, events: list[NewEvent], usage: Usage = NO_USAGE) -> list[int]:
        """Heartbeat and append in one transaction (the step boundary)."""
        self._check_held()
        sequences = self.store.record_step(
            self.lease, self.engine.settings.lease_seconds, events, usage
        )
        if sequences is None:
            self._lost()
        self._written.extend(sequences)
        self._usage += usage
        return sequences

    def _lost(self) -> NoReturn:
        # Our guard matched nothing: either the run was cancelled (stop quietly) or it now
        # belongs to someone else (stop without a trace).
        if self.store.run_status(self.run_id) is RunStatus.CANCELLED:
            raise RunCancelled(self.run_id)
        raise LeaseLost(self.run_id)

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
        journal.add_result(call.id, result, error)

    def _invoke(
        self, tool: Tool, pending: PendingCall, key: str, values: dict[str, Any]
    ) -> tuple[Any, str | None]:
        """Run the tool, fenced when it writes. A tool's ordinary exception is its result."""
        self._check_held()
        if tool.effect.is_write:
            # The fence names the call it stands for, so that any process can later ask the
            # tool's probe whether it happened (SPEC §16).
            call = {
                "name": tool.name,
                "args": _human.with_input(pending, tool, self.decision),
                "idempotency_key": key,
                "turn": pending.llm_sequence,
                "index": pending.index,
            }
            lease_for_tool = _policy.fence_lease(self.engine.settings.lease_seconds, tool.timeout)
            probe = tool.probe is not None
            if not self.store.mark_fence(self.lease, tool.effect, lease_for_tool, call, probe):
                self._lost()  # the write does not run: this segment holds no lease
            self._fence, self._fence_probe = tool.effect, probe
        context = ToolContext(
            self.run_id, self.lease.attempt, key, self.lease.token, tool.effect, self._abort
        )
        try:
            with self.step_deadline(tool.timeout):
                return _to_json_value(tool.invoke(context, values)), None
        except (ProviderError, Cancelled):
            raise  # a classified failure fails the step: failure recovery decides
        except Exception as exc:
            return None, describe(exc)

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

    # -- a person in the loop ------------------------------------------------------------

    def tool_of(self, request: RunRequest, name: str) -> Tool | None:
        """The tool a call names, if the run may use it and this process has it."""
        return self.engine.tools.get(name) if name in request.tools else None

    def _hold(self, request: RunRequest, journal: Journal) -> _human.Hold | None:
        tools = [self.tool_of(request, p.call.name) for p in journal.pending]
        approve_writes = self.engine.settings.approve_writes
        return _human.hold(journal, tools, self.decision, approve_writes=approve_writes)

    def _suspend(self, request: RunRequest, held: _human.Hold) -> RunResult:
        timeout = held.timeout or self.engine.settings.approval_timeout
        waiting = {"kind": held.kind, "turn": held.turn, "calls": held.calls}
        status, kind = held.status, held.kind
        stored = None if not self.interactive else _requests.dumps(_requests.to_json(request))
        self._last_write()
        try:
            sequences = self.store.suspend(self.lease, status, waiting, stored, timeout, [])
        except Exception as exc:
            # Never promise a resume that cannot happen: an unstored suspend fails the run.
            raise ProviderError(
                FailureClass.UNKNOWN, f"could not hold the run for a person: {exc}"
            ) from exc
        if sequences is None:
            self._lost()
        outcome = Outcome.AWAITING_APPROVAL if kind == "approval" else Outcome.AWAITING_INPUT
        return self._result(outcome)

    # -- endings -------------------------------------------------------------------------

    def _complete(self, reply: ModelReply, llm: NewEvent) -> RunResult | Ending:
        text = reply.text or ""
        assembled = NewEvent(EventKind.ASSEMBLED, {"output": text})
        settlement = Settlement(
            RunStatus.COMPLETED,
            TerminationReason.COMPLETED,
            output=text,
            events=(llm, assembled),
            usage=reply.usage,
        )
        self._usage += reply.usage
        return self._end(settlement, output=text)

    def _finish(self, reason: TerminationReason) -> RunResult | Ending:
        return self._end(Settlement(RunStatus.FAILED, reason, error=f"run ended: {reason}"))

    def _end(self, settlement: Settlement, output: str | None = None) -> RunResult | Ending:
        """The loop's normal end: settled here, or returned for the caller to commit (a
        worker commits the ends of several runs, and its next claim, in one transaction)."""
        self._last_write()
        if self._defer_end:
            return Ending(settlement)
        self.settle(settlement)
        return self._result(outcome_of(settlement), output=output)

    def settled(self, settlement: Settlement, sequences: list[int] | None) -> Outcome:
        """The outcome of an ending committed by someone else, given what its settle
        returned (None: the guard matched nothing)."""
        if sequences is not None:
            self._written.extend(sequences)
            return outcome_of(settlement)
        try:
            self._lost()
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception:  # LeaseLost, or the status read failed: the settle did not apply
            return Outcome.LEASE_LOST

    def settle_alone(self, settlement: Settlement) -> Outcome:
        """Settle an ending on its own (its batch could not be committed), with this
        segment's own failure recovery if that fails too."""
        try:
            self.settle(settlement)
        except LeaseLost:
            return Outcome.LEASE_LOST
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception as exc:
            return self._recover(exc).outcome
        return outcome_of(settlement)

    def settle(self, settlement: Settlement) -> None:
        """A terminal state under this segment's lease; LeaseLost or RunCancelled if the
        row is no longer ours."""
        self._last_write()
        sequences = self.store.settle(self.lease, settlement)
        if sequences is None:
            self._lost()
        self._written.extend(sequences)

    def requeue_in_doubt(self, failure_class: FailureClass, message: str) -> None:
        """Back to the queue with the probe-able fence standing (SPEC §16), charged to the
        budget; claimable at once, since the probe decides; raises if not ours."""
        self._last_write()
        if not self.store.requeue_in_doubt(self.lease, 0.0, failure_class, message):
            self._lost()

    def requeue(self, delay: float, failure_class: FailureClass, message: str) -> None:
        """Back to the queue after `delay`, charged to the budget; raises if not ours."""
        self._last_write()
        if not self.store.requeue(self.lease, delay, failure_class, message):
            self._lost()

    @property
    def fence(self) -> ToolEffect | None:
        """The effect of the write this segment has in flight (its fence stands)."""
        return self._fence

    def _park(self, throttled: Throttled) -> RunResult:
        """No capacity for the model until later (SPEC §17): back to the queue until then,
        with a `throttled` event, not charged to the requeue budget."""
        payload = {
            "model": throttled.model,
            "why": "circuit_open" if throttled.circuit else "capacity",
            "delay": round(throttled.wait, 3),
            "worker": self.lease.owner,
        }
        try:
            self._last_write()
            if not self.store.park(self.lease, throttled.wait, payload):
                self._lost()
        except LeaseLost:
            return self._result(Outcome.LEASE_LOST)
        except RunCancelled:
            return self._result(Outcome.CANCELLED)
        except Exception:  # the park could not be stored: recovery decides, as for a failure
            return self._recover(throttled)
        log.info("run %s: parked %.1fs: %s", self.run_id, throttled.wait, throttled)
        return self._result(Outcome.REQUEUED, error=throttled)

    def _recover(self, exc: Exception) -> RunResult:
        outcome = _recovery.recover(self, exc)
        return self._result(outcome, error=exc)

    def _result(
        self, outcome: Outcome, output: str | None = None, error: BaseException | None = None
    ) -> RunResult:
        steps: list[Event] = []
        if self.collect_steps and self._written:
            mine = set(self._written)
            steps = [e for e in self.store.events(self.run_id, min(mine) - 1) if e.sequence in mine]
        return RunResult(outcome, self.run_id, output, steps, error, self._usage)


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


def _llm_payload(reply: ModelReply) -> dict[str, Any]:
    return {
        "message": reply.message(),
        "model": reply.model,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
            "cost": reply.usage.cost,
        },
    }


def _over_budget(request: RunRequest, usage: Usage) -> bool:
    if request.max_tokens is not None and usage.total_tokens >= request.max_tokens:
        return True
    return request.max_cost is not None and usage.cost >= request.max_cost


def _to_json_value(value: Any) -> Any:
    """The tool's return value as JSON stores it (verbatim where it is JSON already)."""
    return json.loads(json.dumps(value, default=str))
