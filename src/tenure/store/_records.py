"""The values the store protocol passes: leases, claims, events to append, settlements, and
the rows of workers and models. Plain frozen dataclasses, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from tenure._limits import Limits
from tenure._types import (
    EventKind,
    FailureClass,
    RunStatus,
    TerminationReason,
    ToolEffect,
    Usage,
    direct_init,
)

NO_USAGE = Usage()
# The tokens and cost shown per queue: of its runs not yet ended and of those that ended in
# this many last seconds (a day: an all-time sum would read the whole history).
QUEUE_TOTALS_WINDOW = 86_400.0


@direct_init
@dataclass(frozen=True)
class Lease:
    """What a segment holds: the run, who it is, and the fencing token of its claim."""

    run_id: str
    owner: str
    token: int
    attempt: int
    # Whether the run may have a parent: its claim says when it has none, and then its
    # settle on PostgreSQL need not lock a parent first (`settle_batch_parents_first`).
    # Unknown is taken as yes. Not part of the lease's identity.
    has_parent: bool = field(default=True, compare=False)


@dataclass(frozen=True)
class ChildState:
    """What a parent reads of one child it waits for (SPEC §21)."""

    id: str
    status: str
    reason: str
    error: str
    output: str | None


@direct_init
@dataclass(frozen=True)
class Claimed:
    lease: Lease
    request: str | None  # raw JSON as stored; parsing it is the runtime's job
    requeue_count: int
    decision: str | None = None  # raw JSON: a person's decision the run continues with
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16): the new segment asks
    # that tool's probe whether the write happened before anything else.
    fence_call: str | None = None
    # The sequence of the run's last event once claimed (its `claimed` event): what the
    # segment counts its events from, to name the call it streams (SPEC §18).
    last_sequence: int = -1


@direct_init
@dataclass(frozen=True)
class NewEvent:
    kind: EventKind
    payload: dict[str, Any]
    # The payload already encoded as JSON, when its writer had to encode it anyway (an
    # enqueue stores the request's text in the run row too): the store writes it as it is.
    text: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ReplayJournal:
    """A run's journal as a replay reads it (`Store.replay_journal`)."""

    # The replay forms of its tool and step-function steps, in order, flat: four values a
    # step (position, "step:digest:name", result, error), no object per step.
    steps: list[Any]
    # Every other event, in order, as (kind, payload).
    others: list[tuple[str, dict[str, Any]]]


REPLAYED_KINDS = (EventKind.TOOL, EventKind.STEP)


def replay_form(kind: EventKind, payload_text: str) -> str | None:
    """The replay form of an agent function's tool or step-function event (SPEC §20,
    `tenure_events.replay`): `position,"step:digest:name",result,error` — four JSON values
    read back from the payload's own text, so that a replay from it returns exactly what a
    replay from the payload would. None for every other event."""
    if kind not in REPLAYED_KINDS:
        return None
    if '"digest"' not in payload_text:
        return None  # the built-in loop's tool events: not decoded for nothing
    try:
        p = orjson.loads(payload_text)
    except orjson.JSONDecodeError:  # what orjson does not read: replayed from the payload
        return None
    if type(p) is not dict:
        return None
    step, position, name, digest = p.get("step"), p.get("position"), p.get("name"), p.get("digest")
    if (
        (step != "tool" and step != "step")
        or type(position) is not int
        or type(name) is not str
        or type(digest) is not str
    ):
        return None  # a value step (`ctx.now`, `ctx.uuid`, ...), and anything else
    values = (position, f"{step}:{digest}:{name}", p.get("result"), p.get("error"))
    return orjson.dumps(values).decode()[1:-1]


@direct_init  # one per enqueued run: its ten fields cost ~20,000 instructions set one by one
@dataclass(frozen=True)
class NewRun:
    run_id: str
    queue: str
    request: str | None  # JSON; None for an interactive run
    idempotency_key: str | None
    delay: float = 0.0
    events: Sequence[NewEvent] = ()
    parent_id: str | None = None  # a child run's parent, and the root of its tree (SPEC §21)
    root_id: str | None = None
    priority: int = 0
    concurrency_key: str | None = None


