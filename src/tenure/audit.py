"""An audit of a tenure database: does what it holds keep the promises of SPEC §13?

`audit(store)` reads every run and its events through the Store protocol and returns an
`AuditReport`; each broken promise is one readable line in `report.violations`. It checks:

- every run is terminal, or legitimately not yet: queued, running under a lease (a lease
  expired longer ago than `stranded_after` seconds is a violation: the reaper should have
  come), or waiting for a human;
- every run's events are numbered 0, 1, 2 … without a gap or a repeat;
- every event was written under the fencing token of the segment that held the run then
  (the token of the latest `claimed` event): nothing was written under a stale lease, and a
  segment's own steps (llm, tool, assembled, its requeue or dead-letter) only while it held
  the run; claims follow each other with tokens growing by one;
- the journal never repeated a step: each tool call of a model turn has at most one `tool`
  event, and the model is not called again before the calls of its last turn are recorded;
- attempts stay within the requeue budget (`max_requeues`, shared by failure and stale
  requeues, fresh after a redrive);
- a dead-letter only for a class that is not retryable, a spent budget, or a standing
  non-idempotent fence (SPEC §6.7, §7);
- the run row agrees with its events (token, attempt, status, requeue count);
- a tree of child runs (SPEC §21) is whole: no child goes on (not terminal) under a parent
  or root that has ended, and no parent waits for children that have all ended (nothing
  would wake it).

With an external `ledger` (what the outside system saw: one `(run_id, idempotency_key,
token)` per executed write) it also checks that each `(run, key)` was written at most once,
exactly once for every recorded non-idempotent tool event of a completed run, under the
token of the segment that recorded it, and that a write which is in the ledger but not in
the journal (a worker died inside it) left its run fenced, never resumed.

A refused write leaves no row, so it cannot be read from the database: pass the workers'
logs as `worker_logs` and the audit counts the segments that stopped on a refused write
(`refused_writes`), from the line the worker logs for each `lease_lost` outcome.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from tenure._policy import DEFAULT_MAX_REQUEUES
from tenure._types import (
    Event,
    EventKind,
    FailureClass,
    Run,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.store._base import Store

__all__ = ["LEASE_LOST_MARK", "AuditReport", "LedgerEntry", "audit", "read_ledger"]

# The word the worker logs when a segment stops on a refused (lease-guarded) write.
LEASE_LOST_MARK = "lease_lost"
# Far more runs than any database the audit is meant for; `runs()` needs a bound.
MAX_RUNS = 10_000_000
_OWNER_KINDS = frozenset({EventKind.LLM, EventKind.TOOL, EventKind.STEP, EventKind.ASSEMBLED})
_CHARGED_CAUSES = frozenset({"failure", "stale", "step_deadline", "in_doubt"})
# Written by the reaper once a lease expired: a worker that stopped renewing it, or one that
# gave up a step past its deadline and said so (SPEC §15). The same rules hold for both.
_REAPER_CAUSES = frozenset({"stale", "step_deadline"})
# A claimed run handed back before its segment started: its attempt is not counted.
_UNSTARTED_CAUSES = frozenset({"unstarted", "unserved"})
_HUMAN_KINDS = frozenset({EventKind.APPROVAL, EventKind.INPUT})


@dataclass(frozen=True)
class LedgerEntry:
    """One write as the outside system saw it."""

    run_id: str
    idempotency_key: str
    token: int | None = None


@dataclass
class AuditReport:
    runs: int = 0
    events: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    expired_leases: int = 0
    ledger_entries: int = 0
    unrecorded_writes: int = 0
    refused_writes: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        lines = [
            f"runs {self.runs}, events {self.events}, violations {len(self.violations)}",
            *(f"  {name}: {n}" for name, n in sorted(self.outcomes.items())),
        ]
        if self.expired_leases:
            lines.append(f"expired leases not yet reaped: {self.expired_leases}")
        if self.ledger_entries:
            lines.append(
                f"ledger: {self.ledger_entries} writes, "
                f"{self.unrecorded_writes} interrupted (in the ledger, not in the journal)"
            )
        if self.refused_writes:
            lines.append(f"refused writes (from worker logs): {self.refused_writes}")
        lines.extend(f"VIOLATION {v}" for v in self.violations)
        return "\n".join(lines)


def read_ledger(path: str | os.PathLike[str]) -> list[LedgerEntry]:
    """A ledger file of lines `RUN_ID IDEMPOTENCY_KEY [TOKEN]`; a missing file is empty."""
    p = Path(path)
    if not p.exists():
        return []
    entries = []
    for line in p.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            token = int(parts[2]) if len(parts) >= 3 and parts[2].isdigit() else None
            entries.append(LedgerEntry(parts[0], parts[1], token))
    return entries


def count_refused_writes(logs: Iterable[str | os.PathLike[str]]) -> int:
    total = 0
    for log in logs:
        p = Path(log)
        if p.exists():
            text = p.read_text(encoding="utf-8", errors="replace")
            total += sum(LEASE_LOST_MARK in line for line in text.splitlines())
    return total


# -- one run's events ----------------------------------------------------------------------


@dataclass
class _DeadLetter:
    event: Event
    charged: int


@dataclass
class _Walk:
    """The run as its events tell it, event by event."""

    run_id: str
    max_requeues: int
    problems: list[str] = field(default_factory=list)
    token: int = 0
    attempt: int = 0
    claims: int = 0
    held: bool = False  # a segment holds the run (claimed and not yet released)
    suspended: bool = False  # handed to a person (approval, input) since the last claim
    unstarted: bool = False  # the last claim was handed back before its segment started
    interactive: bool = False
    charged: int = 0  # requeues charged to the budget since the last redrive
    tokens: set[int] = field(default_factory=set)
    # idempotency key -> call id: a turn may repeat a call id, never a key (its position)
    pending: dict[str, str] = field(default_factory=dict)
    tool_events: dict[str, Event] = field(default_factory=dict)  # idempotency key -> event
    dead_letters: list[_DeadLetter] = field(default_factory=list)
    redrives: list[Event] = field(default_factory=list)  # redriven events, in order
    last: Event | None = None
    # The run whose id keys the model turns' calls: a fork's copied turns are its
    # original's (SPEC §23); from its `forked` event on, its own.
    keys_of: str = ""
    forked: Event | None = None  # a fork's `forked` event

    def flag(self, event: Event, message: str) -> None:
        self.problems.append(f"run {self.run_id} event {event.sequence} ({event.kind}): {message}")

    def see(self, event: Event) -> None:
        # A person's decision that claims the continuation at once is written in the claim's
        # transaction, just before its `claimed` event, under the new token.
        ahead = event.kind in _HUMAN_KINDS and event.lease_token == self.token + 1
        # A run's first event sets its token: a queued run waits under token 0, and an
        # interactive run is held from its first write under token 1 (`start`: no claim).
        begun = (
            self.last is None and event.kind is EventKind.REQUEST and event.lease_token in (0, 1)
        )
        if (
            event.lease_token != self.token
            and event.kind is not EventKind.CLAIMED
            and event.kind is not EventKind.FORKED  # a fork's own token starts here
            and not ahead
            and not begun
        ):
            self.flag(
                event,
                f"written under token {event.lease_token}, the run's token was {self.token}",
            )
        if event.damaged is not None:
            # What it says cannot be read: report it, and check the rest of the run.
            self.flag(event, f"damaged row: {event.damaged}")
            return
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event)
        self.last = event

    def owner_step(self, event: Event) -> None:
        if not self.held:
            self.flag(event, "a segment's step written while no segment held the run")
        if event.attempt != self.attempt:
            self.flag(event, f"attempt {event.attempt}, the holding segment's is {self.attempt}")

    def release(self, event: Event, by_owner: bool) -> None:
        if by_owner:
            self.owner_step(event)
        elif not self.held:
            self.flag(event, "ends a segment, but no segment held the run")
        self.held = False  # tool calls still pending carry over: the next segment runs them


def _on_request(w: _Walk, e: Event) -> None:
    if e.sequence != 0:
        w.flag(e, "a request event after the first")
    # An interactive run starts running under token 1; a queued run waits at token 0.
    w.token = e.lease_token
    w.interactive = w.held = e.lease_token == 1
    w.tokens.add(e.lease_token)


def _on_claimed(w: _Walk, e: Event) -> None:
    if w.held and not w.suspended:
        w.flag(e, "claimed while a segment still held the run")
    if e.lease_token != w.token + 1:
        w.flag(e, f"claim token {e.lease_token}, expected {w.token + 1}")
    if w.unstarted:  # the last segment was handed back before it started: not counted
        expected_attempt = w.attempt
    else:
        expected_attempt = w.attempt + 1 if w.claims or w.interactive else 0
    if e.attempt != expected_attempt:
        w.flag(e, f"claim attempt {e.attempt}, expected {expected_attempt}")
    if e.payload.get("lease_token") != e.lease_token or e.payload.get("attempt") != e.attempt:
        w.flag(e, f"payload {e.payload} disagrees with the event's token or attempt")
    w.token, w.attempt, w.held, w.suspended = e.lease_token, e.attempt, True, False
    w.unstarted = False
    w.claims += 1
    w.tokens.add(e.lease_token)


def _on_llm(w: _Walk, e: Event) -> None:
    w.owner_step(e)
    if "position" in e.payload:
        return  # an agent function's model step: its code, not the loop, runs the calls
    if w.pending:
        pending = sorted(w.pending.values())
        w.flag(e, f"the model was called again before tool calls {pending} ran")
    calls = (e.payload.get("message") or {}).get("tool_calls") or []
    w.pending = {
        f"{w.keys_of or w.run_id}:{e.sequence}" + (f".{i}" if i else ""): str(c.get("id"))
        for i, c in enumerate(calls)
    }


def _on_tool(w: _Walk, e: Event) -> None:
    w.owner_step(e)
    key = str(e.payload.get("idempotency_key"))
    _own_key(w, e)
    if key in w.tool_events:
        w.flag(e, f"tool call {key} executed again (first at {w.tool_events[key].sequence})")
    w.tool_events.setdefault(key, e)
    if "position" in e.payload:
        return  # an agent function's tool step answers no model turn
    call_id = str(e.payload.get("call_id"))
    if w.pending.get(key) == call_id:
        del w.pending[key]
        return
    expected = [k for k, c in w.pending.items() if c == call_id]
    if not expected:
        w.flag(e, f"answers call {call_id}, which no pending model turn made")
    else:
        w.flag(e, f"idempotency key {key}, expected {expected[0]}")
        del w.pending[expected[0]]


def _on_probe(w: _Walk, e: Event) -> None:
    """SPEC §16: the verdict on an in-doubt write, asked by the segment that holds the run."""
    w.owner_step(e)
    if e.payload.get("verdict") not in ("done", "not_done", "unknown"):
        w.flag(e, f"a probe verdict that SPEC §16 does not know: {e.payload.get('verdict')!r}")


def _on_assembled(w: _Walk, e: Event) -> None:
    w.release(e, by_owner=True)


def _by_reaper(e: Event) -> bool:
    """A stale requeue (plain, or in doubt) is written by the reaper, not the segment."""
    return e.payload.get("cause") in _REAPER_CAUSES or bool(e.payload.get("stale"))


def _on_requeued(w: _Walk, e: Event) -> None:
    cause = e.payload.get("cause")
    if cause in _UNSTARTED_CAUSES and w.last is not None and w.last.kind is not EventKind.CLAIMED:
        w.flag(e, f"handed back as {cause}, but its segment had started")
    w.release(e, by_owner=not _by_reaper(e))
    w.unstarted = cause in _UNSTARTED_CAUSES
    if _by_reaper(e) and e.payload.get("lease_token") != w.token:
        w.flag(e, f"stale requeue names token {e.payload.get('lease_token')}, not {w.token}")
    if cause in _CHARGED_CAUSES:
        if w.charged >= w.max_requeues:
            w.flag(e, f"requeued beyond the budget ({w.charged} of {w.max_requeues} spent)")
        w.charged += 1


def _on_dead_lettered(w: _Walk, e: Event) -> None:
    w.release(e, by_owner=e.payload.get("cause") not in _REAPER_CAUSES)
    w.dead_letters.append(_DeadLetter(e, w.charged))


def _on_cancelled(w: _Walk, e: Event) -> None:
    w.held = False


def _on_human(w: _Walk, e: Event) -> None:
    # A segment that waits for a person gives up its lease; a decision queues or claims a
    # continuation. Either way the next claim is legitimate.
    w.suspended = True


def _on_redriven(w: _Walk, e: Event) -> None:
    if w.held or not w.dead_letters or w.last is None or w.last.kind is not EventKind.DEAD_LETTERED:
        w.flag(e, "redriven, but the run was not dead-lettered")
    w.charged = 0
    w.redrives.append(e)


def _on_step(w: _Walk, e: Event) -> None:
    """An agent function's step (SPEC §20); a write step is executed once per key."""
    w.owner_step(e)
    key = e.payload.get("idempotency_key")
    _own_key(w, e)
    if key:
        if key in w.tool_events:
            w.flag(e, f"step {key} executed again (first at {w.tool_events[key].sequence})")
        w.tool_events.setdefault(str(key), e)


