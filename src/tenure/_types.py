"""Enumerations and plain records of tenure (SPEC §3, §4, §9). No I/O, no other tenure import."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

R = TypeVar("R")


def direct_init(cls: type[R]) -> type[R]:
    """Give a frozen dataclass an `__init__` that fills the new instance's `__dict__`, where
    the one `dataclass(frozen=True)` writes calls `object.__setattr__` once per field (a
    slot wrapper called with an argument tuple, each time): the same parameters, defaults,
    default factories and `__post_init__`, about half the cost. For the records every run
    makes several of (its events, its lease, its settlement ...). Applied above
    `@dataclass(frozen=True)`; a feature it does not reproduce is refused here."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not params.frozen or not params.init or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: direct_init is for frozen dataclasses with a __dict__")
    namespace: dict[str, Any] = {"_FACTORY": object()}
    args, lines = ["self"], ["fields = self.__dict__"]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = f.name
        if f.kw_only or not f.init or name in ("self", "fields", "_FACTORY"):
            raise TypeError(f"{cls.__name__}.{name}: not a field direct_init can fill")
        value = name
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{name}"] = f.default
            args.append(f"{name}=_default_{name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{name}"] = f.default_factory
            args.append(f"{name}=_FACTORY")
            value = f"_factory_{name}() if {name} is _FACTORY else {name}"
        else:
            args.append(name)
        lines.append(f"fields[{name!r}] = {value}")
    if hasattr(cls, "__post_init__"):
        lines.append("self.__post_init__()")
    body = "\n    ".join(lines)
    exec(f"def __init__({', '.join(args)}) -> None:\n    {body}\n", namespace)
    init = namespace["__init__"]
    init.__annotations__ = cls.__init__.__annotations__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_CHILDREN = "waiting_for_children"  # an agent function's ctx.wait (SPEC §21)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class TerminationReason(StrEnum):
    COMPLETED = "completed"
    MAX_ITERATIONS = "max_iterations"
    BUDGET_EXHAUSTED = "budget_exhausted"
    POLICY_DENIED = "policy_denied"
    APPROVAL_DENIED = "approval_denied"
    PROVIDER_FAILED = "provider_failed"
    CANCELLED = "cancelled"
    RETRIES_EXHAUSTED = "retries_exhausted"
    NOT_RETRYABLE = "not_retryable"

    @property
    def is_dead_letter(self) -> bool:
        return self in DEAD_LETTER_REASONS


DEAD_LETTER_REASONS = frozenset(
    {TerminationReason.RETRIES_EXHAUSTED, TerminationReason.NOT_RETRYABLE}
)


