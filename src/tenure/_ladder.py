"""One segment of a run (SPEC §6): journal → steps → settle, or failure recovery.

Every write a segment makes names its lease (owner + fencing token). A write that matches no
row means the run is no longer ours: the segment stops at once, writes nothing more and
settles nothing, because the row belongs to whoever holds it now.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from tenure import _indoubt, _policy, _recovery, _requests
from tenure._endings import Ending, Endings
from tenure._errors import (
    Cancelled,
    LeaseLost,
    ProviderError,
    RunCancelled,
    Throttled,
    UnknownModel,
)
from tenure._toolstep import ToolSteps
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
    Usage,
)
from tenure.agent import _functions, _human
from tenure.agent._journal import Journal
from tenure.agent._tools import Toolbox
from tenure.providers._base import ModelCall, ModelReply, Provider, streams
from tenure.store._base import NO_USAGE, Lease, NewEvent, Store

if TYPE_CHECKING:
    from tenure._capacity import Capacity
    from tenure._keeper import Keeper
    from tenure._publisher import DeltaPublisher
    from tenure.agent._functions import AgentFunction

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
    capacity: Capacity | None = None  # the models' limits and circuits (SPEC §17)
    agents: dict[str, AgentFunction] = field(default_factory=dict)  # by name (SPEC §20)

    def model_timeout(self, name: str) -> float:
        return self.model_timeouts.get(name, _policy.DEFAULT_MODEL_TIMEOUT)


@dataclass(frozen=True)
class StepInFlight:
    """The step a segment is executing now, as the worker that may give it up sees it."""

    sequence: int  # the sequence its event will take
    what: str  # "tool NAME", "model NAME", "probe of tool NAME"
    timeout: float
    deadline: float  # time.monotonic
    fence: ToolEffect | None  # the fence standing while it runs

    @property
    def why(self) -> str:
        return f"step {self.sequence} ({self.what}) ran past its deadline of {self.timeout:g} s"


@dataclass
class Segment(ToolSteps, Endings):
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
    _kept: bool = False  # the lease keeper renews this segment's lease
    _step: StepInFlight | None = None  # the step in flight, with its deadline
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16), from the claim: asked
    # of its tool's probe before anything else.
    fence_call: str | None = None
    _fence_probe: bool = False
    # The sequence of the run's last event when this segment began (its claim, or the
    # start of an interactive run); with the events it writes, the sequence its next
    # event will take.
    last_sequence: int = -1

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
        """Renewed only while the step in flight is within its deadline (a hung step lets
        its lease expire, and the reaper handles the run), and never once the segment was
        given up: a step that returns after that must not renew what it no longer holds."""
        step = self._step
        return not self._abort.is_set() and (step is None or now <= step.deadline)

    def past_deadline(self, now: float) -> StepInFlight | None:
        """The step in flight, if it has run past its deadline (a hung tool or model call).
        One read of the step: what a caller decides on is this step, not the next one."""
        step = self._step
        return step if step is not None and now > step.deadline else None

    def step_time_left(self, now: float) -> float:
        """Seconds until the step in flight reaches its deadline (0 without one)."""
        step = self._step
        return 0.0 if step is None else max(0.0, step.deadline - now)

    def mark_past_deadline(self, step: StepInFlight) -> bool:
        """Say on the run why its lease is about to lapse (SPEC §15): the reaper reports this
        step past its deadline instead of a worker that stopped renewing. Guarded by the
        lease and by the step: refused once the lease expired (a reaper may have requeued
        the run already) or once the step recorded its event or changed the fence."""
        return self.store.mark_step_deadline(self.lease, step.sequence - 1, step.fence, step.why)

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
        if keeper is not None and self._kept:
            keeper.release(self)
            self._kept = False
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
            self._kept = True
        try:
            return self._execute_kept()
        finally:
            if keeper is not None and self._kept:
                keeper.release(self)
                self._kept = False

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
            return self._run(request)
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
        """What this process lacks to execute the run: its agent function, or its model;
        its tools."""
        if request.agent is not None:
            missing = [] if request.agent in self.engine.agents else [f"agent {request.agent!r}"]
        elif request.model in self.engine.models:
            missing = []
        else:
            missing = [f"model {request.model!r}"]
        tools = self.engine.tools
        return missing + [f"tool {name!r}" for name in request.tools if tools.get(name) is None]

    def _hand_back_unserved(self, missing: list[str]) -> RunResult:
        """Never execute a run without its tools or model (a made-up answer would complete
        it): give it back untouched, for a worker that has them. Queues route runs to the
        workers that can serve them; this is the net under a misrouted run. A run that came
        in doubt goes back in doubt, its fence and call as they came, so that a worker with
        the write's tool asks its probe (never charged: this worker asked nothing)."""
        why = f"{self.lease.owner} cannot serve this run; it lacks"
        log.warning("run %s handed back: %s %s", self.run_id, why, ", ".join(missing))
        self._last_write()
        if not self.store.hand_back(self.lease, why, missing, self.fence_call):
            self._lost()
        error = ProviderError(FailureClass.CONFIGURATION, f"{why} {', '.join(missing)}")
        return self._result(Outcome.REQUEUED, error=error)

    def _run(self, request: RunRequest) -> RunResult | Ending:
        if request.agent is not None:
            # An agent function's in-doubt write is resolved at its own step, where the code
            # that made it names its tool (or step function) and probe.
            return _functions.drive(self, request, self.engine.agents[request.agent])
        return self._loop(request)

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
                timeout=self.engine.model_timeout(request.model),
                through=self._through,
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
        deltas = self.engine.deltas if streams(provider) else None
        stream = deltas.open(self.lease, self._next_sequence()) if deltas is not None else None
        if stream is not None:
            call = dataclasses.replace(call, on_delta=stream.add)
        try:
            return self._call_model(provider, call)
        finally:
            if stream is not None:
                stream.close()

    def _next_sequence(self) -> int:
        """The sequence the next event of this segment will take: while it holds the run,
        only it appends events."""
        return max(self._written, default=self.last_sequence) + 1

    def _call_model(self, provider: Provider, call: ModelCall) -> ModelReply:
        capacity = self.engine.capacity
        if capacity is not None:
            return capacity.call(self, provider, call)
        model = call.request.model
        with self.step_deadline(self.engine.model_timeout(model), f"model {model}"):
            return provider.complete(call)

    def _through(self, provider: Provider, call: ModelCall) -> ModelReply:
        """How a provider that calls others (`Fallback`) calls one of them: through that
        model's capacity and circuit, when it is registered under a name."""
        capacity = self.engine.capacity
        if capacity is None:
            return provider.complete(call)
        return capacity.member(self, provider, call)

    @property
    def wrote_anything(self) -> bool:
        """Whether this segment has recorded an event yet (its claim aside)."""
        return bool(self._written)

    @property
    def abort_signal(self) -> threading.Event:
        """Set when the run is no longer this segment's: what a step in flight watches."""
        return self._abort

    def result_of(self, outcome: Outcome) -> RunResult:
        return self._result(outcome)

    @contextlib.contextmanager
    def step_deadline(self, timeout: float, what: str) -> Iterator[None]:
        """A step in flight (`what`: "tool NAME", "model NAME"): the keeper renews the lease
        until `timeout` has passed."""
        self._step = StepInFlight(
            self._next_sequence(), what, timeout, time.monotonic() + timeout, self._fence
        )
        try:
            yield
        finally:
            self._step = None

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

    # -- a person in the loop ------------------------------------------------------------

    def _hold(self, request: RunRequest, journal: Journal) -> _human.Hold | None:
        tools = [self.tool_of(request, p.call.name) for p in journal.pending]
        approve_writes = self.engine.settings.approve_writes
        return _human.hold(journal, tools, self.decision, approve_writes=approve_writes)

    # -- failures ------------------------------------------------------------------------

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


_llm_payload = _functions.llm_payload
_over_budget = _functions._over_budget
