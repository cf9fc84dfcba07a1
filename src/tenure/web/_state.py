"""What every route of the web app shares, and the operator actions both the API and the
dashboard perform (so that a redrive means the same thing, and is audited the same way,
whichever way it comes)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastapi import HTTPException, Request

from tenure import Event, ForkPlan, ForkRefused, Run, RunStatus, Runtime, TerminationReason, _bulk
from tenure._types import DEAD_LETTER_REASONS, ToolEffect
from tenure.agent._held import HeldContext
from tenure.agent._runviews import AgentCall, agent_call
from tenure.store._base import Store
from tenure.store._records import QUEUE_TOTALS_WINDOW
from tenure.web import _overview, _views
from tenure.web._metrics import Metrics
from tenure.web._security import Caller, Security

audit = logging.getLogger("tenure.web.audit")

# A bulk redrive handles at most this many runs per request.
MAX_BULK_REDRIVE = 500
LEASES_SHOWN = 1000
# The runs of a tree a run page and the API show (SPEC §21).
TREE_LIMIT = 500
# The workers view: the rows of this many workers, the most recently seen first.
WORKERS_SHOWN = 200
# The queue panel, the workers view and id search read at most this many runs per status
# (the store has no per-queue count yet): beyond it, a depth is shown as "at least".
SCAN_LIMIT = 10_000
# Runs ended in the last half hour, for the chart: at most this many per terminal status.
FINISHED_SCAN = 5_000
# Queue depth over time: one sample per this many seconds of reading counts, an hour kept.
DEPTH_SAMPLE_SECONDS = 5.0
DEPTH_SAMPLES = 720
_ACTIVE = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING_FOR_APPROVAL,
    RunStatus.WAITING_FOR_INPUT,
    RunStatus.WAITING_FOR_CHILDREN,
)


class NotFound(HTTPException):
    def __init__(self, run_id: str) -> None:
        super().__init__(404, f"no run with id {run_id!r}")


class Conflict(HTTPException):
    def __init__(self, detail: str) -> None:
        super().__init__(409, detail)


@dataclass
class Web:
    runtime: Runtime
    security: Security
    metrics: Metrics
    hitl: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # (database time, runs queued) each time counts were read, DEPTH_SAMPLE_SECONDS apart.
    depth_history: deque[tuple[datetime, int]] = field(
        default_factory=lambda: deque(maxlen=DEPTH_SAMPLES)
    )
    _history_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def store(self) -> Store:
        return self.runtime.store

    # -- reads -----------------------------------------------------------------------------

    def run(self, run_id: str) -> Run:
        run = self.runtime.status(run_id)
        if run is None:
            raise NotFound(run_id)
        return run

    def tree(self, run: Run) -> list[Run]:
        """The tree `run` is part of (SPEC §21), from its root: parents before children,
        at most TREE_LIMIT runs."""
        return self.store.tree(run.root_id or run.id, TREE_LIMIT)

    def page(
        self,
        status: RunStatus | None,
        reason: TerminationReason | None,
        queue: str | None,
        limit: int,
        cursor: str | None,
        parent: str | None = None,
        roots: bool = False,
    ) -> tuple[list[Run], str | None]:
        """One page of runs, newest first, and the cursor of the next page (None at the end);
        `parent`: only that run's children, `roots`: only runs without a parent (SPEC §21).

        One more run than asked for is read, so the last page says it is the last.
        """
        if cursor:
            found = self.store.runs_after(
                cursor, status, reason, queue, limit + 1, parent=parent, roots=roots
            )
            if not found and self.runtime.status(cursor) is None:
                raise HTTPException(400, "the cursor's run no longer exists: start again")
        else:
            found = self.runtime.runs(status, reason, queue, limit + 1, parent=parent, roots=roots)
        runs = found[:limit]
        more = len(found) > limit
        return runs, (runs[-1].id if more and runs else None)

    def counts(self) -> _views.Counts:
        counts = _views.counts(self.store.run_counts())
        self._sample_depth(counts.by_status.get(str(RunStatus.QUEUED), 0))
        return counts

    def _sample_depth(self, queued: int) -> None:
        now = self.store.now()
        with self._history_lock:
            last = self.depth_history[-1][0] if self.depth_history else None
            if last is None or (now - last).total_seconds() >= DEPTH_SAMPLE_SECONDS:
                self.depth_history.append((now, queued))

    def leases(self) -> list[_views.Holder]:
        return _views.leases(self.runtime.runs(RunStatus.RUNNING, limit=LEASES_SHOWN))

    def active_runs(self) -> list[Run]:
        """Runs not yet ended (up to SCAN_LIMIT of each status)."""
        return [r for s in _ACTIVE for r in self.runtime.runs(s, limit=SCAN_LIMIT)]

    def queues(self, now: datetime) -> list[_overview.QueueDepth]:
        totals = self.store.queue_totals(QUEUE_TOTALS_WINDOW)
        return _overview.queue_depths(
            self.active_runs(), now, self.store.paused_queues(), totals, QUEUE_TOTALS_WINDOW
        )

    def workers(self, now: datetime) -> list[_overview.WorkerSeen]:
        running = self.runtime.runs(RunStatus.RUNNING, limit=SCAN_LIMIT)
        return _overview.workers_seen(running, now, self.store.workers(WORKERS_SHOWN))

    def finished(self, now: datetime) -> list[_overview.Bar]:
        ended = [r for s in _overview.OUTCOMES for r in self.runtime.runs(s, limit=FINISHED_SCAN)]
        return _overview.finished_per_minute(ended, now)

    def search(self, fragment: str, limit: int) -> list[Run]:
        """Runs whose id contains `fragment` (any part: start, end or middle), newest first,
        among the newest SCAN_LIMIT runs; an exact id is found however old it is."""
        exact = self.runtime.status(fragment)
        if exact is not None:
            return [exact]
        needle = fragment.lower()
        return [r for r in self.runtime.runs(limit=SCAN_LIMIT) if needle in r.id.lower()][:limit]

    def agent_call(self, run_id: str) -> AgentCall | None:
        """The agent function a run calls and its input (None for a built-in run): read
        from its first event, which outlives the stored request."""
        return agent_call(self.store.request_event(run_id))

    def in_flight(self, runs: list[Run]) -> dict[str, Event]:
        """The latest event of each running run: its step in flight is the next one, under
        way since that event was recorded (one indexed read per running run)."""
        found: dict[str, Event] = {}
        for run in runs:
            if run.status is RunStatus.RUNNING:
                event = self.store.last_event(run.id)
                if event is not None:
                    found[run.id] = event
        return found

    def agent_calls(self, runs: list[Run]) -> dict[str, AgentCall | None]:
        return {run.id: self.agent_call(run.id) for run in runs}

    def prompts(self, runs: list[Run]) -> dict[str, str]:
        """The first line of each run's prompt: from its stored request, or (a completed run's
        request is cleared) from its `request` event."""
        lines: dict[str, str] = {}
        for run in runs:
            full = self.store.get_run(run.id, with_request=True)
            request = full.request if full is not None else None
            if request is None:
                first = next(iter(self.store.events(run.id)), None)
                request = first.payload if first is not None else None
            lines[run.id] = _overview.prompt_line(request)
        return lines

    def plan(self, run_id: str, *, reveal: bool) -> _views.RedrivePlan:
        run = self.store.get_run(run_id, with_request=True)
        if run is None:
            raise NotFound(run_id)
        tools = self.runtime.engine.tools
        effect_of: Callable[[str], ToolEffect] = tools.effect_of
        return _views.redrive_plan(
            run,
            self.runtime.events(run_id),
            has_request=run.request is not None,
            effect_of=effect_of,
            reveal=reveal,
        )

    def held_calls(self, run_id: str, caller: Caller, *, reveal: bool) -> list[_views.HeldCall]:
        """The calls a waiting run holds, with what this process knows of their tools.

        Revealing the arguments of a sensitive tool is an audited read."""
        calls = self.runtime.pending_calls(run_id)
        tools = self.runtime.engine.tools

        def describe(name: str) -> tuple[str, bool]:
            tool = tools.get(name)
            if tool is None:
                return "", False
            # A tool without a docstring is described by its own name: nothing to add.
            return ("" if tool.description == name else tool.description), tool.gate.sensitive

        held = _views.held_calls(calls, describe=describe)
        if reveal and any(c.sensitive for c in held):
            held = _views.held_calls(calls, describe=describe, events=self.runtime.events(run_id))
            audit.info(
                "reveal sensitive arguments of %s by %s (%s)", run_id, caller.actor, caller.via
            )
        return held

    def held_context(self, run_id: str, caller: Caller, *, reveal: bool) -> HeldContext | None:
        """Why a waiting run's calls were asked for (None if it no longer waits). Revealing
        the context that a sensitive tool hides is an audited read."""
        context = self.runtime.pending_context(run_id)
        if context is not None and context.hidden and reveal:
            context = self.runtime.pending_context(run_id, reveal=True)
            audit.info(
                "reveal the prompt and the model's words of %s by %s (%s)",
                run_id,
                caller.actor,
                caller.via,
            )
        return context

    # -- operator actions (audited) ----------------------------------------------------------

    def cancel(self, run_id: str, caller: Caller) -> None:
        if not self.runtime.cancel(run_id):
            run = self.run(run_id)
            raise Conflict(f"run {run_id} has already ended ({run.status}): nothing to cancel")
        audit.info("cancel %s by %s (%s)", run_id, caller.actor, caller.via)

    def pause_queue(self, queue: str, caller: Caller) -> bool:
        """Pause `queue` (False: it was paused already); audited either way."""
        changed = self.runtime.pause_queue(queue, by=caller.actor)
        audit.warning(
            "pause queue %r by %s (%s)%s",
            queue,
            caller.actor,
            caller.via,
            "" if changed else ": already paused",
        )
        return changed

    def resume_queue(self, queue: str, caller: Caller) -> bool:
        """Resume `queue` (False: it was not paused); audited either way."""
        changed = self.runtime.resume_queue(queue)
        audit.warning(
            "resume queue %r by %s (%s)%s",
            queue,
            caller.actor,
            caller.via,
            "" if changed else ": was not paused",
        )
        return changed

    def redrive(self, run_id: str, force: bool, caller: Caller) -> _views.RedrivePlan:
        plan = self.plan(run_id, reveal=False)
        if not plan.redrivable:
            raise Conflict(plan.why)
        if plan.needs_force and not force:
            raise Conflict(plan.why)
        if not self.runtime.redrive(run_id, force=force):
            raise Conflict(f"run {run_id} changed meanwhile: reload it")
        audit.warning(
            "redrive %s by %s (%s)%s; %d non-idempotent write(s) done before",
            run_id,
            caller.actor,
            caller.via,
            " FORCED past a standing fence" if plan.needs_force else "",
            len(plan.writes_done),
        )
        return plan

    def fork_plan(self, run_id: str, at: int) -> ForkPlan:
        self.run(run_id)  # an unknown run is a 404, not a bad request
        return self.runtime.fork_plan(run_id, at)

    def fork(
        self,
        run_id: str,
        at: int,
        model: str | None,
        allow_repeat_writes: bool,
        caller: Caller,
    ) -> tuple[str, ForkPlan]:
        """Fork `run_id` at `at` (SPEC §23): the plan, then the fork guarded by what the plan
        read. A refusal (writes that would repeat, a run that changed) is a conflict."""
        plan = self.fork_plan(run_id, at)
        try:
            fork_id = self.runtime.fork(
                run_id, at, model=model, allow_repeat_writes=allow_repeat_writes
            )
        except ForkRefused as exc:
            raise Conflict(str(exc)) from None
        audit.warning(
            "fork %s at %d by %s (%s): %s%s",
            run_id,
            at,
            caller.actor,
            caller.via,
            fork_id,
            f"; REPEATING {len(plan.repeated_writes)} non-idempotent write(s)"
            if plan.repeated_writes
            else "",
        )
        return fork_id, plan

    def cancel_many(
        self,
        status: RunStatus | None,
        queue: str | None,
        limit: int,
        caller: Caller,
        *,
        dry_run: bool = False,
        expected: int | None = None,
    ) -> dict[str, Any]:
        """Cancel up to `limit` runs not yet ended that the filter matches, each by its own
        guarded cancel (only while still in the listed status, when one was named). With
        `expected`, the count the operator confirmed: a different count now is a conflict,
        and nothing is cancelled."""
        f = _bulk.Filter(status, None, queue)
        chosen = _bulk.select(self.store, "cancel", f, limit)
        ids = [r.id for r in chosen.runs]
        if expected is not None and len(ids) != expected:
            raise Conflict(
                f"{len(ids)} runs match ({f.describe()}) now, not the {expected} confirmed: "
                "count again"
            )
        result: dict[str, Any] = {
            "dry_run": dry_run,
            "limit": limit,
            "matched": len(ids),
            "cancelled": [],
            "would_cancel": ids if dry_run else [],
            "changed": [],
            "more": chosen.more,
        }
        if dry_run:
            return result
        done = _bulk.cancel_each(self.store, chosen)
        result["cancelled"], result["changed"] = done.done, done.changed
        audit.warning(
            "bulk cancel by %s (%s), status=%s queue=%s limit=%d: cancelled %d %s; "
            "changed meanwhile %d %s",
            caller.actor,
            caller.via,
            status or "any",
            queue or "any",
            limit,
            len(done.done),
            done.done,
            len(done.changed),
            done.changed,
        )
        return result

    def redrive_many(
        self,
        reason: TerminationReason | None,
        queue: str | None,
        limit: int,
        caller: Caller,
        *,
        dry_run: bool = False,
        expected: int | None = None,
    ) -> dict[str, Any]:
        """Redrive up to `limit` dead-letters; runs whose non-idempotent fence stands and
        has no probe are skipped (each needs a person's look and a forced redrive of its own;
        with a probe, the redrive sends the run back in doubt and the probe decides). With
        `expected`, the count of runs to redrive the operator confirmed: a different count
        now is a conflict, and nothing is redriven."""
        if expected is not None and not dry_run:
            self._check_count(reason, queue, limit, caller, expected)
        return self._redrive_many(reason, queue, limit, caller, dry_run)

    def _redrive_many(
        self,
        reason: TerminationReason | None,
        queue: str | None,
        limit: int,
        caller: Caller,
        dry_run: bool,
    ) -> dict[str, Any]:
        reasons = [reason] if reason else sorted(DEAD_LETTER_REASONS)
        redriven: list[str] = []
        fenced: list[str] = []
        refused: list[str] = []
        more = False
        for r in reasons:
            cursor: str | None = None
            while True:
                handled = len(redriven) + len(fenced) + len(refused)
                if handled >= limit:
                    break
                page, cursor = self.page(RunStatus.FAILED, r, queue, limit - handled, cursor)
                for run in page:
                    if _bulk.needs_a_look(run):
                        fenced.append(run.id)
                    elif dry_run or self.runtime.redrive(run.id):
                        redriven.append(run.id)
                    else:
                        refused.append(run.id)
                if cursor is None:
                    break
            if len(redriven) + len(fenced) + len(refused) >= limit:
                more = cursor is not None or r != reasons[-1]
                break
        # A dry run redrives nothing: its candidates are listed as what it would redrive.
        result = {
            "dry_run": dry_run,
            "limit": limit,
            "redriven": [] if dry_run else redriven,
            "would_redrive": redriven if dry_run else [],
            "skipped_fenced": fenced,
            "refused": refused,
            "more": more,
        }
        if not dry_run:
            audit.warning(
                "bulk redrive by %s (%s), reason=%s queue=%s limit=%d: redriven %d %s; "
                "skipped %d fenced %s; refused %d %s",
                caller.actor,
                caller.via,
                reason or "any",
                queue or "any",
                limit,
                len(redriven),
                redriven,
                len(fenced),
                fenced,
                len(refused),
                refused,
            )
        return result

    def _check_count(
        self,
        reason: TerminationReason | None,
        queue: str | None,
        limit: int,
        caller: Caller,
        expected: int,
    ) -> None:
        """The dead letters a bulk redrive would take now are as many as were confirmed."""
        now = self._redrive_many(reason, queue, limit, caller, True)["would_redrive"]
        if len(now) != expected:
            raise Conflict(
                f"{len(now)} dead letters to redrive now, not the {expected} confirmed: count again"
            )


def web_of(request: Request) -> Web:
    web: Web = request.app.state.web
    return web