def _on_sleeping(w: _Walk, e: Event) -> None:
    """A durable timer: slept in the segment, or the run parked until it is due."""
    if e.payload.get("parked"):
        w.release(e, by_owner=True)
        w.unstarted = False
    else:
        w.owner_step(e)


def _on_waiting(w: _Walk, e: Event) -> None:
    # SPEC §21: the owner gave the run up to wait for its children; the child that settles
    # last queues it again, and its next claim is legitimate.
    w.release(e, by_owner=True)
    w.unstarted = False


def _on_throttled(w: _Walk, e: Event) -> None:
    # A parked run (SPEC §17): its owner gave it back to wait for its model, uncharged.
    w.release(e, by_owner=True)
    w.unstarted = False


def _own_key(w: _Walk, e: Event) -> None:
    """A fork's own call is keyed by the fork: two forks of one run never share a key."""
    key = e.payload.get("idempotency_key")
    if w.forked is not None and key and not str(key).startswith(f"{w.run_id}:"):
        w.flag(e, f"a fork's own call under another run's key {key}")


def _on_forked(w: _Walk, e: Event) -> None:
    """SPEC §23: the events before this one are a copy of the original's (checked against
    it in `_check_fork`); from here on the fork is a run of its own, queued and unclaimed,
    with its own token, attempts, budget and keys. Tool calls of the last copied model
    turn that have no result yet carry over, under the fork's keys."""
    origin = w.keys_of or w.run_id
    w.pending = {
        f"{w.run_id}:{key.removeprefix(origin + ':')}": call for key, call in w.pending.items()
    }
    w.keys_of = w.run_id
    w.forked = e
    w.token, w.attempt, w.claims, w.charged = e.lease_token, 0, 0, 0
    w.held = w.suspended = w.unstarted = w.interactive = False
    w.tokens = {e.lease_token}
    w.tool_events, w.dead_letters, w.redrives = {}, [], []