class Outcome(StrEnum):
    """What one segment returned to its caller. Match with a default arm: values may be added."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    LEASE_LOST = "lease_lost"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INPUT = "awaiting_input"
    SLEEPING = "sleeping"  # an agent function's `ctx.sleep` ended the segment (SPEC §20)
    AWAITING_CHILDREN = "awaiting_children"  # `ctx.wait`: the run waits for children (§21)


class FailureClass(StrEnum):
    CONNECTION = "connection"
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    CONFIGURATION = "configuration"
    CLIENT_ERROR = "client_error"
    SERVER_ERROR = "server_error"
    CIRCUIT_OPEN = "circuit_open"
    UNKNOWN = "unknown"

    @property
    def is_retryable(self) -> bool:
        return self in RETRYABLE_CLASSES


RETRYABLE_CLASSES = frozenset(
    {
        FailureClass.CONNECTION,
        FailureClass.TIMEOUT,
        FailureClass.RATE_LIMIT,
        FailureClass.SERVER_ERROR,
        FailureClass.CIRCUIT_OPEN,
    }
)


class ToolEffect(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"

    @property
    def is_write(self) -> bool:
        return self is not ToolEffect.READ_ONLY


class EventKind(StrEnum):
    REQUEST = "request"
    LLM = "llm"
    TOOL = "tool"
    ASSEMBLED = "assembled"
    APPROVAL = "approval"
    INPUT = "input"
    CLAIMED = "claimed"
    REQUEUED = "requeued"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    REDRIVEN = "redriven"
    PROBE = "probe"
    THROTTLED = "throttled"
    STEP = "step"  # an agent function's step other than a model or tool call (SPEC §20)
    SLEEPING = "sleeping"  # an agent function's durable timer (SPEC §20)
    FORKED = "forked"  # a fork's first own event, after the copy of its original's (SPEC §23)
    WAITING = "waiting"  # an agent function waits for child runs (SPEC §21)


@direct_init
@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        # Filled directly, not through the frozen dataclass's `__init__` (an
        # `object.__setattr__` per field): every model step of every run adds one.
        total: Usage = object.__new__(Usage)
        total.__dict__.update(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost=self.cost + other.cost,
        )
        return total

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ForkedFrom:
    """Where a fork came from (SPEC §23): the original run and the sequence it was forked
    at (the fork holds a copy of the original's events before it)."""

    run_id: str
    sequence: int


_EMPTY_WHEN_NONE = ("termination_reason", "pending_effect", "error_class")


@dataclass(frozen=True)
class Run:
    """One run row (SPEC §4). `request` is None in what `status()` and `runs()` return."""

    id: str
    queue: str
    status: RunStatus
    termination_reason: TerminationReason | None
    request: dict[str, Any] | None
    idempotency_key: str | None
    claimed_by: str
    lease_expires: datetime | None
    lease_token: int
    requeue_count: int
    available_at: datetime
    pending_effect: ToolEffect | None
    attempt: int
    error_class: FailureClass | None
    error: str
    output: str | None
    input_tokens: int
    output_tokens: int
    cost: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    # While waiting for a person: what for (kind, the held calls; sensitive arguments hidden)
    # and until when the reaper waits (approval timeout).
    waiting: dict[str, Any] | None = None
    wait_deadline: datetime | None = None
    # The standing fence's tool has a probe (SPEC §16): the run goes back in doubt, and the
    # next segment asks the probe whether the write happened, instead of dead-lettering it.
    fence_probe: bool = False
    # A fork (SPEC §23): the run it was forked from and the sequence it was forked at.
    forked_from: ForkedFrom | None = None
    # A child run's parent (SPEC §21), and the root of its tree (its own id for a run
    # without a parent).
    parent_id: str | None = None
    root_id: str | None = None
    # SPEC §22: the run's priority and concurrency key.
    priority: int = 0
    concurrency_key: str | None = None
    # Set when the row could not be fully decoded (a corrupt value, a timestamp out of
    # range): which fields, and why. Those fields hold None, or for a required timestamp
    # 0001-01-01 UTC; the rest of the row is as stored.
    damaged: str | None = None

    @property
    def is_dead_letter(self) -> bool:
        return self.status is RunStatus.FAILED and self.termination_reason in DEAD_LETTER_REASONS

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready values keyed by the SPEC §4 names (times as ISO-8601)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, ForkedFrom):
                value = {"run_id": value.run_id, "sequence": value.sequence}
            elif value is None and f.name in _EMPTY_WHEN_NONE:
                value = ""
            out[f.name] = value
        return out


@dataclass(frozen=True)
class Event:
    run_id: str
    sequence: int
    attempt: int
    kind: EventKind
    payload: dict[str, Any]
    created_at: datetime
    # The fencing token the event was written under (the writer's, for a segment's steps).
    lease_token: int = 0
    # Set when the row could not be decoded: why. The payload is then `{"damaged": why}`
    # (what was stored is not readable), an unreadable time 0001-01-01 UTC.
    damaged: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "sequence": self.sequence,
            "attempt": self.attempt,
            "kind": str(self.kind),
            "payload": self.payload,
            "created_at": self.created_at.isoformat(),
            "lease_token": self.lease_token,
            "damaged": self.damaged,
        }