@direct_init
@dataclass(frozen=True)
class Settlement:
    """A terminal state. A dead-letter keeps the request (for redrive); every failure keeps
    the fence (an interactive run that failed mid-write is evidence too)."""

    status: RunStatus
    reason: TerminationReason
    output: str | None = None
    error_class: FailureClass | None = None
    error: str = ""
    events: Sequence[NewEvent] = field(default_factory=tuple)
    usage: Usage = field(default_factory=Usage)
    # Applies only while this fence stands (a drain dead-letters a run for its write in
    # flight; once that write is recorded and its fence cleared, the reason is gone).
    only_while_fenced: ToolEffect | None = None

    @property
    def is_dead_letter(self) -> bool:
        return self.reason.is_dead_letter


@dataclass(frozen=True)
class Held:
    """A run an owner holds, as the database has it: its lease, and the call of the in-doubt
    fence it was claimed with (None: none), which a hand-back must carry back with it."""

    lease: Lease
    fence_call: str | None = None


@dataclass(frozen=True)
class ForkState:
    """What a fork's plan reads of the original's row, in one statement."""

    status: RunStatus
    last_sequence: int
    pending_effect: ToolEffect | None
    fence_probe: bool
    fence_call: str | None


@dataclass(frozen=True)
class NewFork:
    """A fork to store (SPEC §23), and what its plan was decided on (its guard)."""

    fork_id: str
    run_id: str  # the original
    at: int  # the original's events before this sequence are copied; `event` takes it
    request: str  # the fork's request (JSON text)
    event: NewEvent  # the fork's `forked` event
    # What the plan read of the original: the fork is made only while it still holds.
    seen_last_sequence: int
    seen_fence: ToolEffect | None
    seen_probe: bool
    # The fence the fork starts with: an in-doubt write's, kept for its probe (SPEC §16).
    fence: ToolEffect | None = None
    fence_probe: bool = False
    fence_call: str | None = None


@dataclass(frozen=True)
class StaleRun:
    """A run the reaper read as stale: what its decision is made on, and guarded by."""

    run_id: str
    lease_token: int
    pending_effect: ToolEffect | None
    has_request: bool
    requeue_count: int
    fence_probe: bool = False  # the fence's tool has a probe: requeue in doubt
    # Why the lease lapsed, when its worker said so under that lease (a step past its
    # deadline, SPEC §15); None for a worker that just stopped renewing it.
    step_deadline: str | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker process says of itself when it starts (its row in `tenure_workers`)."""

    id: str  # the owner id it claims under
    host: str
    pid: int
    queues: Sequence[str] | None  # None: every queue
    slots: int
    heartbeat_seconds: float


@dataclass(frozen=True)
class WorkerRow:
    """A worker's row as stored: `state` is what the worker last said (`running`,
    `stopping`, `stopped`); whether it is dead is the reader's call (`_heartbeat.py`)."""

    id: str
    host: str
    pid: int
    queues: list[str] | None
    slots: int
    slots_in_use: int
    heartbeat_seconds: float
    state: str
    started_at: datetime
    last_seen: datetime
    stopped_at: datetime | None