_HANDLERS = {
    EventKind.REQUEST: _on_request,
    EventKind.CLAIMED: _on_claimed,
    EventKind.LLM: _on_llm,
    EventKind.TOOL: _on_tool,
    EventKind.PROBE: _on_probe,
    EventKind.ASSEMBLED: _on_assembled,
    EventKind.REQUEUED: _on_requeued,
    EventKind.DEAD_LETTERED: _on_dead_lettered,
    EventKind.CANCELLED: _on_cancelled,
    EventKind.REDRIVEN: _on_redriven,
    EventKind.THROTTLED: _on_throttled,
    EventKind.STEP: _on_step,
    EventKind.SLEEPING: _on_sleeping,
    EventKind.WAITING: _on_waiting,
    EventKind.APPROVAL: _on_human,
    EventKind.INPUT: _on_human,
    EventKind.FORKED: _on_forked,
}


# -- dead-letters --------------------------------------------------------------------------


def _dead_letter_problem(
    dl: _DeadLetter, fence: ToolEffect | None, interactive: bool, max_requeues: int, probe: bool
) -> str | None:
    """Why this dead-letter was not allowed by SPEC §6.7 / §7 / §16, or None if it was."""
    payload = dl.event.payload
    reason, cause = payload.get("reason"), payload.get("cause")
    spent = dl.charged >= max_requeues
    # A fence whose tool has a probe goes back in doubt while the budget lasts (§16).
    in_doubt = fence is ToolEffect.NON_IDEMPOTENT_WRITE and probe
    fenced = fence is ToolEffect.NON_IDEMPOTENT_WRITE and not probe
    if cause == "failure":
        try:
            retryable = FailureClass(str(payload.get("error_class"))).is_retryable
        except ValueError:
            return f"failure dead-letter with no failure class: {payload}"
        allowed: dict[str, bool] = {
            TerminationReason.NOT_RETRYABLE: not retryable or fenced,
            TerminationReason.RETRIES_EXHAUSTED: retryable and not fenced and spent,
        }
    elif cause in _REAPER_CAUSES:
        allowed = {
            TerminationReason.NOT_RETRYABLE: fenced or interactive,
            TerminationReason.RETRIES_EXHAUSTED: spent and not fenced and not interactive,
        }
    elif cause == "drain":
        allowed = {
            TerminationReason.NOT_RETRYABLE: fenced,
            TerminationReason.RETRIES_EXHAUSTED: in_doubt and spent,
        }
    elif cause == "probe":
        allowed = {TerminationReason.NOT_RETRYABLE: in_doubt}
    else:
        return f"dead-letter with unknown cause {cause!r}"
    if allowed.get(str(reason), False):
        return None
    return (
        f"dead-lettered {reason} ({cause}, class {payload.get('error_class', '-')}) with "
        f"fence {fence or 'none'} and {dl.charged} of {max_requeues} requeues spent"
    )