@dataclass(frozen=True)
class RunRequest:
    """What to run. Validated by `Runtime.enqueue` / `Runtime.run` (bad input raises ValueError).

    `script` carries the turns of the `Scripted` provider so that any worker can execute it.
    `max_tokens` and `max_cost` are budgets counted across all attempts of the run.
    """

    prompt: str = ""
    model: str = "default"
    tools: tuple[str, ...] | list[str] = ()
    max_iterations: int = 10
    queue: str = "default"
    idempotency_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    script: list[dict[str, Any]] | None = None
    system: str | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    # An agent function's run (SPEC §20): the registered function's name and its arguments,
    # checked against its signature at enqueue. `prompt` is then optional.
    agent: str | None = None
    input: dict[str, Any] | None = None
    # A queue shared by many tenants (SPEC §22): a higher priority is claimed first within a
    # queue (PRIORITY_MIN..PRIORITY_MAX); at most the key's limit of runs with the same
    # concurrency key run at once (`Runtime.set_concurrency_limit`).
    priority: int = 0
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tools, list):
            object.__setattr__(self, "tools", tuple(self.tools))


@dataclass(frozen=True)
class ReapReport:
    requeued: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    expired: int = 0  # runs that waited for a person past their approval timeout

    def __add__(self, other: ReapReport) -> ReapReport:
        return ReapReport(
            self.requeued + other.requeued,
            self.dead_lettered + other.dead_lettered,
            self.skipped + other.skipped,
            self.expired + other.expired,
        )


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    run_id: str
    output: str | None = None
    steps: list[Event] = field(default_factory=list)
    error: BaseException | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Probe:
    """What a write tool's probe found out about an interrupted write (SPEC §16): it
    happened (`done`, with the result that stands for the write's return value), it did not
    (`not_done`: the write runs again, with the same idempotency key), or the outside
    system cannot tell (`unknown`: the run is dead-lettered with its fence standing)."""

    verdict: str  # "done" | "not_done" | "unknown"
    result: Any = None
    reason: str = ""

    @classmethod
    def done(cls, result: Any = None) -> Probe:
        return cls("done", result=result)

    @classmethod
    def not_done(cls) -> Probe:
        """Say this only if the interrupted call can no longer land: a worker frozen inside
        it can wake and finish it. Have the outside system deduplicate by idempotency key,
        or refuse a write under a fencing token older than the probe's (docs/probes.md)."""
        return cls("not_done")

    @classmethod
    def unknown(cls, reason: str) -> Probe:
        return cls("unknown", reason=str(reason))


@dataclass(frozen=True)
class ToolContext:
    """Given to a tool whose first parameter is annotated `tenure.ToolContext`.

    Pass `idempotency_key` (stable across attempts) and `fencing_token` (grows with every
    claim) to the outside system so that a repeated or late write can be recognised there.
    """

    run_id: str
    attempt: int
    idempotency_key: str
    fencing_token: int
    effect: ToolEffect
    # Set when the segment lost its run (cancelled, reaped, redriven): see `cancelled`.
    abort: threading.Event | None = field(default=None, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """True once the run is no longer this segment's (cancelled, or its lease lost): a
        long tool should stop; whatever it returns now is not recorded."""
        return self.abort is not None and self.abort.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise `tenure.Cancelled` if `cancelled`."""
        if self.cancelled:
            from tenure._errors import Cancelled  # the exception tree imports this module

            raise Cancelled(f"run {self.run_id} is no longer held by this segment")


@dataclass(frozen=True)
class Delta:
    """A piece of the answer text of a model call in flight, as `Runtime.stream` yields it
    (SPEC §18). `sequence` is the sequence the call's `llm` event will take: a call retried
    after a failure gets a new one (its run's `requeued` and `claimed` events come between),
    so a reader that sees a new `sequence` knows the text starts over. The deltas of a
    sequence are abandoned when the event recorded at that sequence is not an `llm` event.
    Deltas are never journal events."""

    sequence: int
    text: str

    def to_json(self, run_id: str) -> dict[str, Any]:
        return {"kind": "delta", "run_id": run_id, "sequence": self.sequence, "text": self.text}
