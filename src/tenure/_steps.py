"""A segment's hold on its run, and every guarded write it makes under it (SPEC §5, §6).

`Steps` is built from explicit inputs — the store, the lease, the settings, the fence the
run was claimed with — and knows nothing of who calls it: the built-in loop (`_ladder.py`)
and agent functions (`agent/_functions.py`) make their steps through the same methods, so
that a step's heartbeat, a write's fence and a segment's end are each written in one place.

Every write names the lease (owner and fencing token). A write that matches no row means
the run is no longer ours: `lost()` raises `LeaseLost` (or `RunCancelled`), and nothing more
is written. The lease keeper asks `renewable`/`overdue` and calls `lose` when a renewal
misses.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tenure import _json, _loop, _policy
from tenure._abort import Abort
from tenure._classify import describe
from tenure._errors import Cancelled, LeaseLost, ProviderError, RunCancelled
from tenure._types import EventKind, FailureClass, RunStatus, ToolContext, ToolEffect, Usage
from tenure.agent._tools import Tool
from tenure.store._base import NO_USAGE, Lease, NewEvent, Settlement, Store


@dataclass(frozen=True)
class Settings:
    lease_seconds: float = _policy.DEFAULT_LEASE_SECONDS
    max_requeues: int = _policy.DEFAULT_MAX_REQUEUES
    backoff_base: float = _policy.DEFAULT_BACKOFF_BASE
    backoff_cap: float = _policy.DEFAULT_BACKOFF_CAP
    approve_writes: bool = False
    approval_timeout: float | None = None


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


@dataclass(frozen=True)
class StepInFlight:
    """The step a segment is executing now, as the worker that may give it up sees it."""

    sequence: int  # the sequence its event will take
    what: str  # "tool NAME", "model NAME", "probe of tool NAME", "sleep"
    timeout: float
    deadline: float  # time.monotonic
    fence: ToolEffect | None  # the fence standing while it runs

    @property
    def why(self) -> str:
        return f"step {self.sequence} ({self.what}) ran past its deadline of {self.timeout:g} s"


@dataclass
class Steps:
    """The guarded writes of one segment, and the state they keep: the fence standing, the
    events written, the usage recorded, the step in flight's deadline and the abort."""

    store: Store
    lease: Lease
    settings: Settings
    # Called before the write that ends the hold (a settle, a requeue, a hold for a person):
    # the keeper stops renewing first, so that a renewal racing this write never mistakes
    # the run's new state for a lost lease.
    before_last_write: Callable[[], None] = lambda: None
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16), from the claim.
    fence_call: str | None = None
    # The sequence of the run's last event when this segment began (its claim, or the
    # start of an interactive run).
    last_sequence: int = -1
    fence: ToolEffect | None = None
    fence_probe: bool = False
    written: list[int] = field(default_factory=list)
    usage: Usage = NO_USAGE  # frozen: shared, and replaced by `+=`
    # Set when the run is no longer this segment's; aborts the step in flight.
    abort: threading.Event = field(default_factory=Abort)
    lost_cancelled: bool = False
    step: StepInFlight | None = None  # the step in flight, with its deadline
    # An agent function's model answer made but not recorded yet (SPEC §20), and its usage:
    # it rides with this segment's next write, or with its end, as the built-in loop's last
    # answer rides with the run's settle. Lost only where that one is: with the run.
    held: tuple[NewEvent, ...] = ()
    held_usage: Usage = NO_USAGE

    def __post_init__(self) -> None:
        if self.fence_call is not None:  # the fence the run was requeued with still stands
            self.fence, self.fence_probe = ToolEffect.NON_IDEMPOTENT_WRITE, True

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def lease_seconds(self) -> float:
        return self.settings.lease_seconds

    # -- what the lease keeper asks --------------------------------------------------------

    def renewable(self, now: float) -> bool:
        """Renewed only while the step in flight is within its deadline (a hung step lets
        its lease expire, and the reaper handles the run), and never once the segment was
        given up: a step that returns after that must not renew what it no longer holds."""
        step = self.step
        return not self.abort.is_set() and (step is None or now <= step.deadline)

    def past_deadline(self, now: float) -> StepInFlight | None:
        """The step in flight, if it has run past its deadline (a hung tool or model call).
        One read of the step: what a caller decides on is this step, not the next one."""
        step = self.step
        return step if step is not None and now > step.deadline else None

    def step_time_left(self, now: float) -> float:
        """Seconds until the step in flight reaches its deadline (0 without one)."""
        step = self.step
        return 0.0 if step is None else max(0.0, step.deadline - now)

    def mark_past_deadline(self, step: StepInFlight) -> bool:
        """Say on the run why its lease is about to lapse (SPEC §15): the reaper reports this
        step past its deadline instead of a worker that stopped renewing. Guarded by the
        lease and by the step: refused once the lease expired (a reaper may have requeued
        the run already) or once the step recorded its event or changed the fence."""
        return self.store.mark_step_deadline(self.lease, step.sequence - 1, step.fence, step.why)

    def lose(self, cancelled: bool) -> None:
        """The run is no longer ours: the step in flight is aborted and every later write is
        refused without asking the database."""
        self.lost_cancelled = cancelled
        self.abort.set()

    def step_deadline(self, timeout: float, what: str) -> _StepDeadline:
        """A step in flight (`what`: "tool NAME", "model NAME"): the keeper renews the lease
        until `timeout` has passed."""
        return _StepDeadline(self, timeout, what)

    def begin_step(self, timeout: float, what: str) -> None:
        """`step_deadline`'s entry as plain code, for the model step every run makes: the
        caller sets `step` back to None in its `finally`."""
        # The frozen dataclass's fields filled directly (its `__init__` makes an
        # `object.__setattr__` per field): the same object, at every run's model step.
        step: StepInFlight = object.__new__(StepInFlight)
        step.__dict__.update(
            sequence=self.next_sequence(),
            what=what,
            timeout=timeout,
            deadline=time.monotonic() + timeout,
            fence=self.fence,
        )
        self.step = step

    # -- holding the run -------------------------------------------------------------------

    def check_held(self) -> None:
        if self.abort.is_set():
            raise RunCancelled(self.run_id) if self.lost_cancelled else LeaseLost(self.run_id)

    def lost(self) -> NoReturn:
        """Our guard matched nothing: either the run was cancelled (stop quietly) or it now
        belongs to someone else (stop without a trace)."""
        if self.store.run_status(self.run_id) is RunStatus.CANCELLED:
            raise RunCancelled(self.run_id)
        raise LeaseLost(self.run_id)

    def last_write(self) -> None:
        """Before the write that ends this segment's hold on the run."""
        if self.held:
            self.record_held()
        self.before_last_write()
        self.check_held()

    def next_sequence(self) -> int:
        """The sequence the next event of this segment will take: while it holds the run,
        only it appends events."""
        return max(self.written, default=self.last_sequence) + 1

    # -- steps -----------------------------------------------------------------------------

    def hold(self, event: NewEvent, usage: Usage) -> None:
        """Keep `event` (a model answer) for this segment's next write or its end."""
        self.record_held()
        self.held, self.held_usage = (event,), usage

    def record_held(self) -> None:
        """Record the held answer now, if there is one (before anything else happens)."""
        if self.held:
            self.record([])

    def carry_held(self, settlement: Settlement) -> Settlement:
        """`settlement` with the held answer as its first events: one transaction, as the
        built-in loop's `_complete` settles its last answer."""
        if not self.held:
            return settlement
        events, usage = self.held, self.held_usage
        self.held, self.held_usage = (), NO_USAGE
        self.usage += usage
        return dataclasses.replace(
            settlement, events=(*events, *settlement.events), usage=settlement.usage + usage
        )

    def record(self, events: list[NewEvent], usage: Usage = NO_USAGE) -> list[int]:
        """Heartbeat and append in one transaction (the step boundary)."""
        if self.held:
            # Taken whatever happens next: a write that fails loses it, as it would have
            # lost it recorded alone (the model is asked again by the next attempt).
            events, usage = [*self.held, *events], self.held_usage + usage
            self.held, self.held_usage = (), NO_USAGE
        self.check_held()
        sequences = self.store.record_step(self.lease, self.settings.lease_seconds, events, usage)
        if sequences is None:
            self.lost()
        self.written.extend(sequences)
        self.usage += usage
        return sequences

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
        function's position) for the fence's record. The one place a write is fenced."""
        if self.held:  # durable before the step runs
            self.record_held()
        self.check_held()
        if tool.effect.is_write:
            # The fence names the call it stands for, so that any process can later ask the
            # tool's probe whether it happened (SPEC §16).
            call = {"name": tool.name, "args": args, "idempotency_key": key, **where}
            lease_for_tool = _policy.fence_lease(self.settings.lease_seconds, tool.timeout)
            probe = tool.probe is not None
            if not self.store.mark_fence(self.lease, tool.effect, lease_for_tool, call, probe):
                self.lost()  # the write does not run: this segment holds no lease
            self.fence, self.fence_probe = tool.effect, probe
        context = ToolContext(
            self.run_id, self.lease.attempt, key, self.lease.token, tool.effect, self.abort
        )
        try:
            what = f"{'step' if where.get('step') == 'step' else 'tool'} {tool.name}"
            with self.step_deadline(tool.timeout, what):
                return to_json_value(invoke(context)), None
        except ProviderError:
            raise  # a classified failure fails the step: failure recovery decides
        except (_loop.TimedOut, Cancelled) as exc:
            if isinstance(exc, Cancelled) and self.abort.is_set():
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
        self.check_held()  # a write whose segment lost its run leaves its fence standing
        try:
            sequence = self.store.clear_fence(self.lease, self.settings.lease_seconds, event)
        except Exception as exc:
            raise UnrecordedWrite(name, exc) from exc
        if sequence is None:
            self.lost()
        self.fence, self.fence_probe = None, False
        self.written.append(sequence)

    def resolve_fence(self, events: list[NewEvent]) -> None:
        """Clear an in-doubt fence with the probe's events, in one transaction."""
        if self.held:
            self.record_held()
        self.check_held()
        sequences = self.store.resolve_fence(self.lease, self.settings.lease_seconds, events)
        if sequences is None:
            self.lost()
        self.fence, self.fence_probe = None, False
        self.written.extend(sequences)

    # -- ends ------------------------------------------------------------------------------

    def settle(self, settlement: Settlement) -> None:
        """A terminal state; LeaseLost or RunCancelled if the row is no longer ours."""
        settlement = self.carry_held(settlement)
        self.last_write()
        sequences = self.store.settle(self.lease, settlement)
        if sequences is None:
            self.lost()
        self.written.extend(sequences)

    def requeue(self, delay: float, failure_class: FailureClass, message: str) -> None:
        """Back to the queue after `delay`, charged to the budget."""
        self.last_write()
        if not self.store.requeue(self.lease, delay, failure_class, message):
            self.lost()

    def requeue_in_doubt(self, failure_class: FailureClass, message: str) -> None:
        """Back to the queue with the probe-able fence standing (SPEC §16), charged to the
        budget; claimable at once, since the probe decides."""
        self.last_write()
        if not self.store.requeue_in_doubt(self.lease, 0.0, failure_class, message):
            self.lost()

    def park(self, delay: float, payload: dict[str, Any], kind: EventKind) -> None:
        """Back to the queue until `delay` from now, not charged (a model's capacity, SPEC
        §17, or an agent function's long sleep, §20), with an event of `kind`."""
        self.last_write()
        if not self.store.park(self.lease, delay, payload, kind):
            self.lost()

    def suspend(
        self,
        status: RunStatus,
        waiting: dict[str, Any],
        stored_request: str | None,
        timeout: float | None,
    ) -> None:
        """Hold the run for a person, without a lease; raises if the run is not ours, and
        ProviderError if the hold could not be stored (never promise a resume that cannot
        happen)."""
        self.last_write()
        try:
            sequences = self.store.suspend(self.lease, status, waiting, stored_request, timeout, [])
        except Exception as exc:
            raise ProviderError(
                FailureClass.UNKNOWN, f"could not hold the run for a person: {exc}"
            ) from exc
        if sequences is None:
            self.lost()

    def wait_for_children(self, children: list[str], stored_request: str | None) -> bool:
        """SPEC §21: the run waits for `children` without a lease (True), unless all of
        them are terminal already (False: the run goes on, still held). Raises if the run
        is not ours, and ProviderError if the wait could not be stored."""
        self.last_write()
        try:
            written = self.store.wait_for_children(self.lease, children, stored_request)
        except Exception as exc:
            raise ProviderError(
                FailureClass.UNKNOWN, f"could not wait for the run's children: {exc}"
            ) from exc
        if written is None:
            self.lost()
        return written is not False

    def hand_back(self, why: str, missing: list[str]) -> None:
        """Back to the queue untouched (no attempt, no budget), with the in-doubt fence and
        call it came with, if any."""
        self.last_write()
        if not self.store.hand_back(self.lease, why, missing, self.fence_call):
            self.lost()


class _StepDeadline:
    """`Steps.step_deadline`'s context (a class: every model and tool step enters one, and
    a generator-based context cost several times as much)."""

    __slots__ = ("_steps", "_timeout", "_what")

    def __init__(self, steps: Steps, timeout: float, what: str) -> None:
        self._steps, self._timeout, self._what = steps, timeout, what

    def __enter__(self) -> None:
        self._steps.begin_step(self._timeout, self._what)

    def __exit__(self, *exc: object) -> None:
        self._steps.step = None


def to_json_value(value: Any) -> Any:
    """The tool's return value as the store keeps it, and so as a resumed run reads it back:
    what JSON cannot hold (NaN, infinities, integers beyond 64 bits, lone surrogates) as the
    same text the store writes. The live transcript is built from this value, so that the
    model is shown the same message with or without a crash in between."""
    return _json.json_safe(json.loads(json.dumps(value, default=str)))