def _check_dead_letters(w: _Walk, run: Run) -> None:
    for i, dl in enumerate(w.dead_letters):
        # The fence at a dead-letter stays on the row until a redrive, which records it.
        if i < len(w.redrives):
            prior = w.redrives[i].payload.get("pending_effect") or None
            fence = ToolEffect(prior) if prior else None
            probe = bool(w.redrives[i].payload.get("fence_probe"))
        else:
            fence, probe = run.pending_effect, run.fence_probe
        problem = _dead_letter_problem(dl, fence, w.interactive, w.max_requeues, probe)
        if problem:
            w.flag(dl.event, problem)


# -- the run row against its events --------------------------------------------------------


def _check_row(w: _Walk, run: Run) -> None:
    def bad(message: str) -> None:
        w.problems.append(f"run {run.id} ({run.status}): {message}")

    if run.lease_token != w.token:
        bad(f"row token {run.lease_token}, its events end at token {w.token}")
    # A hand-back before the segment started undoes the claim's count of an attempt.
    row_attempt = max(w.attempt - 1, 0) if w.unstarted else w.attempt
    if w.claims and run.attempt != row_attempt:
        bad(f"row attempt {run.attempt}, its last claim was attempt {w.attempt}")
    if run.requeue_count != w.charged:
        bad(f"requeue_count {run.requeue_count}, its events charge {w.charged}")
    problem = _status_problem(w, run)
    if problem:
        bad(problem)
    if run.status.is_terminal and (run.claimed_by or run.lease_expires is not None):
        bad(f"terminal but still leased to {run.claimed_by!r}")
    if run.status.is_terminal != (run.termination_reason is not None):
        bad(f"status {run.status} with termination reason {run.termination_reason}")


