"""One segment of a run (SPEC §6): journal → steps → settle, or failure recovery.

A `Segment` drives one run for as long as it holds it: the built-in model/tool loop, or an
agent function (`agent/_functions.py`). Every write it makes goes through its `Steps`
(`_steps.py`), the one component that holds the lease, the fence and what was written; a
write that matches no row means the run is no longer ours, and the segment stops at once,
writing nothing more.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tenure import _budget, _indoubt, _policy, _recovery, _requests, _toolstep
from tenure._endings import Ending, outcome_of
from tenure._errors import (
    Cancelled,
    LeaseLost,
    ProviderError,
    RunCancelled,
    Throttled,
    UnknownModel,
)
from tenure._steps import Settings, StepInFlight, Steps
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.agent import _functions, _human
from tenure.agent._journal import Journal
from tenure.agent._tools import Tool, Toolbox
from tenure.providers._base import ModelCall, ModelReply, Provider, new_call, streams
from tenure.store._base import Lease, NewEvent, Settlement, Store

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from tenure._capacity import Capacity
    from tenure._keeper import Keeper
    from tenure._publisher import DeltaPublisher
    from tenure.agent._functions import AgentFunction

__all__ = ["Engine", "Segment", "Settings", "StepInFlight"]

log = logging.getLogger("tenure")


@dataclass
class Engine:
    store: Store
    tools: Toolbox
    models: dict[str, Provider]
    settings: Settings
    keeper: Keeper | None = None  # renews the leases of segments in flight (SPEC §15)
    model_timeouts: dict[str, float] = field(default_factory=dict)  # by model name
    deltas: DeltaPublisher | None = None  # publishes streaming calls' text (SPEC §18)
    capacity: Capacity | None = None  # the models' limits and circuits (SPEC §17)
    agents: dict[str, AgentFunction] = field(default_factory=dict)  # by name (SPEC §20)
    # How a request is checked before it is stored (the runtime's enqueue check): a child
    # run (SPEC §21) is refused exactly as `rt.enqueue` would refuse it.
    validate: Callable[[RunRequest], RunRequest] | None = None

    def model_timeout(self, name: str) -> float:
        return self.model_timeouts.get(name, _policy.DEFAULT_MODEL_TIMEOUT)


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
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16), from the claim: asked
    # of its tool's probe before anything else.
    fence_call: str | None = None
    # The sequence of the run's last event when this segment began (its claim, or the
    # start of an interactive run).
    last_sequence: int = -1
    _defer_end: bool = False  # return the normal end instead of settling it here
    _kept: bool = False  # the lease keeper renews this segment's lease
    _tree_root: str | None = None  # the root of the run's tree, read once (a budgeted run)
    steps: Steps = field(init=False)

    def __post_init__(self) -> None:
        self.steps = Steps(
            self.engine.store,
            self.lease,
            self.engine.settings,
            before_last_write=self._release_from_keeper,
            fence_call=self.fence_call,
            last_sequence=self.last_sequence,
        )

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    # -- what the lease keeper, the worker and the drain ask --------------------------------

    @property
    def lease_seconds(self) -> float:
        return self.engine.settings.lease_seconds

    def renewable(self, now: float) -> bool:
        return self.steps.renewable(now)

    def past_deadline(self, now: float) -> StepInFlight | None:
        return self.steps.past_deadline(now)

    def mark_past_deadline(self, step: StepInFlight) -> bool:
        return self.steps.mark_past_deadline(step)

    def step_time_left(self, now: float) -> float:
        return self.steps.step_time_left(now)

    def lose(self, cancelled: bool) -> None:
        self.steps.lose(cancelled)

    @property
    def fence(self) -> ToolEffect | None:
        """The effect of the write this segment has in flight (its fence stands)."""
        return self.steps.fence

    @property
    def fence_probe(self) -> bool:
        """The standing fence's tool has a probe: the run can go back in doubt."""
        return self.steps.fence_probe

    @property
    def abort_signal(self) -> threading.Event:
        """Set when the run is no longer this segment's: what a step in flight watches."""
        return self.steps.abort

    def step_deadline(self, timeout: float, what: str) -> AbstractContextManager[None]:
        return self.steps.step_deadline(timeout, what)

    @property
    def wrote_anything(self) -> bool:
        """Whether this segment has recorded an event yet (its claim aside)."""
        return bool(self.steps.written)

    def tree_root(self) -> str:
        """The root of the run's tree, whose ledger its model calls spend from (SPEC §21):
        read from the run's row at the first call of a run with a budget."""
        if self._tree_root is None:
            self._tree_root = _budget.tree_of(self.store, self.run_id)
        return self._tree_root

    def _release_from_keeper(self) -> None:
        keeper = self.engine.keeper
        if keeper is not None and self._kept:
            keeper.release(self)
            self._kept = False

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
            self._kept = True
        try:
            return self._execute_kept()
        finally:
            self._release_from_keeper()

    def _execute_kept(self) -> RunResult | Ending:
        try:
            request = self.request or _requests.claimed(self.raw_request)
        except Exception as exc:
            # A payload that cannot be read can never run: fail it now, never strand it
            # (whatever the exception: one that escaped here would leave the run running).
            return self.recover(ProviderError(FailureClass.CONFIGURATION, str(exc)))
        try:
            missing = [] if self.interactive else self._missing(request)
            if missing:
                return self.hand_back_unserved(missing)
            return self._run(request)
        except LeaseLost:
            return self.result(Outcome.LEASE_LOST)
        except RunCancelled:
            return self.result(Outcome.CANCELLED)
        except Cancelled:  # a step aborted because the keeper found the run gone
            return self.result(self._lost_outcome())
        except Throttled as exc:
            if self.interactive or self.steps.abort.is_set():
                return self.recover(exc)
            return self._park(exc)
        except Exception as exc:
            if self.steps.abort.is_set():  # whatever the aborted step raised: nothing to record
                return self.result(self._lost_outcome())
            return self.recover(exc)

    def _lost_outcome(self) -> Outcome:
        return Outcome.CANCELLED if self.steps.lost_cancelled else Outcome.LEASE_LOST

    def _missing(self, request: RunRequest) -> list[str]:
        """What this process lacks to execute the run: its agent function, or its model;
        its tools."""
        if request.agent is not None:
            missing = [] if request.agent in self.engine.agents else [f"agent {request.agent!r}"]
        elif request.model in self.engine.models:
            missing = []
        else:
            missing = [f"model {request.model!r}"]
        if not request.tools:
            return missing
        tools = self.engine.tools
        return missing + [f"tool {name!r}" for name in request.tools if tools.get(name) is None]

    def hand_back_unserved(self, missing: list[str]) -> RunResult:
        """Never execute a run without its tools or model (a made-up answer would complete
        it): give it back untouched, for a worker that has them. Queues route runs to the
        workers that can serve them; this is the net under a misrouted run. A run that came
        in doubt goes back in doubt, its fence and call as they came, so that a worker with
        the write's tool asks its probe (never charged: this worker asked nothing)."""
        why = f"{self.lease.owner} cannot serve this run; it lacks"
        log.warning("run %s handed back: %s %s", self.run_id, why, ", ".join(missing))
        self.steps.hand_back(why, missing)
        error = ProviderError(FailureClass.CONFIGURATION, f"{why} {', '.join(missing)}")
        return self.result(Outcome.REQUEUED, error=error)

    def _run(self, request: RunRequest) -> RunResult | Ending:
        if request.agent is not None:
            # An agent function's in-doubt write is resolved at its own step, where the code
            # that made it names its tool (or step function) and probe.
            return _functions.drive(self, request, self.engine.agents[request.agent])
        return self._loop(request)

    def _loop(self, request: RunRequest) -> RunResult | Ending:
        # The first segment of a run has no steps to resume: skip reading its journal. Its
        # only events are its request and its claim; a fork's first segment (attempt 0 too)
        # has the events it copied (SPEC §23).
        first = self.lease.attempt == 0 and self.last_sequence <= 1
        journal = Journal.rebuild(request, [] if first else self.store.events(self.run_id))
        provider = self.engine.models.get(request.model)
        if provider is None:
            raise ProviderError(FailureClass.CONFIGURATION, str(UnknownModel(request.model)))
        if self.fence_call is not None:
            settled = _indoubt.resolve(self.steps, self._tool_of(request), journal, self.fence_call)
            if settled is not None:
                return self.result(settled)
        while True:
            if journal.pending:
                # `tool_of` is made only here (a run without tool calls needs none).
                suspended = self._tool_steps(request, journal, self._tool_of(request))
                if suspended is not None:
                    return suspended
            if journal.answers >= request.max_iterations:
                return self.finish(TerminationReason.MAX_ITERATIONS)
            reply = self._model_turn(request, journal, provider)
            if reply is None:
                return self.finish(TerminationReason.BUDGET_EXHAUSTED)
            llm = NewEvent(EventKind.LLM, _functions.llm_payload(reply))
            if not reply.tool_calls:
                return self._complete(reply, llm)
            (sequence,) = self.steps.record([llm], reply.usage)
            journal.add_answer(sequence, reply)

    def _tool_steps(
        self, request: RunRequest, journal: Journal, tool_of: Callable[[str], Tool | None]
    ) -> RunResult | None:
        """The pending turn's calls, each a step; or the whole turn held for a person first
        (its result: the run is suspended)."""
        held = self._hold(journal, tool_of)
        if held is not None:
            return self.suspend(request, held)
        approve_writes = self.engine.settings.approve_writes
        for pending in list(journal.pending):
            tool = tool_of(pending.call.name)
            _toolstep.tool_step(self.steps, tool, journal, pending, self.decision, approve_writes)
        return None

    def _model_turn(
        self, request: RunRequest, journal: Journal, provider: Provider
    ) -> ModelReply | None:
        """The built-in loop's model step; None when the budget is spent: the run's own
        (no call needed to know it) or its tree's, on the ledger."""
        if _functions.over_budget(request, journal.usage):
            return None
        call = new_call(
            messages=list(journal.messages),
            tools=self.engine.tools.specs(request.tools),
            run_id=self.lease.run_id,
            attempt=self.lease.attempt,
            request=request,
            abort=self.steps.abort,
            timeout=self.engine.model_timeout(request.model),
            through=self.through,
        )
        try:
            return self.ask(provider, call)
        except _budget.BudgetSpent:
            return None

    def _tool_of(self, request: RunRequest) -> Callable[[str], Tool | None]:
        """The tool a call names, if the run may use it and this process has it."""
        tools = self.engine.tools

        def tool_of(name: str) -> Tool | None:
            return tools.get(name) if name in request.tools else None

        return tool_of

    # -- the model step ------------------------------------------------------------------

    def ask(self, provider: Provider, call: ModelCall) -> ModelReply:
        """The model step, on its run tree's budget when the run has one (SPEC §21): raises
        `BudgetSpent` when that is spent."""
        request = call.request  # `_budget.has_budget`, inline: every model step asks it
        if request.max_tokens is None and request.max_cost is None:
            return self._ask(provider, call)
        return _budget.spend(self, provider, call, lambda: self._ask(provider, call))

    def _ask(self, provider: Provider, call: ModelCall) -> ModelReply:
        """A streaming provider's text is published while it arrives (SPEC §18); the
        call's last deltas are out before its `llm` event is recorded."""
        deltas = self.engine.deltas if streams(provider) else None
        stream = deltas.open(self.lease, self.steps.next_sequence()) if deltas is not None else None
        if stream is not None:
            call = dataclasses.replace(call, on_delta=stream.add)
        try:
            return self._call_model(provider, call)
        finally:
            if stream is not None:
                stream.close()

    def _call_model(self, provider: Provider, call: ModelCall) -> ModelReply:
        capacity = self.engine.capacity
        if capacity is not None:
            return capacity.call(
                self.steps,
                provider,
                call,
                timeout_of=self.engine.model_timeout,
                interactive=self.interactive,
            )
        model = call.request.model
        with self.steps.step_deadline(self.engine.model_timeout(model), f"model {model}"):
            return provider.complete(call)

    def through(self, provider: Provider, call: ModelCall) -> ModelReply:
        """How a provider that calls others (`Fallback`) calls one of them: through that
        model's capacity and circuit, when it is registered under a name."""
        capacity = self.engine.capacity
        if capacity is None:
            return provider.complete(call)
        return capacity.member(self.steps, provider, call, self.engine.model_timeout)

    # -- a person in the loop ------------------------------------------------------------

    def _hold(self, journal: Journal, tool_of: Callable[[str], Tool | None]) -> _human.Hold | None:
        tools = [tool_of(p.call.name) for p in journal.pending]
        approve_writes = self.engine.settings.approve_writes
        return _human.hold(journal, tools, self.decision, approve_writes=approve_writes)

    def suspend(self, request: RunRequest, held: _human.Hold) -> RunResult:
        """Hold the run for a person, without a lease or a slot."""
        timeout = held.timeout or self.engine.settings.approval_timeout
        waiting = {"kind": held.kind, "turn": held.turn, "calls": held.calls}
        stored = None if not self.interactive else _requests.dumps(_requests.to_json(request))
        self.steps.suspend(held.status, waiting, stored, timeout)
        kind = held.kind
        outcome = Outcome.AWAITING_APPROVAL if kind == "approval" else Outcome.AWAITING_INPUT
        return self.result(outcome)

    def wait_for_children(self, request: RunRequest, children: list[str]) -> RunResult | None:
        """Wait for `children` without a lease or a slot (SPEC §21); None when all of them
        are terminal already, and the segment goes on."""
        stored = None if not self.interactive else _requests.dumps(_requests.to_json(request))
        if not self.steps.wait_for_children(children, stored):
            # Still held, and going on: the keeper (let go of before the write that was to
            # end the hold) renews its lease again.
            keeper = self.engine.keeper
            if keeper is not None and not self._kept:
                keeper.keep(self)
                self._kept = True
            return None
        return self.result(Outcome.AWAITING_CHILDREN)

    # -- ends ------------------------------------------------------------------------------

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
        self.steps.usage += reply.usage
        return self.end(settlement, output=text)

    def finish(self, reason: TerminationReason) -> RunResult | Ending:
        return self.end(Settlement(RunStatus.FAILED, reason, error=f"run ended: {reason}"))

    def end(self, settlement: Settlement, output: str | None = None) -> RunResult | Ending:
        """The normal end: settled here, or returned for the caller to commit (a worker
        commits the ends of several runs, and its next claim, in one transaction). An agent
        function's answer still held rides in the same transaction, as `_complete`'s does."""
        if self.steps.held:
            settlement = self.steps.carry_held(settlement)
        self.steps.last_write()
        if self._defer_end:
            return Ending(settlement)
        self.steps.settle(settlement)
        return self.result(outcome_of(settlement), output=output)

    def settled(self, settlement: Settlement, sequences: list[int] | None) -> Outcome:
        """The outcome of an ending committed by someone else, given what its settle
        returned (None: the guard matched nothing)."""
        if sequences is not None:
            self.steps.written.extend(sequences)
            return outcome_of(settlement)
        try:
            self.steps.lost()
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception:  # LeaseLost, or the status read failed: the settle did not apply
            return Outcome.LEASE_LOST

    def settle_alone(self, settlement: Settlement) -> Outcome:
        """Settle an ending on its own (its batch could not be committed), with this
        segment's own failure recovery if that fails too."""
        try:
            self.steps.settle(settlement)
        except LeaseLost:
            return Outcome.LEASE_LOST
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception as exc:
            return self.recover(exc).outcome
        return outcome_of(settlement)

    def _park(self, throttled: Throttled) -> RunResult:
        """No capacity for the model until later (SPEC §17): back to the queue until then,
        with a `throttled` event, not charged to the requeue budget."""
        payload = {
            "model": throttled.model,
            "why": _park_reason(throttled),
            "delay": round(throttled.wait, 3),
            "worker": self.lease.owner,
        }
        try:
            self.steps.park(throttled.wait, payload, EventKind.THROTTLED)
        except LeaseLost:
            return self.result(Outcome.LEASE_LOST)
        except RunCancelled:
            return self.result(Outcome.CANCELLED)
        except Exception:  # the park could not be stored: recovery decides, as for a failure
            return self.recover(throttled)
        log.info("run %s: parked %.1fs: %s", self.run_id, throttled.wait, throttled)
        return self.result(Outcome.REQUEUED, error=throttled)

    def sleep_until(self, delay: float, payload: dict[str, Any]) -> RunResult:
        """An agent function's long sleep (SPEC §20): back to the queue until it is due,
        uncharged, with a `sleeping` event; the function is replayed to it then."""
        self.steps.park(delay, payload, EventKind.SLEEPING)
        return self.result(Outcome.SLEEPING)

    # -- failures ------------------------------------------------------------------------

    def recover(self, exc: Exception) -> RunResult:
        outcome = _recovery.recover(
            self.steps, exc, interactive=self.interactive, requeue_count=self.requeue_count
        )
        return self.result(outcome, error=exc)

    def result(
        self, outcome: Outcome, output: str | None = None, error: BaseException | None = None
    ) -> RunResult:
        steps: list[Event] = []
        written = self.steps.written
        if self.collect_steps and written:
            mine = set(written)
            steps = [e for e in self.store.events(self.run_id, min(mine) - 1) if e.sequence in mine]
        return RunResult(outcome, self.run_id, output, steps, error, self.steps.usage)


def _park_reason(throttled: Throttled) -> str:
    if isinstance(throttled, _budget.BudgetBusy):
        return "budget"
    return "circuit_open" if throttled.circuit else "capacity"
