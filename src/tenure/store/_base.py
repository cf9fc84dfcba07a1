"""The store protocol: one method per guarded transition of SPEC §5 and §7.

Every method that changes a run is a single compare-and-set inside one transaction and
reports whether it applied; the runtime never learns which database it talks to. Events
appended by a method are written in the same transaction as the transition they record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from tenure._limits import Limits
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
from tenure.store._records import (
    NO_USAGE,
    Budget,
    BudgetGrant,
    ChildState,
    Claimed,
    ConcurrencyKey,
    ForkState,
    Grant,
    Held,
    Lease,
    ModelState,
    NewEvent,
    NewFork,
    NewRun,
    PausedQueue,
    ReplayJournal,
    Settlement,
    StaleRun,
    WorkerInfo,
    WorkerRow,
)

if TYPE_CHECKING:
    from tenure._schedules import Schedule
    from tenure.store._deltas import DeltaFeed, DeltaPiece

__all__ = [
    "NO_USAGE",
    "Budget",
    "BudgetGrant",
    "ChildState",
    "Claimed",
    "ConcurrencyKey",
    "ForkState",
    "Grant",
    "Held",
    "Lease",
    "ModelState",
    "NewEvent",
    "NewFork",
    "NewRun",
    "PausedQueue",
    "ReplayJournal",
    "Settlement",
    "StaleRun",
    "Store",
    "WorkerInfo",
    "WorkerRow",
]


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

    def mark_step_deadline(
        self, lease: Lease, last_sequence: int, fence: ToolEffect | None, why: str
    ) -> bool:
        """A worker gave up the step in flight, past its deadline (SPEC §15): record `why`
        (the row's error, at once) for the reaper to report when this lease lapses. Applies
        only under this lease, not yet expired, while the run's last event is still
        `last_sequence` and its fence still `fence` (what the worker decided on)."""

    def requeue(
        self, lease: Lease, delay: float, error_class: FailureClass, error: str
    ) -> bool: ...

    def hand_back(
        self,
        lease: Lease,
        why: str,
        missing: Sequence[str] = (),
        fence_call: str | None = None,
    ) -> bool:
        """Give back a claimed run whose segment never started, untouched: no attempt
        counted, no budget charged. With `missing` (what this worker lacks to serve it) the
        run waits before it is claimable again, longer each time, and says why.

        `fence_call` is the call of the in-doubt fence the claim brought (`Claimed.fence_call`,
        `Held.fence_call`; None: it brought none). The run goes back with that fence and its
        call, still in doubt (SPEC §16), and only while that is the fence standing: a fence a
        write stamped since is never taken, cleared or changed."""

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

    def cancel(self, run_id: str, expected: RunStatus | None = None) -> bool:
        """Cancel a run that has not ended; with `expected`, only while it is in that
        status (a decision made on a listing is guarded by the status it read)."""

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

    def held_by(self, owner: str) -> list[Held]:
        """The runs `owner` holds now, as the database has them."""

    def stale_runs(self, limit: int) -> list[StaleRun]: ...

    def requeue_stale(self, seen: StaleRun) -> bool:
        """Requeue a run whose lease expired, only while it is still exactly as `seen`: same
        lease token, fence, requeue count and request. A decision read from a row is guarded
        by everything it read (a fence stamped after the read must not be cleared)."""

    def requeue_in_doubt_stale(self, seen: StaleRun, error: str) -> bool:
        """The reaper's in-doubt requeue, guarded like `requeue_stale`; `error` says why."""

    def dead_letter_stale(self, seen: StaleRun, reason: TerminationReason, error: str) -> bool:
        """Dead-letter a run whose lease expired, only while it is still exactly as `seen`."""

    def redrive(self, run_id: str, force: bool) -> bool: ...

    def fork(self, new: NewFork) -> bool:
        """Store a fork in one transaction: its row, a copy of the original's events before
        `new.at`, its `forked` event; only while the original is still as the plan saw it
        (else nothing is stored: False). The original's rows are only read."""

    def purge(self, older_than_seconds: float) -> int:
        """Delete ended runs (and their events) finished before the cutoff, and the rows of
        workers stopped or dead before it; how many runs."""

    def get_run(self, run_id: str, with_request: bool = False) -> Run | None: ...

    def run_status(self, run_id: str) -> RunStatus | None: ...

    def fork_state(self, run_id: str) -> ForkState | None:
        """What a fork's plan is decided on, read in one statement; None: no such run."""

    def events(self, run_id: str, after: int = -1) -> list[Event]: ...

    def journal(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        """A run's events as (kind, payload), in order: what a replay reads (SPEC §20),
        without the rest of each row. A payload that cannot be decoded is
        `{"_damaged": why}`."""
        ...

    def replay_journal(self, run_id: str) -> ReplayJournal | None:
        """The journal as a replay reads it: the steps that have a replay form as one flat
        list, the other events as `journal` gives them. None when it cannot be read so (a
        text that is not JSON): `journal` then reads it event by event."""
        ...

    def last_event(self, run_id: str) -> Event | None:
        """The run's latest event, or None for an unknown run."""
        ...

    def request_event(self, run_id: str) -> Event | None:
        """The run's first event (its `request`), or None for an unknown run."""
        ...

    def wait_for_children(
        self, lease: Lease, children: Sequence[str], request: str | None
    ) -> list[int] | bool | None:
        """SPEC §21: the owner's run waits for `children` (its own), without a lease, while
        one of them is not terminal. None: the lease is not held; False: all of them are
        terminal already (the run is still the owner's, running); else the sequences."""

    def children_of(self, parent: str, ids: Sequence[str]) -> list[ChildState]:
        """The state of `parent`'s children among `ids`."""

    def tree(self, run_id: str, limit: int = 1000) -> list[Run]:
        """The run and its descendants, parents before children (at most `limit`)."""

    def runs(
        self,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        """Runs, newest first; `parent`: only that run's children; `roots`: only runs
        without a parent (SPEC §21)."""
        ...

    def search_runs(
        self,
        metadata: dict[str, Any] | None = None,
        since: float | None = None,
        until: float | None = None,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        """Runs whose request's metadata holds every key of `metadata` with that value,
        created between `since` and `until` seconds ago (None: unbounded), newest first."""
        ...

    def runs_after(
        self,
        after: str,
        status: RunStatus | None = None,
        reason: TerminationReason | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        """The runs that follow run `after` in the order of `runs` (a cursor page); none
        when that run no longer exists."""

    def run_counts(self) -> dict[tuple[RunStatus, TerminationReason | None], int]:
        """How many runs there are of each status and termination reason."""

    def register_worker(self, worker: WorkerInfo) -> None:
        """A worker process starts: its row, running and seen now."""

    def beat_worker(self, worker_id: str, slots_in_use: int, stopping: bool = False) -> bool:
        """A worker's own heartbeat; False when it has no row to beat (purged, or stopped)."""

    def stop_worker(self, worker_id: str) -> bool:
        """A clean shutdown: the worker's row is marked stopped."""

    def workers(self, limit: int = 100) -> list[WorkerRow]:
        """Worker rows, the most recently seen first."""

    def pause_queue(self, queue: str, by: str = "") -> bool:
        """Claims pass over the runs of `queue` from now on (runs already claimed go on);
        False when it was paused already. A queue with no run yet may be paused."""

    def resume_queue(self, queue: str) -> bool:
        """Claims take the runs of `queue` again; False when it was not paused."""

    def paused_queues(self) -> list[PausedQueue]:
        """The paused queues, by name."""

    def queue_counts(self) -> dict[tuple[str, str], int]:
        """Runs not yet ended, by (queue, status)."""

    def queue_totals(self, window: float) -> dict[str, Usage]:
        """Tokens and cost per queue: of the runs that ended in the last `window` seconds
        and of the runs not yet ended (what they spent so far). Reads only those runs."""

    def set_concurrency_limit(self, key: str, limit: int | None) -> bool:
        """At most `limit` runs of `key` running at once, enforced by the claim (SPEC §22);
        None removes the limit (False when there was none)."""

    def concurrency_keys(self) -> list[ConcurrencyKey]:
        """Every key with a limit or with runs queued or running, by name."""

    def put_schedule(
        self, name: str, cron: str, timezone: str, request: str, next_fire: datetime
    ) -> None:
        """Store a schedule, or change one (keeping whether it is paused, and its fires)."""

    def schedules(self) -> list[Schedule]: ...

    def due_schedules(self, limit: int = 100) -> list[tuple[Schedule, Any]]:
        """Schedules not paused whose next tick has come, each with that tick as stored."""

    def fire_schedule(
        self, name: str, seen: Any, tick: datetime, following: datetime, run: NewRun
    ) -> str | None:
        """Advance the schedule from `seen` to `following` and enqueue the tick's run, in
        one transaction; None when the schedule moved since it was read."""

    def pause_schedule(self, name: str) -> bool: ...

    def resume_schedule(self, name: str, next_fire: datetime) -> bool: ...

    def delete_schedule(self, name: str) -> bool: ...

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` when runs may have become claimable (enqueue, requeue, redrive).

        Returns the function that unsubscribes. A store without notifications returns a
        no-op; workers poll anyway, so a lost notification only delays a run.
        """

    def publish_deltas(self, pieces: Sequence[DeltaPiece]) -> None:
        """Publish pieces of the text of model calls in flight (SPEC §18), each under its
        segment's lease; a piece whose lease no longer holds is dropped."""

    def follow_deltas(self, run_id: str) -> DeltaFeed:
        """The deltas of a run from now on, for a reader in any process."""

    def run_progress(self, run_id: str) -> tuple[RunStatus, int] | None:
        """A run's status and the sequence of its last event."""

    # -- provider capacity (SPEC §17) ----------------------------------------------------

    def set_model_limits(self, model: str, limits: Limits) -> None:
        """Register or change a model's limits (its row); levels and circuit are kept."""

    def reserve_capacity(
        self,
        model: str,
        lease: Lease,
        tokens: float,
        hold_seconds: float,
        headroom_seconds: float = 0.0,
    ) -> Grant | None:
        """Compare-and-set: one request and `tokens` from the model's buckets, granted only
        while each bucket keeps `headroom_seconds` of its refill, and a call in flight held
        for `lease` (at most `hold_seconds`); else the wait. None: the model has no row (its
        limits were never registered on this database)."""

    def settle_capacity(self, model: str, reservation: str, refund: float) -> None:
        """The call ended: its reservation is gone and `refund` tokens (the estimate minus
        the actual use; negative when it used more) go back to the bucket."""

    def open_circuit(self, model: str, seconds: float) -> None:
        """Nobody calls the model for `seconds` (an open circuit is never shortened). A
        model without a row gets one, without limits: its circuit alone."""

    def open_circuits(self) -> dict[str, float]:
        """Every model whose circuit is open now: the seconds until it closes."""

    def models(self, name: str | None = None) -> list[ModelState]:
        """Every model with a row (or that one), by name."""

    def reserve_budget(
        self,
        root_id: str,
        lease: Lease,
        limits: tuple[int | None, float | None],
        tokens: int,
        cost: float,
        hold_seconds: float,
    ) -> BudgetGrant:
        """Compare-and-set on a run tree's ledger (SPEC §21): reserve a model call's
        estimated `tokens` and `cost`, granted only while the spending plus what the calls
        in flight reserved leaves some of each limit, and only while `lease` holds. The
        ledger is written at its first reservation with `limits` (max tokens, max cost)."""

    def settle_budget(self, root_id: str, reservation: str, tokens: int, cost: float) -> None:
        """The call ended: what it used (nothing, if it failed) is spent, once, and its
        reservation is gone."""

    def budget(self, root_id: str) -> Budget | None:
        """A run tree's ledger as it is now (None: no call of the tree has used it)."""

    def park(
        self,
        lease: Lease,
        delay: float,
        payload: dict[str, Any],
        kind: EventKind = EventKind.THROTTLED,
    ) -> bool:
        """Back to the queue until `delay` from now, not charged to the budget, with an
        event of `kind` (`throttled`, or an agent function's `sleeping`) and `payload`;
        False if the run is not ours."""

    def close(self) -> None: ...
