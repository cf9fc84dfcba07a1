"""Runtime: the public surface of tenure (SPEC §9)."""

from __future__ import annotations

import inspect
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, cast

from tenure import _budget, _fork, _policy, _requests, _schedules
from tenure._capacity import Capacity, unused_model
from tenure._errors import DecisionConflict, ForkRefused, InvalidRequest, UnknownModel
from tenure._follow import follow
from tenure._keeper import Keeper
from tenure._ladder import Engine, Segment, Settings
from tenure._limits import Limits
from tenure._publisher import DeltaPublisher
from tenure._reaper import DEFAULT_REAP_LIMIT, Reaper
from tenure._schedules import Schedule
from tenure._types import (
    Delta,
    Event,
    EventKind,
    ReapReport,
    Run,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure._worker import DEFAULT_GRACE_SECONDS, DEFAULT_POLL_INTERVAL, Worker
from tenure.agent._functions import AgentFunction, make_agent
from tenure.agent._held import HeldContext, held_context
from tenure.agent._human import validate_input
from tenure.agent._tools import DEFAULT_TOOL_TIMEOUT, Toolbox, make_tool
from tenure.providers._awaited import Awaited
from tenure.providers._base import AsyncProvider, Provider
from tenure.providers.scripted import Scripted
from tenure.store import open_store
from tenure.store._base import (
    Budget,
    Claimed,
    ConcurrencyKey,
    ModelState,
    NewEvent,
    NewFork,
    NewRun,
    PausedQueue,
    Store,
)
from tenure.store._records import NO_USAGE, QUEUE_TOTALS_WINDOW, QueueState

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DATABASE_URL = "sqlite:///tenure.db"

log = logging.getLogger("tenure.schedules")


def default_database_url() -> str:
    return os.environ.get("TENURE_DATABASE_URL") or DEFAULT_DATABASE_URL


def _check_decider(who: str, execute: str) -> None:
    if not isinstance(who, str) or not who.strip():
        raise InvalidRequest("say who decided: a non-empty name")
    if execute not in ("queue", "inline"):
        raise InvalidRequest(f"execute must be 'queue' or 'inline', got {execute!r}")


def _positive(name: str, value: float) -> float:
    return _policy.check_seconds(name, value)


class Runtime:
    """Durable agent runs on one database.

    The database is opened (and its schema created or migrated) on first use, so a module
    may define its Runtime at import time without touching the database.
    """

    def __init__(
        self,
        database: str | None = None,
        *,
        lease_seconds: float = _policy.DEFAULT_LEASE_SECONDS,
        max_requeues: int = _policy.DEFAULT_MAX_REQUEUES,
        backoff_base: float = _policy.DEFAULT_BACKOFF_BASE,
        backoff_cap: float = _policy.DEFAULT_BACKOFF_CAP,
        reap_interval: float | None = None,
        approve_writes: bool = False,
        approval_timeout: float | None = None,
    ) -> None:
        if isinstance(max_requeues, bool) or not isinstance(max_requeues, int) or max_requeues < 0:
            raise InvalidRequest(f"max_requeues must be a whole number >= 0, got {max_requeues!r}")
        self.database_url = database or default_database_url()
        self.settings = Settings(
            lease_seconds=_positive("lease_seconds", lease_seconds),
            max_requeues=max_requeues,
            backoff_base=_positive("backoff_base", backoff_base),
            backoff_cap=_positive("backoff_cap", backoff_cap),
            approve_writes=bool(approve_writes),
            approval_timeout=(
                _positive("approval_timeout", approval_timeout)
                if approval_timeout is not None
                else None
            ),
        )
        self.reap_interval = (
            _positive("reap_interval", reap_interval) if reap_interval is not None else None
        )
        self._tools = Toolbox()
        self._agents: dict[str, AgentFunction] = {}
        self._models: dict[str, Provider] = {"scripted": Scripted()}
        self._model_timeouts: dict[str, float] = {}
        self._keeper = Keeper(lambda: self.store)
        self._deltas = DeltaPublisher(lambda: self.store)
        self._capacity = Capacity(lambda: self.store)
        self._store: Store | None = None
        # Set by a one-shot command (`tenure runs`, from cron ...): how long it waits for a
        # PostgreSQL server that does not answer before its one-line error (see open_store).
        self._reach_seconds: float | None = None
        self._lock = threading.Lock()
        self._identity = f"run:{socket.gethostname()}:{os.getpid()}"

    # -- set-up --------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                store = open_store(self.database_url, reach_seconds=self._reach_seconds)
                try:
                    store.migrate()
                except BaseException:
                    store.close()
                    raise
                self._store = store
            return self._store

    def use_database(self, database: str) -> None:
        """Point this Runtime at another database (closes the current connection)."""
        self.close()
        self.database_url = database
        self._capacity.forget_circuits()  # what was read of the other database's circuits

    @property
    def engine(self) -> Engine:
        return Engine(
            self.store,
            self._tools,
            self._models,
            self.settings,
            self._keeper,
            self._model_timeouts,
            capacity=self._capacity,
            deltas=self._deltas,
            agents=self._agents,
            validate=self._validate,
        )

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        effect: ToolEffect | str = ToolEffect.READ_ONLY,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        name: str | None = None,
        requires_approval: bool = False,
        input_schema: Any = None,
        sensitive: bool = False,
        approval_timeout: float | None = None,
        probe: Callable[..., Any] | None = None,
    ) -> Any:
        """Register a tool: `@rt.tool` or `@rt.tool(effect=..., timeout=..., name=...)`.

        `requires_approval=True` holds a call until a person approves it (`approve`);
        `input_schema` (a pydantic model or an object JSON schema) holds it until a person
        submits values (`submit_input`) that overlay the model's arguments. `sensitive`
        hides the call's arguments while it is held (`status()`, `pending_calls()`, the
        dashboard); a held call of any other tool shows them to whoever decides it.
        `probe(ctx, **args)`, for a non-idempotent write, tells whether an interrupted call
        happened (`tenure.Probe.done(result)`, `.not_done()`, `.unknown(reason)`): such a
        run goes back in doubt instead of being dead-lettered (SPEC §16).
        """

        def register(f: F) -> F:
            self._tools.add(
                make_tool(
                    f,
                    effect=effect,
                    timeout=timeout,
                    name=name,
                    requires_approval=requires_approval,
                    input_schema=input_schema,
                    sensitive=sensitive,
                    approval_timeout=approval_timeout,
                    probe=probe,
                )
            )
            return f

        return register(fn) if fn is not None else register

    def agent(self, fn: F | None = None, /, *, name: str | None = None) -> Any:
        """Register an agent function (SPEC §20): `@rt.agent` or `@rt.agent(name=...)`.

        `fn(ctx, **input)` receives a `tenure.AgentContext`; every `ctx.*` call is a durable
        step, replayed from the run's journal after a crash. Its parameters after the
        context (type hints, defaults, the docstring's descriptions) are the input schema
        that `RunRequest(agent=NAME, input={...})` is checked against at enqueue; its JSON
        return value is the run's output. A name registers once."""

        def register(f: F) -> F:
            agent = make_agent(f, name)
            known = self._agents.get(agent.name)
            if known is not None and known.fn is not f:
                raise InvalidRequest(
                    f"agent {agent.name!r} is already registered (use another name=)"
                )
            self._agents[agent.name] = agent
            return f

        return register(fn) if fn is not None else register

    @property
    def agent_names(self) -> list[str]:
        return sorted(self._agents)

    def agents(self) -> list[dict[str, Any]]:
        """The registered agent functions: name, description and input schema."""
        return [
            {"name": a.name, "description": a.description, "input_schema": a.input_schema}
            for _, a in sorted(self._agents.items())
        ]

    def _check_agent(self, name: str, values: dict[str, Any]) -> None:
        agent = self._agents.get(name)
        if agent is None:
            known = ", ".join(sorted(self._agents)) or "none registered"
            raise InvalidRequest(f"unknown agent {name!r} (agents: {known})")
        agent.bind(values)

    def add_model(
        self,
        name: str,
        provider: Provider | AsyncProvider,
        *,
        timeout: float = _policy.DEFAULT_MODEL_TIMEOUT,
        limits: Limits | None = None,
    ) -> None:
        """Register a model under `name`. A call to it may take up to `timeout` seconds: the
        lease keeper renews the run's lease until then, and not after (SPEC §15).

        `limits` (`tenure.Limits`) caps what every worker on this database together sends
        the model (SPEC §17); without it calls are not counted. Either way the model has a
        circuit shared by every worker: a rate limit with Retry-After opens it.

        A provider whose `complete` is a coroutine function is awaited on the process's
        event loop; past `timeout` its call is cancelled and fails as a `timeout`."""
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a model name must be a non-empty string")
        complete = getattr(provider, "complete", None)
        if not callable(complete):
            raise InvalidRequest(f"model {name!r}: a provider needs a complete(call) method")
        seconds = _positive(f"model {name!r}: timeout", timeout)
        if limits is not None and not isinstance(limits, Limits):
            raise InvalidRequest(f"model {name!r}: limits must be a tenure.Limits, got {limits!r}")
        self._model_timeouts[name] = seconds
        if inspect.iscoroutinefunction(complete):
            self._models[name] = Awaited(cast(AsyncProvider, provider), seconds)
        else:
            self._models[name] = cast(Provider, provider)
        self._capacity.add(name, cast(Provider, provider), limits)

    @property
    def tool_names(self) -> list[str]:
        return self._tools.names()

    @property
    def model_names(self) -> list[str]:
        return sorted(self._models)

    def _validate(self, request: RunRequest) -> RunRequest:
        return _requests.validate(
            request, self._tools.check, self._models.__contains__, self._check_agent
        )

    @staticmethod
    def _new_run(request: RunRequest, *, interactive: bool, delay: float = 0.0) -> NewRun:
        data = _requests.to_json(request)
        text = _requests.dumps_checked(data)
        return NewRun(
            run_id=_requests.new_run_id(),
            queue=request.queue,
            request=None if interactive else text,
            idempotency_key=request.idempotency_key,
            delay=delay,
            events=(NewEvent(EventKind.REQUEST, data, text),),
            priority=request.priority,
            concurrency_key=request.concurrency_key,
        )

    # -- running -------------------------------------------------------------------------

    def enqueue(self, request: RunRequest, *, delay: float = 0.0) -> str:
        """Queue a run; returns its id. With a taken idempotency key: the existing run's id."""
        return self.enqueue_many([request], delay=delay)[0]

    def enqueue_many(self, requests: Sequence[RunRequest], *, delay: float = 0.0) -> list[str]:
        """Queue several runs in one transaction (all are validated before any is stored)."""
        delay = _policy.check_seconds("delay", delay, allow_zero=True)
        runs = [self._new_run(self._validate(r), interactive=False, delay=delay) for r in requests]
        return [run_id for run_id, _ in self.store.enqueue_many(runs)]

    def run(self, request: RunRequest) -> RunResult:
        """Execute a run here and now, under a lease held by this process."""
        run = self._new_run(self._validate(request), interactive=True)
        lease = self.store.start(run, self._identity, self.settings.lease_seconds)
        return Segment(
            self.engine,
            lease,
            None,
            0,
            interactive=True,
            request=request,
            last_sequence=len(run.events) - 1,
        ).execute()

    def run_queued(self, run_id: str) -> RunResult | None:
        """Claim that queued run and execute it here; None if it could not be claimed."""
        claimed = self.store.claim_run(
            run_id, f"worker:{socket.gethostname()}:{os.getpid()}:0", self.settings.lease_seconds
        )
        if claimed is None:
            return None
        return self._continue(claimed)

    def _continue(self, claimed: Claimed) -> RunResult:
        return Segment(
            self.engine,
            claimed.lease,
            claimed.request,
            claimed.requeue_count,
            decision=claimed.decision,
            fence_call=claimed.fence_call,
            last_sequence=claimed.last_sequence,
        ).execute()

    def worker(
        self,
        concurrency: int = 4,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
    ) -> Worker:
        """A worker for this runtime, not yet started (`.run()` it; `.stop()` drains it)."""
        poll_interval = _positive("poll_interval", poll_interval)
        grace_seconds = _policy.check_seconds("grace_seconds", grace_seconds, allow_zero=True)
        return Worker(
            self.engine,
            concurrency=concurrency,
            queues=queues,
            burst=burst,
            poll_interval=poll_interval,
            reap_interval=self.reap_interval,
            grace_seconds=grace_seconds,
            fire_schedules=self.fire_schedules,
        )

    def work(
        self,
        concurrency: int = 4,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        """Work the queue until stopped (SIGTERM/SIGINT drain), or, with `burst`, until
        nothing is claimable now."""
        self.worker(
            concurrency, queues, burst, poll_interval=poll_interval, grace_seconds=grace_seconds
        ).run()

    # -- a person in the loop ------------------------------------------------------------

    def pending(self, limit: int = 100) -> list[Run]:
        """Runs waiting for an approval or for input, oldest first."""
        waiting = [
            *self.runs(RunStatus.WAITING_FOR_APPROVAL, limit=limit),
            *self.runs(RunStatus.WAITING_FOR_INPUT, limit=limit),
        ]
        return sorted(waiting, key=lambda r: r.updated_at)[:limit]

    def pending_calls(self, run_id: str) -> list[dict[str, Any]]:
        """The held calls of a waiting run (sensitive arguments hidden); [] if not waiting."""
        run = self.status(run_id)
        if run is None or run.waiting is None:
            return []
        keys = ("call_id", "tool", "effect", "args", "kind", "sensitive", "input_schema")
        return [{k: call.get(k) for k in keys} for call in run.waiting["calls"]]

    def pending_context(self, run_id: str, *, reveal: bool = False) -> HeldContext | None:
        """Why a waiting run's held calls were asked for: the run's prompt, the model's words
        in the turn that made them, and how long it has waited; None if it is not waiting.

        The prompt and the words are "<hidden>" (`hidden` says why) once the run has called
        a tool declared sensitive, unless `reveal`; what cannot be read is named in
        `damaged`, never raised."""
        run = self.store.get_run(run_id, with_request=True)
        if run is None or run.status not in (
            RunStatus.WAITING_FOR_APPROVAL,
            RunStatus.WAITING_FOR_INPUT,
        ):
            return None
        tools = self._tools

        def declared_sensitive(name: str) -> bool:
            tool = tools.get(name)
            return tool is not None and tool.gate.sensitive

        return held_context(
            run,
            self.store.events(run_id),
            self.store.now(),
            declared_sensitive=declared_sensitive,
            reveal=reveal,
        )

    def approve(
        self,
        run_id: str,
        approved: bool,
        decided_by: str,
        note: str | None = None,
        *,
        execute: str = "queue",
    ) -> RunResult | None:
        """Approve (or deny) the held turn of a run waiting for approval.

        An approved write then runs fenced as always; a denial goes back to the model as
        the call's result. The continuation is queued for a worker (returns None), or with
        `execute="inline"` runs here (returns its RunResult), unless the run has a
        concurrency key: it is then queued, for a worker's claim keeps the key's limit. Of
        two concurrent decisions one wins; the other raises DecisionConflict.
        """
        _check_decider(decided_by, execute)
        if note is not None and not isinstance(note, str):
            raise InvalidRequest("note must be a string")
        turn, _ = self._waiting(run_id, RunStatus.WAITING_FOR_APPROVAL)
        event = NewEvent(
            EventKind.APPROVAL,
            {"turn": turn, "approved": bool(approved), "decided_by": decided_by, "note": note},
        )
        decision = {"turn": turn, "approved": bool(approved)}
        return self._decide(run_id, RunStatus.WAITING_FOR_APPROVAL, decision, event, execute)

    def submit_input(
        self,
        run_id: str,
        values: dict[str, Any],
        submitted_by: str,
        *,
        execute: str = "queue",
    ) -> RunResult | None:
        """Submit the values a run waits for. They are validated before anything is
        claimed (invalid: InvalidRequest, the run keeps waiting) and overlay only the
        schema's declared keys; the event stream records who and when, never the values."""
        _check_decider(submitted_by, execute)
        turn, calls = self._waiting(run_id, RunStatus.WAITING_FOR_INPUT)
        accepted: dict[str, Any] = {}
        for call in calls:
            if call.get("kind") != "input" or not call.get("input_schema"):
                continue
            # An agent function's `ctx.input` (its call has a position) names no tool.
            tool = None if "position" in call else self._tools.get(call["tool"])
            model = tool.gate.input_model if tool else None
            accepted.update(validate_input(call["input_schema"], values, model))
        event = NewEvent(
            EventKind.INPUT,
            {"turn": turn, "submitted_by": submitted_by, "keys": sorted(accepted)},
        )
        decision = {"turn": turn, "values": accepted}
        return self._decide(run_id, RunStatus.WAITING_FOR_INPUT, decision, event, execute)

    def _waiting(self, run_id: str, expected: RunStatus) -> tuple[int, list[dict[str, Any]]]:
        state = self.store.waiting_of(run_id)
        if state is None:
            raise InvalidRequest(f"unknown run {run_id!r}")
        status, waiting = state
        if status is not expected or waiting is None:
            raise DecisionConflict(f"run {run_id} is not {expected} (it is {status})")
        return int(waiting["turn"]), list(waiting.get("calls", []))

    def _decide(
        self,
        run_id: str,
        expected: RunStatus,
        decision: dict[str, Any],
        event: NewEvent,
        execute: str,
    ) -> RunResult | None:
        if execute != "queue":
            # A run with a concurrency key starts again only through a worker's claim,
            # which keeps its key's limit (SPEC §22): a decision continued here would not.
            run = self.store.get_run(run_id)
            if run is not None and run.concurrency_key is not None:
                execute = "queue"
        if execute == "queue":
            if not self.store.decide_queued(run_id, expected, decision, event):
                raise DecisionConflict(f"run {run_id} is no longer {expected}")
            return None
        claimed = self.store.decide_inline(
            run_id, expected, decision, event, self._identity, self.settings.lease_seconds
        )
        if claimed is None:
            raise DecisionConflict(f"run {run_id} is no longer {expected}")
        return self._continue(claimed)

    # -- operating -----------------------------------------------------------------------

    def cancel(self, run_id: str, *, expected: RunStatus | str | None = None) -> bool:
        """Cancel a run that has not ended; False if it has. With `expected`, only while it
        is in that status (cancel what a listing showed queued, not a run claimed since)."""
        try:
            status = RunStatus(expected) if expected is not None else None
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        return self.store.cancel(run_id, status)

    def status(self, run_id: str) -> Run | None:
        return self.store.get_run(run_id)

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        return self.store.events(run_id, after)

    def budget(self, run_id: str) -> Budget | None:
        """The budget of the run's tree (SPEC §21) as its ledger has it now: the root's
        `max_tokens` / `max_cost`, what the tree spent and what its calls in flight hold.
        None until a model call of a run with a budget has used it."""
        return self.store.budget(_budget.tree_of(self.store, run_id))

    def stream(self, run_id: str, after: int = -1) -> Iterator[Event | Delta]:
        """Follow a run live, from any process (SPEC §18): its events after sequence `after`
        as they are recorded and, in between, the `Delta`s of a streaming model call in
        flight; ends when the run ends or waits for a person (nothing for an unknown run).

        A `Delta`'s `sequence` is the one its call's `llm` event will take. A call retried
        after a failure streams again from its start under a new sequence; the deltas of a
        sequence whose event is not an `llm` event were abandoned. Deltas are never events:
        `events()` does not return them.
        """
        return follow(self.store, run_id, after)

    def runs(
        self,
        status: RunStatus | str | None = None,
        reason: TerminationReason | str | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        metadata: dict[str, Any] | None = None,
        since: float | None = None,
        until: float | None = None,
        parent: str | None = None,
        roots: bool = False,
    ) -> list[Run]:
        """Runs, newest first, by status, termination reason and queue; and by the metadata
        of their request (every key given, with that value) and when they were created
        (`since` / `until`: seconds ago); `parent`: that run's children only; `roots`: only
        runs without a parent (SPEC §21)."""
        try:
            status = RunStatus(status) if status is not None else None
            reason = TerminationReason(reason) if reason is not None else None
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(f"limit must be a positive whole number, got {limit!r}")
        if parent is not None and (not isinstance(parent, str) or not parent):
            raise InvalidRequest(f"parent must be a run id, got {parent!r}")
        if parent is not None and roots:
            raise InvalidRequest("parent and roots exclude each other: a child is not a root")
        roots = bool(roots)
        if metadata is None and since is None and until is None:
            return self.store.runs(status, reason, queue, limit, parent=parent, roots=roots)
        if metadata is not None:
            if not isinstance(metadata, dict) or not metadata:
                raise InvalidRequest("metadata must be a non-empty dict of the values to match")
            _requests.check_json_value("metadata", metadata)
        ages = [
            _policy.check_seconds(name, value, allow_zero=True, ceiling=_policy.MAX_AGE_SECONDS)
            if value is not None
            else None
            for name, value in (("since", since), ("until", until))
        ]
        if ages[0] is not None and ages[1] is not None and ages[1] >= ages[0]:
            raise InvalidRequest("until must be more recent than since (fewer seconds ago)")
        return self.store.search_runs(
            metadata, ages[0], ages[1], status, reason, queue, limit, parent=parent, roots=roots
        )

    @staticmethod
    def _queue_name(queue: str) -> str:
        if not isinstance(queue, str) or not queue or len(queue) > _requests.MAX_QUEUE_NAME:
            raise InvalidRequest(
                f"queue must be a non-empty string of at most {_requests.MAX_QUEUE_NAME} "
                f"characters, got {queue!r}"
            )
        _requests.check_text("queue", queue)
        return queue

    def pause_queue(self, queue: str, *, by: str = "") -> bool:
        """Stop every worker claiming runs of `queue` (enforced by the claim itself, in the
        database); runs already claimed go on to their end, and the queue still takes
        enqueues. False when it was paused already. A queue may be paused before it has any
        run."""
        if not isinstance(by, str):
            raise InvalidRequest(f"by must be a string, got {by!r}")
        _requests.check_text("by", by)
        return self.store.pause_queue(self._queue_name(queue), by)

    def resume_queue(self, queue: str) -> bool:
        """Workers claim the runs of `queue` again; False when it was not paused."""
        return self.store.resume_queue(self._queue_name(queue))

    def paused_queues(self) -> list[PausedQueue]:
        return self.store.paused_queues()

    def set_concurrency_limit(self, key: str, limit: int | None) -> bool:
        """At most `limit` runs with this `RunRequest.concurrency_key` run at once, across
        every worker and host on this database (SPEC §22), enforced by the claim from the
        next claim on (runs already running go on). 0 holds the key's runs queued; None
        removes the limit (False when there was none). A queued run of a full key waits: it
        is not claimed, not charged, and not an attempt."""
        _requests.check_concurrency_key(key)
        if key is None:
            raise InvalidRequest("a concurrency key must be a non-empty string")
        _requests.check_text("key", key)
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit < 2**31
        ):
            raise InvalidRequest(
                f"a concurrency limit must be a whole number from 0 to {2**31 - 1}, or None, "
                f"got {limit!r}"
            )
        return self.store.set_concurrency_limit(key, limit)

    # -- schedules (SPEC §22) ----------------------------------------------------------

    def schedule(
        self, name: str, *, cron: str, request: RunRequest, timezone: str = "UTC"
    ) -> Schedule:
        """Store (or change) a schedule: at each tick of `cron` (minute hour day month
        weekday, read in `timezone`) one run of `request` is enqueued, by whichever worker
        fires it first; its idempotency key is `schedule:NAME:TICK`. A bad name, cron
        expression, time zone or request raises InvalidRequest and stores nothing."""
        _schedules.check_name(name)
        _requests.check_text("name", name)
        _schedules.check_cron(cron)
        zone = _schedules.zone(timezone)
        request = self._validate(request)
        if request.idempotency_key is not None:
            raise InvalidRequest(
                "a scheduled request takes no idempotency_key: each tick's is schedule:NAME:TICK"
            )
        text = _requests.dumps_checked(_requests.to_json(request))
        following = _schedules.next_after(cron, zone, self.store.now())
        self.store.put_schedule(name, cron, timezone, text, following)
        return next(s for s in self.store.schedules() if s.name == name)

    def schedules(self) -> list[Schedule]:
        """Every schedule, by name, with its next and last fire."""
        return self.store.schedules()

    def pause_schedule(self, name: str) -> bool:
        """No tick fires until it is resumed; False when it was paused already."""
        return self.store.pause_schedule(_schedules.check_name(name))

    def resume_schedule(self, name: str) -> bool:
        """Fires again from its next tick after now (ticks that fell while it was paused
        do not fire); False when it was not paused."""
        found = [s for s in self.store.schedules() if s.name == _schedules.check_name(name)]
        if not found:
            return False
        zone = _schedules.zone(found[0].timezone)
        following = _schedules.next_after(found[0].cron, zone, self.store.now())
        return self.store.resume_schedule(name, following)

    def delete_schedule(self, name: str) -> bool:
        """Removes the schedule (runs it enqueued stay); False when there was none."""
        return self.store.delete_schedule(_schedules.check_name(name))

    def fire_schedules(self) -> int:
        """Fire every due schedule once, for its latest tick; how many fired here. Each
        worker calls this in its maintenance pass."""
        return _schedules.Scheduler(
            lambda: (self.store.now(), self.store.due_schedules()), self._fire_one
        ).fire_due()

    def _fire_one(
        self, schedule: Schedule, seen: Any, tick: datetime, following: datetime
    ) -> str | None:
        data = dict(schedule.request or {})
        data["idempotency_key"] = _schedules.tick_key(schedule.name, tick)
        try:
            request = _requests.from_json(_requests.dumps(data))
        except InvalidRequest as exc:
            log.error("schedule %s: its stored request is unusable: %s", schedule.name, exc)
            return None
        run = self._new_run(request, interactive=False)
        return self.store.fire_schedule(schedule.name, seen, tick, following, run)

    def concurrency_keys(self) -> list[ConcurrencyKey]:
        """Every concurrency key with a limit or with runs queued or running: its limit,
        its runs running and queued (SPEC §22)."""
        return self.store.concurrency_keys()

    def queues(self, window: float = QUEUE_TOTALS_WINDOW) -> list[QueueState]:
        """Every queue that is paused, has runs not yet ended or had runs end in the last
        `window` seconds (default a day), by name: paused or not, its runs queued, running,
        waiting for a person and waiting for their child runs, and the tokens and cost of
        its runs not yet ended and of those that ended in the window (an all-time sum would
        read the whole history)."""
        if (
            isinstance(window, bool)
            or not isinstance(window, int | float)
            or not 0 < window < float("inf")
        ):
            raise InvalidRequest(f"window must be a positive number of seconds, got {window!r}")
        counts = self.store.queue_counts()
        totals = self.store.queue_totals(float(window))
        paused = {p.queue: p for p in self.store.paused_queues()}
        names = sorted({q for q, _ in counts} | set(paused) | set(totals))
        waiting = (str(RunStatus.WAITING_FOR_APPROVAL), str(RunStatus.WAITING_FOR_INPUT))
        return [
            QueueState(
                name,
                paused.get(name),
                queued=counts.get((name, str(RunStatus.QUEUED)), 0),
                running=counts.get((name, str(RunStatus.RUNNING)), 0),
                waiting=sum(counts.get((name, w), 0) for w in waiting),
                spent=totals.get(name, NO_USAGE),
                window=float(window),
                children=counts.get((name, str(RunStatus.WAITING_FOR_CHILDREN)), 0),
            )
            for name in names
        ]

    def models(self) -> list[ModelState]:
        """Every model's shared capacity and circuit (SPEC §17): those this database has a
        row for (a model with limits, or one whose circuit has opened, in any worker) and
        every model this runtime registered, with limits or not, by name."""
        found = {m.name: m for m in self.store.models()}
        limits = self._capacity.limits()
        now = None
        for name in self._capacity.names():
            if name not in found:
                now = now or self.store.now()
                found[name] = unused_model(name, limits.get(name), now)
        return [found[name] for name in sorted(found)]

    def reap(self, limit: int = DEFAULT_REAP_LIMIT) -> ReapReport:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(f"limit must be a positive whole number, got {limit!r}")
        return Reaper(self.store, self.settings.max_requeues).run_once(limit)

    def redrive(self, run_id: str, force: bool = False) -> bool:
        """Send a dead-lettered run back to the queue with a fresh budget.

        Refused (False) while a non-idempotent write may have happened, unless `force`;
        and for a child run whose parent has ended (SPEC §21).
        """
        return self.store.redrive(run_id, force)

    def fork_plan(self, run_id: str, at: int) -> _fork.ForkPlan:
        """What forking `run_id` at sequence `at` would keep, run again, and which writes
        it would repeat (SPEC §23); stores nothing. Bad input raises InvalidRequest."""
        if not isinstance(run_id, str) or not run_id:
            raise InvalidRequest(f"run id must be a non-empty string, got {run_id!r}")
        state = self.store.fork_state(run_id)
        if state is None:
            raise InvalidRequest(f"unknown run {run_id!r}")
        # Events are only ever appended: those up to the sequence the row was read at are
        # the journal the plan (and the fork's guard) speaks of.
        events = self.store.events(run_id)
        return _fork.make_plan(run_id, at, state, events)

    def fork(
        self,
        run_id: str,
        at: int,
        *,
        model: str | None = None,
        allow_repeat_writes: bool = False,
    ) -> str:
        """A new queued run whose journal is `run_id`'s events before sequence `at` (SPEC
        §23); returns its id. It resumes from there under the current code, with `model`
        if given. Refused (ForkRefused, one line, nothing stored) when it would repeat a
        completed non-idempotent write, unless `allow_repeat_writes`, or take up an
        interrupted write whose tool has no probe. The original is not changed."""
        if not isinstance(allow_repeat_writes, bool):
            raise InvalidRequest(
                f"allow_repeat_writes must be True or False, got {allow_repeat_writes!r}"
            )
        if model is not None and (not isinstance(model, str) or model not in self._models):
            raise UnknownModel(str(model))
        return self._fork(self.fork_plan(run_id, at), model, allow_repeat_writes)

    def _fork(self, plan: _fork.ForkPlan, model: str | None, allow_repeat_writes: bool) -> str:
        refusal = plan.refusal(allow_repeat_writes)
        if refusal is not None:
            raise ForkRefused(refusal)
        request = {**plan.request, "idempotency_key": None}
        if model is not None:
            request["model"] = model
        fork_id = _requests.new_run_id()
        event = NewEvent(
            EventKind.FORKED,
            {
                "from": plan.run_id,
                "at": plan.at,
                "model": model,
                "allow_repeat_writes": allow_repeat_writes,
                "repeated_writes": [w["idempotency_key"] for w in plan.repeated_writes],
                "in_doubt": None if plan.in_doubt is None else plan.in_doubt["idempotency_key"],
            },
        )
        state = plan.state
        in_doubt = plan.in_doubt is not None
        stored = self.store.fork(
            NewFork(
                fork_id=fork_id,
                run_id=plan.run_id,
                at=plan.at,
                request=_requests.dumps_checked(request),
                event=event,
                seen_last_sequence=state.last_sequence,
                seen_fence=state.pending_effect,
                seen_probe=state.fence_probe,
                fence=ToolEffect.NON_IDEMPOTENT_WRITE if in_doubt else None,
                fence_probe=in_doubt,
                fence_call=_fork.fork_fence_call(plan),
            )
        )
        if not stored:
            now = self.store.run_status(plan.run_id)
            raise ForkRefused(
                f"run {plan.run_id} changed while its fork was planned (it is {now} now): "
                "nothing was forked; plan again"
            )
        return fork_id

    def purge(self, older_than_seconds: float) -> int:
        seconds = _policy.check_seconds(
            "older_than_seconds",
            older_than_seconds,
            allow_zero=True,
            ceiling=_policy.MAX_AGE_SECONDS,
        )
        return self.store.purge(seconds)

    def close(self) -> None:
        # The keeper first: a round after this point would reopen the store.
        keeper, self._keeper = self._keeper, Keeper(lambda: self.store)
        keeper.close()
        deltas, self._deltas = self._deltas, DeltaPublisher(lambda: self.store)
        deltas.close()
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