@dataclass(frozen=True)
class ModelState:
    """A model's shared capacity as the database has it now (SPEC §17)."""

    name: str
    limits: Limits
    in_use: int  # calls in flight whose run still holds its lease
    requests: float | None  # the requests bucket's level now; None: no such limit
    tokens: float | None
    circuit_open_until: datetime | None  # set only while open
    now: datetime  # the database's clock when read

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: name, limits, calls in flight, what the buckets hold now, and when
        the circuit closes (ISO-8601; null while closed)."""
        return {
            "name": self.name,
            "requests_per_minute": self.limits.requests_per_minute,
            "tokens_per_minute": self.limits.tokens_per_minute,
            "concurrency": self.limits.concurrency,
            "in_use": self.in_use,
            "requests_available": None if self.requests is None else round(self.requests, 3),
            "tokens_available": None if self.tokens is None else round(self.tokens, 3),
            "circuit_open_until": (
                self.circuit_open_until.isoformat() if self.circuit_open_until else None
            ),
        }


@dataclass(frozen=True)
class Grant:
    """What `reserve_capacity` answered: a reservation, or how long until capacity is
    expected back (and whether that is the circuit)."""

    reservation: str | None
    wait: float = 0.0
    circuit_open: bool = False


@dataclass(frozen=True)
class Budget:
    """A run tree's budget as its ledger has it now (SPEC §21): the root's limits, what
    settled calls spent, and what the calls in flight reserved."""

    root_id: str
    max_tokens: int | None
    max_cost: float | None
    spent_tokens: int
    spent_cost: float
    reserved_tokens: int
    reserved_cost: float

    @property
    def spent(self) -> bool:
        """Nothing of a limit is left: the next call anywhere in the tree is refused."""
        if self.max_tokens is not None and self.spent_tokens >= self.max_tokens:
            return True
        return self.max_cost is not None and self.spent_cost >= self.max_cost

    def summary(self) -> str:
        """One line for people: each limit's spending against it, then what is in flight."""
        parts = []
        if self.max_tokens is not None:
            parts.append(f"{self.spent_tokens} of {self.max_tokens} tokens")
        if self.max_cost is not None:
            parts.append(f"${self.spent_cost:.4g} of ${self.max_cost:.4g}")
        text = ", ".join(parts) + " spent"
        if self.reserved_tokens or self.reserved_cost:
            text += f"; {self.reserved_tokens} tokens held by calls in flight"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "root_id": self.root_id,
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "spent_tokens": self.spent_tokens,
            "spent_cost": round(self.spent_cost, 6),
            "reserved_tokens": self.reserved_tokens,
            "reserved_cost": round(self.reserved_cost, 6),
        }


@dataclass(frozen=True)
class ConcurrencyKey:
    """A concurrency key (SPEC §22): its limit (None: not limited) and its runs running and
    queued now. A queued run of a key at its limit waits for the key, not for a worker."""

    key: str
    limit: int | None
    running: int
    queued: int

    @property
    def full(self) -> bool:
        return self.limit is not None and self.running >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "limit": self.limit,
            "running": self.running,
            "queued": self.queued,
            "waiting_for_key": self.queued if self.full else 0,
        }


@dataclass(frozen=True)
class BudgetGrant:
    """What `reserve_budget` answered: a reservation, or why not (`spent`: the budget is
    spent; otherwise the calls in flight hold what is left, and may give some back)."""

    reservation: str | None
    spent: bool = False


@dataclass(frozen=True)
class PausedQueue:
    """A queue an operator paused: claims pass its runs over until it is resumed."""

    queue: str
    paused_at: datetime
    paused_by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "paused_at": self.paused_at.isoformat(),
            "paused_by": self.paused_by,
        }


@dataclass(frozen=True)
class QueueState:
    """A queue as an operator sees it: whether it is paused, its runs not yet ended, and the
    tokens and cost of those runs and of the runs that ended in the last `window` seconds."""

    name: str
    paused: PausedQueue | None
    queued: int = 0
    running: int = 0
    waiting: int = 0
    spent: Usage = field(default_factory=Usage)
    window: float = 0.0
    # Agent functions waiting for their child runs (SPEC §21): no lease, no slot.
    children: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.name,
            "paused": self.paused is not None,
            "paused_at": self.paused.paused_at.isoformat() if self.paused else None,
            "paused_by": self.paused.paused_by if self.paused else None,
            "queued": self.queued,
            "running": self.running,
            "waiting": self.waiting,
            "waiting_for_children": self.children,
            "input_tokens": self.spent.input_tokens,
            "output_tokens": self.spent.output_tokens,
            "cost": self.spent.cost,
            "totals_window_seconds": self.window,
        }
