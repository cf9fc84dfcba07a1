"""Bulk cancel and bulk redrive over a filtered list of runs, in two steps: `select` reads
the runs a filter matches (what an operator counts and confirms), then `cancel_each` or
`redrive_each` acts on exactly those, each through the single-run guarded transition.

Nothing here is one UPDATE over many rows: each run is cancelled or redriven by its own
compare-and-set, guarded by what the listing read of it (a cancel of runs listed `queued`
only while each is still queued), so a run that moved on between the count and the action
is reported as changed, never acted on blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tenure._errors import InvalidRequest
from tenure._types import DEAD_LETTER_REASONS, Run, RunStatus, TerminationReason, ToolEffect
from tenure.store._base import Store

# Runs read per page while selecting.
PAGE = 500
ACTIVE = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING_FOR_APPROVAL,
    RunStatus.WAITING_FOR_INPUT,
    RunStatus.WAITING_FOR_CHILDREN,
)
ACTIONS = ("cancel", "redrive")


@dataclass(frozen=True)
class Filter:
    """The filters of a runs listing, as a bulk action reads them."""

    status: RunStatus | None = None
    reason: TerminationReason | None = None
    queue: str | None = None

    def describe(self) -> str:
        parts = [
            f"{k} {v}"
            for k, v in (("status", self.status), ("reason", self.reason), ("queue", self.queue))
            if v
        ]
        return ", ".join(parts) or "no filter"


@dataclass
class Selection:
    """The runs a filter matched for an action: `runs` it would act on, `skipped` those it
    will not touch (a dead letter whose non-idempotent fence stands and has no probe), and
    whether more matched beyond the limit."""

    action: str
    filter: Filter
    runs: list[Run] = field(default_factory=list)
    skipped: list[Run] = field(default_factory=list)
    more: bool = False


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    # Matched when counted, but no longer as the listing saw it (ended, claimed, redriven).
    changed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "changed": self.changed}


def check(action: str, f: Filter) -> None:
    """What each action can act on: refused in one line before anything is read."""
    if action not in ACTIONS:
        raise InvalidRequest(f"unknown bulk action {action!r}: cancel or redrive")
    if action == "cancel":
        if f.reason is not None:
            raise InvalidRequest("a reason names how a run ended: ended runs cannot be cancelled")
        if f.status is not None and f.status.is_terminal:
            raise InvalidRequest(f"{f.status} runs have ended: nothing to cancel")
    else:
        if f.status is not None and f.status is not RunStatus.FAILED:
            raise InvalidRequest(
                f"only dead-lettered (failed) runs are redriven, not {f.status} runs"
            )
        if f.reason is not None and not f.reason.is_dead_letter:
            raise InvalidRequest(f"{f.reason} is not a dead-letter reason: nothing to redrive")


def _pages(
    store: Store, status: RunStatus, reason: TerminationReason | None, queue: str | None
) -> Iterator[Run]:
    page = store.runs(status, reason, queue, PAGE)
    while page:
        yield from page
        if len(page) < PAGE:
            return
        page = store.runs_after(page[-1].id, status, reason, queue, PAGE)


def select(
    store: Store,
    action: str,
    f: Filter,
    limit: int | None = None,
    tick: Callable[[], None] | None = None,
) -> Selection:
    """The runs `f` matches that `action` applies to, newest first per status, at most
    `limit` of them (None: all)."""
    check(action, f)
    chosen = Selection(action, f)
    sources: list[tuple[RunStatus, TerminationReason | None]]
    if action == "cancel":
        sources = [(s, None) for s in ([f.status] if f.status else ACTIVE)]
    else:
        reasons = [f.reason] if f.reason else sorted(DEAD_LETTER_REASONS)
        sources = [(RunStatus.FAILED, r) for r in reasons]
    for status, reason in sources:
        for run in _pages(store, status, reason, f.queue):
            if tick is not None:
                tick()
            if limit is not None and len(chosen.runs) + len(chosen.skipped) >= limit:
                chosen.more = True
                return chosen
            if action == "redrive" and needs_a_look(run):
                chosen.skipped.append(run)
            else:
                chosen.runs.append(run)
    return chosen


def needs_a_look(run: Run) -> bool:
    """A dead letter a bulk redrive leaves alone: its non-idempotent fence stands and its
    tool has no probe, so only a person can tell whether the write happened (and redrive it
    alone, forced). A fence whose tool has a probe goes back in doubt: the probe decides."""
    return run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE and not run.fence_probe


def cancel_each(store: Store, chosen: Selection, tick: Callable[[], None] | None = None) -> Outcome:
    """Cancel each selected run, only while it is still in the status the listing was
    filtered by (any status not yet ended when the listing named none)."""
    outcome = Outcome()
    expected = chosen.filter.status
    for run in chosen.runs:
        if tick is not None:
            tick()
        (outcome.done if store.cancel(run.id, expected) else outcome.changed).append(run.id)
    return outcome


def redrive_each(
    store: Store, chosen: Selection, tick: Callable[[], None] | None = None
) -> Outcome:
    """Redrive each selected dead letter (never forced: a standing fence refuses)."""
    outcome = Outcome()
    for run in chosen.runs:
        if tick is not None:
            tick()
        (outcome.done if store.redrive(run.id, False) else outcome.changed).append(run.id)
    return outcome
