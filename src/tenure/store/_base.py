"""The store protocol: one method per guarded transition of SPEC §5 and §7.

Every method that changes a run is a single compare-and-set inside one transaction and
reports whether it applied; the runtime never learns which database it talks to. Events
appended by a method are written in the same transaction as the transition they record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
    Usage,
)

NO_USAGE = Usage()


@dataclass(frozen=True)
class Lease:
    """What a segment holds: the run, who it is, and the fencing token of its claim."""

    run_id: str
    owner: str
    token: int
    attempt: int


@dataclass(frozen=True)
class Claimed:
    lease: Lease
    request: str | None  # raw JSON as stored; parsing it is the runtime's job
    requeue_count: int
    decision: str | None = None  # raw JSON: a person's decision the run continues with
    # Raw JSON of the call an in-doubt fence stands for (SPEC §16): the new segment asks
    # that tool's probe whether the write happened before anything else.
    fence_call: str | None = None


@dataclass(frozen=True)
class NewEvent:
    kind: EventKind
    payload: dict[str, Any]


@dataclass(frozen=True)
class NewRun:
    run_id: str
    queue: str
    request: str | None  # JSON; None for an interactive run
    idempotency_key: str | None
    delay: float = 0.0
    events: Sequence[NewEvent] = ()


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
class StaleRun:
    """A run the reaper read as stale: what its decision is made on, and guarded by."""

    run_id: str
    lease_token: int
    pending_effect: ToolEffect | None
    has_request: bool
    requeue_count: int
    fence_probe: bool = False  # the fence's tool has a probe: requeue in doubt


class Store(Protocol):
    url: str

    def migrate(self) -> None:
        """Create or migrate the schema forward; never destructive."""

    def schema_version(self) -> int: ...

    def now(self) -> datetime:
        """The database's clock."""

    def enqueue(self, run: NewRun) -> tuple[str, bool]:
        """Insert a queued run; with a taken idempotency key return (existing id, False)."""

    def enqueue_many(self, runs: Sequence[NewRun]) -> list[tuple[str, bool]]: ...

    def start(self, run: NewRun, owner: str, lease_seconds: float) -> Lease:
        """Insert an interactive run already running under `owner` with token 1."""

    def claim(
        self, owner: str, queues: Sequence[str] | None, lease_seconds: float, limit: int
    ) -> list[Claimed]:
        """Claim up to `limit` claimable runs; each goes to exactly one claimer."""

    def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> Claimed | None: ...

    def record_step(
        self,
        lease: Lease,
        lease_seconds: float,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        """Heartbeat + append events in one transaction; None if the lease is lost."""

    def renew_leases(self, leases: Sequence[tuple[Lease, float]]) -> set[str]:
        """The lease keeper's round: renew each (lease, seconds) under its own ownership
        guard, only while unexpired, never shortening it, in one statement; the run ids
        renewed (a missing one is no longer the segment's). A store with row locks may
        count a row another transaction holds this instant as renewed: that row is being
        written right now, and the next round renews it or finds it lost."""

    def mark_fence(
        self,
        lease: Lease,
        effect: ToolEffect,
        lease_seconds: float,
        call: dict[str, Any] | None = None,
        probe: bool = False,
    ) -> bool:
        """Stamp the fence of the write about to run, with the call it stands for and
        whether its tool has a probe (SPEC §16), renewing the lease to cover the tool."""

    def resolve_fence(
        self, lease: Lease, lease_seconds: float, events: Sequence[NewEvent]
    ) -> list[int] | None:
        """Clear an in-doubt fence with the probe's events, in one transaction."""

    def requeue_in_doubt(
        self, lease: Lease, delay: float, error_class: FailureClass, error: str
    ) -> bool:
        """Back to the queue with its probe-able fence standing, charged to the budget;
        only while that fence stands."""

    def clear_fence(self, lease: Lease, lease_seconds: float, event: NewEvent) -> int | None:
        """Clear the fence and append the write's event in one transaction."""

    def requeue(
        self, lease: Lease, delay: float, error_class: FailureClass, error: str
    ) -> bool: ...

    def hand_back(self, lease: Lease, why: str, missing: Sequence[str] = ()) -> bool:
        """Give back a claimed run whose segment never started, untouched: no attempt
        counted, no budget charged. With `missing` (what this worker lacks to serve it) the
        run waits before it is claimable again, longer each time, and says why."""

    def release(self, lease: Lease) -> bool:
        """Hand a run back to the queue without charging its requeue budget (drain)."""

    def settle(self, lease: Lease, settlement: Settlement) -> list[int] | None:
        """The terminal state and its events; their sequences, or None if not ours."""

    def settle_and_claim(
        self,
        settles: Sequence[tuple[Lease, Settlement]],
        owner: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        limit: int,
    ) -> tuple[list[list[int] | None], list[Claimed]]:
        """Several settles, then a claim of up to `limit` runs, in one transaction.

        Each settle is guarded on its own exactly as `settle` is (None where not ours); the
        claim is `claim`'s. A worker commits the ends of its finished runs and takes new
        ones with one commit. Raises if the transaction fails: then nothing applied."""

    def cancel(self, run_id: str) -> bool: ...

    def suspend(
        self,
        lease: Lease,
        status: RunStatus,
        waiting: dict[str, Any],
        request: str | None,
        timeout: float | None,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int] | None:
        """Hold the run for a person: waiting status, no lease; None if not ours."""

    def decide_queued(
        self, run_id: str, expected: RunStatus, decision: dict[str, Any], event: NewEvent
    ) -> bool:
        """Record a person's decision on a waiting run and queue its continuation."""

    def decide_inline(
        self,
        run_id: str,
        expected: RunStatus,
        decision: dict[str, Any],
        event: NewEvent,
        owner: str,
        lease_seconds: float,
    ) -> Claimed | None:
        """Record a person's decision and claim the continuation for `owner`."""

    def expire_waits(self, limit: int) -> int:
        """Settle runs waiting past their deadline `approval_denied`; how many."""

    def waiting_of(self, run_id: str) -> tuple[RunStatus, dict[str, Any] | None] | None:
        """The status and the full (unmasked) waiting record of a run."""

    def held_by(self, owner: str) -> list[Lease]:
        """The leases `owner` holds now, as the database has them."""

    def stale_runs(self, limit: int) -> list[StaleRun]: ...

    def requeue_stale(self, seen: StaleRun) -> bool:
        """Requeue a run whose lease expired, only while it is still exactly as `seen`: same
        lease token, fence, requeue count and request. A decision read from a row is guarded
        by everything it read (a fence stamped after the read must not be cleared)."""

    def requeue_in_doubt_stale(self, seen: StaleRun) -> bool:
        """The reaper's in-doubt requeue, guarded like `requeue_stale`."""

    def dead_letter_stale(self, seen: StaleRun, reason: TerminationReason, error: str) -> bool:
        """Dead-letter a run whose lease expired, only while it is still exactly as `seen`."""

    def redrive(self, run_id: str, force: bool) -> bool: ...

    def purge(self, older_than_seconds: float) -> int: ...

    def get_run(self, run_id: str, with_request: bool = False) -> Run | None: ...

    def run_status(self, run_id: str) -> RunStatus | None: ...

    def events(self, run_id: str, after: int = -1) -> list[Event]: ...

    def runs(
        self,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Run]: ...

    def runs_after(
        self,
        after: str,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Run]:
        """The runs that follow run `after` in the order of `runs` (a cursor page); none
        when that run no longer exists."""

    def run_counts(self) -> dict[tuple[RunStatus, TerminationReason | None], int]:
        """How many runs there are of each status and termination reason."""

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` when runs may have become claimable (enqueue, requeue, redrive).

        Returns the function that unsubscribes. A store without notifications returns a
        no-op; workers poll anyway, so a lost notification only delays a run.
        """

    def close(self) -> None: ...