# The event a terminal row's events must end with.
_LAST_EVENT_OF = {
    RunStatus.COMPLETED: EventKind.ASSEMBLED,
    RunStatus.CANCELLED: EventKind.CANCELLED,
}


def _status_problem(w: _Walk, run: Run) -> str | None:
    """Does the row's status agree with how its events end?"""
    last = w.last.kind if w.last else None
    if run.status is RunStatus.RUNNING:
        if not w.held or not run.claimed_by or run.lease_expires is None:
            return "running, but no segment holds a lease on it"
    elif run.status is RunStatus.QUEUED:
        if w.held and not w.suspended:
            return f"queued, but its events end with a segment holding it ({last})"
    elif run.status in _LAST_EVENT_OF:
        if last is not _LAST_EVENT_OF[run.status]:
            return f"{run.status} but its last event is {last}"
    elif run.is_dead_letter:
        return _dead_letter_row_problem(w, run)
    return None


def _dead_letter_row_problem(w: _Walk, run: Run) -> str | None:
    if w.last is None or w.last.kind is not EventKind.DEAD_LETTERED:
        return f"dead-lettered but its last event is {w.last.kind if w.last else None}"
    if w.last.payload.get("reason") != run.termination_reason:
        return f"dead-lettered {run.termination_reason}, its event says {w.last.payload}"
    return None


def _check_lease(run: Run, now: Any, report: AuditReport, stranded: timedelta | None) -> str | None:
    if run.status is not RunStatus.RUNNING or run.lease_expires is None:
        return None
    if run.lease_expires >= now:
        return None
    report.expired_leases += 1
    if stranded is not None and now - run.lease_expires > stranded:
        return (
            f"run {run.id}: lease expired {(now - run.lease_expires).total_seconds():.1f}s "
            "ago and no reaper took it"
        )
    return None


# -- forks (SPEC §23) ----------------------------------------------------------------------


def _check_fork(
    store: Store, run: Run, events: Sequence[Event], walk: _Walk, original_exists: bool
) -> None:
    """A fork's journal is the original's events before the sequence it was forked at,
    then its `forked` event; the original still holds exactly those events (a fork never
    changes its original, and two forks of one run share nothing after their copies)."""
    origin = run.forked_from
    assert origin is not None
    forked = walk.forked
    if forked is None or forked.sequence != origin.sequence:
        walk.problems.append(
            f"run {run.id}: forked from {origin.run_id} at {origin.sequence}, but its "
            f"`forked` event is at {forked.sequence if forked else None}"
        )
        return
    if forked.payload.get("from") != origin.run_id or forked.payload.get("at") != origin.sequence:
        walk.problems.append(
            f"run {run.id}: its `forked` event {forked.payload} disagrees with its row"
        )
    if not original_exists:
        return  # purged since: nothing to compare with
    theirs = store.events(origin.run_id, after=-1)[: origin.sequence]

    def copy(e: Event) -> tuple[Any, ...]:
        return (e.sequence, e.kind, e.payload, e.attempt, e.lease_token, e.created_at)

    mine = [copy(e) for e in events[: origin.sequence]]
    if mine != [copy(e) for e in theirs]:
        differ = next(
            (a[0] for a, b in zip(mine, [copy(e) for e in theirs], strict=False) if a != b),
            min(len(mine), len(theirs)),
        )
        walk.problems.append(
            f"run {run.id}: its copy of run {origin.run_id}'s events differs from the original "
            f"at sequence {differ}"
        )


# -- the external ledger -------------------------------------------------------------------


def _check_ledger(
    entries: Sequence[LedgerEntry],
    runs: dict[str, Run],
    walks: dict[str, _Walk],
    ledger_tools: Collection[str] | None,
    report: AuditReport,
) -> None:
    report.ledger_entries = len(entries)
    counts = Counter((e.run_id, e.idempotency_key) for e in entries)
    for (run_id, key), n in sorted(counts.items()):
        if n > 1:
            report.violations.append(f"run {run_id}: write {key} happened {n} times")
    for entry in entries:
        run, walk = runs.get(entry.run_id), walks.get(entry.run_id)
        if run is None or walk is None:
            report.violations.append(f"ledger write {entry.idempotency_key} of an unknown run")
        else:
            _check_entry(entry, run, walk, report)
    for run_id, walk in walks.items():
        if runs[run_id].status is RunStatus.COMPLETED:
            for key, event in walk.tool_events.items():
                n = counts.get((run_id, key), 0)
                if n != 1 and _is_ledger_write(event, ledger_tools):
                    report.violations.append(
                        f"run {run_id}: recorded write {key} ({event.payload.get('name')}) "
                        f"is in the ledger {n} times, expected once"
                    )


def _is_ledger_write(event: Event, ledger_tools: Collection[str] | None) -> bool:
    p = event.payload
    if p.get("effect") != ToolEffect.NON_IDEMPOTENT_WRITE or p.get("error"):
        return False
    return ledger_tools is None or p.get("name") in ledger_tools


def _check_entry(entry: LedgerEntry, run: Run, walk: _Walk, report: AuditReport) -> None:
    key = entry.idempotency_key
    if entry.token is not None and entry.token not in walk.tokens:
        report.violations.append(
            f"run {run.id}: write {key} under token {entry.token}, which no segment held"
        )
    event = walk.tool_events.get(key)
    if event is None:
        report.unrecorded_writes += 1
        if not _interrupted_write_allowed(run, walk):
            report.violations.append(
                f"run {run.id} ({run.status}): write {key} ran, is not in the journal, "
                "and the run was not left fenced"
            )
    elif (
        entry.token is not None
        and event.lease_token != entry.token
        and event.payload.get("resolved_by") != "probe"  # recorded by a later segment
    ):
        report.violations.append(
            f"run {run.id}: write {key} ran under token {entry.token} but was recorded "
            f"under token {event.lease_token}"
        )


def _interrupted_write_allowed(run: Run, walk: _Walk) -> bool:
    """A write that ran but was not recorded must leave its run fenced, never resumed (an
    operator's forced redrive aside). A running run may still be inside that write."""
    fenced = run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    if any(r.payload.get("force") for r in walk.redrives):
        return True
    if run.status is RunStatus.RUNNING or run.status is RunStatus.FAILED:
        return fenced
    if run.status is RunStatus.QUEUED:  # back in doubt: the next segment asks the probe
        return fenced and run.fence_probe
    return run.status is RunStatus.CANCELLED  # a cancel keeps the fence; it never resumes


# -- the audit -----------------------------------------------------------------------------


def audit(
    store: Store,
    ledger: str | os.PathLike[str] | Iterable[LedgerEntry] | None = None,
    *,
    max_requeues: int = DEFAULT_MAX_REQUEUES,
    ledger_tools: Collection[str] | None = None,
    worker_logs: Iterable[str | os.PathLike[str]] = (),
    stranded_after: float | None = None,
) -> AuditReport:
    """Check every run of `store` (see the module docstring); never writes.

    `ledger`: a file of `RUN_ID KEY [TOKEN]` lines or entries; `ledger_tools`: the tools
    that write to it (default: every non-idempotent tool); `stranded_after`: seconds after
    which an expired lease still on a running run is a violation (default: not checked).
    """
    report = AuditReport()
    # The ledger first, then the rows, then the events: a write the ledger shows has its
    # fence, or its event, already committed by the time the row or the events are read.
    entries: list[LedgerEntry] | None = None
    if ledger is not None:
        entries = read_ledger(ledger) if isinstance(ledger, str | os.PathLike) else list(ledger)
    now = store.now()
    stranded = timedelta(seconds=stranded_after) if stranded_after is not None else None
    runs = {r.id: r for r in store.runs(limit=MAX_RUNS)}
    walks: dict[str, _Walk] = {}
    for run in runs.values():
        events = store.events(run.id)
        report.runs += 1
        report.events += len(events)
        report.outcomes[_outcome(run)] += 1
        origin = run.forked_from.run_id if run.forked_from else None
        walk = _walk(run.id, events, max_requeues, origin)
        if run.forked_from is not None:
            _check_fork(store, run, events, walk, run.forked_from.run_id in runs)
        if run.damaged is not None:
            report.violations.append(f"run {run.id}: damaged row: {run.damaged}")
        _check_dead_letters(walk, run)
        _check_row(walk, run)
        report.violations.extend(walk.problems)
        lease_problem = _check_lease(run, now, report, stranded)
        if lease_problem:
            report.violations.append(lease_problem)
        walks[run.id] = walk
    report.violations.extend(_tree_problems(runs))
    if entries is not None:
        _check_ledger(entries, runs, walks, ledger_tools, report)
    report.refused_writes = count_refused_writes(worker_logs)
    return report


def _tree_problems(runs: dict[str, Run]) -> list[str]:
    """SPEC §21, on the rows read at one instant: a child never goes on under an ended
    parent or root (an ended run cancels its children in its own transaction), and a
    parent never waits for children that have all ended (the last one wakes it in its)."""
    problems = []
    for run in runs.values():
        if run.status is RunStatus.WAITING_FOR_CHILDREN:
            awaited = [runs.get(str(c)) for c in (run.waiting or {}).get("children", [])]
            if awaited and all(c is not None and c.status.is_terminal for c in awaited):
                problems.append(
                    f"run {run.id}: waits for children that have all ended: nothing will wake it"
                )
        if run.parent_id is None or run.status.is_terminal:
            continue
        for role, ancestor_id in (("parent", run.parent_id), ("root", run.root_id)):
            ancestor = runs.get(str(ancestor_id))
            if ancestor is not None and ancestor.status.is_terminal:
                problems.append(
                    f"run {run.id}: {run.status}, but its {role} {ancestor.id} has ended "
                    f"({ancestor.status})"
                )
                break
    return problems


def _walk(
    run_id: str, events: Sequence[Event], max_requeues: int, origin: str | None = None
) -> _Walk:
    walk = _Walk(run_id, max_requeues, keys_of=origin or run_id)
    sequences = [e.sequence for e in events]
    if sequences != list(range(len(events))):
        walk.problems.append(
            f"run {run_id}: event sequences {_span(sequences)} have gaps or repeats"
        )
    if not events or events[0].kind is not EventKind.REQUEST:
        walk.problems.append(f"run {run_id}: its first event is not its request")
    for event in events:
        walk.see(event)
    return walk


def _outcome(run: Run) -> str:
    if run.termination_reason is None or str(run.termination_reason) == str(run.status):
        return str(run.status)
    return f"{run.status}/{run.termination_reason}"


def _span(sequences: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in sequences[:12])
    return f"[{shown}{', …' if len(sequences) > 12 else ''}]"
