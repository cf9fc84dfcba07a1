"""Runtime: the public surface of tenure (SPEC §9)."""

from __future__ import annotations

import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from tenure import _policy, _requests
from tenure._errors import InvalidRequest
from tenure._ladder import Engine, Segment, Settings
from tenure._reaper import DEFAULT_REAP_LIMIT, Reaper
from tenure._types import (
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
from tenure.agent._tools import DEFAULT_TOOL_TIMEOUT, Toolbox, make_tool
from tenure.providers._base import Provider
from tenure.providers.scripted import Scripted
from tenure.store import open_store
from tenure.store._base import NewEvent, NewRun, Store

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DATABASE_URL = "sqlite:///tenure.db"


def default_database_url() -> str:
    return os.environ.get("TENURE_DATABASE_URL") or DEFAULT_DATABASE_URL


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest(f"{name} must be positive, got {value!r}")
    return float(value)


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
    ) -> None:
        if isinstance(max_requeues, bool) or not isinstance(max_requeues, int) or max_requeues < 0:
            raise InvalidRequest(f"max_requeues must be a whole number >= 0, got {max_requeues!r}")
        self.database_url = database or default_database_url()
        self.settings = Settings(
            lease_seconds=_positive("lease_seconds", lease_seconds),
            max_requeues=max_requeues,
            backoff_base=_positive("backoff_base", backoff_base),
            backoff_cap=_positive("backoff_cap", backoff_cap),
        )
        self.reap_interval = (
            _positive("reap_interval", reap_interval) if reap_interval is not None else None
        )
        self._tools = Toolbox()
        self._models: dict[str, Provider] = {"scripted": Scripted()}
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._identity = f"run:{socket.gethostname()}:{os.getpid()}"

    # -- set-up --------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                store = open_store(self.database_url)
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

    @property
    def engine(self) -> Engine:
        return Engine(self.store, self._tools, self._models, self.settings)

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        effect: ToolEffect | str = ToolEffect.READ_ONLY,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        name: str | None = None,
    ) -> Any:
        """Register a tool: `@rt.tool` or `@rt.tool(effect=..., timeout=..., name=...)`."""

        def register(f: F) -> F:
            self._tools.add(make_tool(f, effect=effect, timeout=timeout, name=name))
            return f

        return register(fn) if fn is not None else register

    def add_model(self, name: str, provider: Provider) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a model name must be a non-empty string")
        if not callable(getattr(provider, "complete", None)):
            raise InvalidRequest(f"model {name!r}: a provider needs a complete(call) method")
        self._models[name] = provider

    @property
    def tool_names(self) -> list[str]:
        return self._tools.names()

    @property
    def model_names(self) -> list[str]:
        return sorted(self._models)

    def _validate(self, request: RunRequest) -> RunRequest:
        return _requests.validate(request, self._tools.check, self._models.__contains__)

    @staticmethod
    def _new_run(request: RunRequest, *, interactive: bool, delay: float = 0.0) -> NewRun:
        data = _requests.to_json(request)
        return NewRun(
            run_id=str(uuid.uuid4()),
            queue=request.queue,
            request=None if interactive else _requests.dumps(data),
            idempotency_key=request.idempotency_key,
            delay=delay,
            events=(NewEvent(EventKind.REQUEST, data),),
        )

    # -- running -------------------------------------------------------------------------

    def enqueue(self, request: RunRequest, *, delay: float = 0.0) -> str:
        """Queue a run; returns its id. With a taken idempotency key: the existing run's id."""
        return self.enqueue_many([request], delay=delay)[0]

    def enqueue_many(self, requests: Sequence[RunRequest], *, delay: float = 0.0) -> list[str]:
        """Queue several runs in one transaction (all are validated before any is stored)."""
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not (math.isfinite(delay) and delay >= 0)
        ):
            raise InvalidRequest(f"delay must be a number of seconds >= 0, got {delay!r}")
        runs = [
            self._new_run(self._validate(r), interactive=False, delay=float(delay))
            for r in requests
        ]
        return [run_id for run_id, _ in self.store.enqueue_many(runs)]

    def run(self, request: RunRequest) -> RunResult:
        """Execute a run here and now, under a lease held by this process."""
        run = self._new_run(self._validate(request), interactive=True)
        lease = self.store.start(run, self._identity, self.settings.lease_seconds)
        return Segment(self.engine, lease, None, 0, interactive=True, request=request).execute()

    def run_queued(self, run_id: str) -> RunResult | None:
        """Claim that queued run and execute it here; None if it could not be claimed."""
        claimed = self.store.claim_run(
            run_id, f"worker:{socket.gethostname()}:{os.getpid()}:0", self.settings.lease_seconds
        )
        if claimed is None:
            return None
        return Segment(self.engine, claimed.lease, claimed.request, claimed.requeue_count).execute()

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
        return Worker(
            self.engine,
            concurrency=concurrency,
            queues=queues,
            burst=burst,
            poll_interval=poll_interval,
            reap_interval=self.reap_interval,
            grace_seconds=grace_seconds,
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

    # -- operating -----------------------------------------------------------------------

    def cancel(self, run_id: str) -> bool:
        return self.store.cancel(run_id)

    def status(self, run_id: str) -> Run | None:
        return self.store.get_run(run_id)

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        return self.store.events(run_id, after)

    def runs(
        self,
        status: RunStatus | str | None = None,
        reason: TerminationReason | str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Run]:
        try:
            status = RunStatus(status) if status is not None else None
            reason = TerminationReason(reason) if reason is not None else None
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(f"limit must be a positive whole number, got {limit!r}")
        return self.store.runs(status, reason, queue, limit)

    def reap(self, limit: int = DEFAULT_REAP_LIMIT) -> ReapReport:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(f"limit must be a positive whole number, got {limit!r}")
        return Reaper(self.store, self.settings.max_requeues).run_once(limit)

    def redrive(self, run_id: str, force: bool = False) -> bool:
        """Send a dead-lettered run back to the queue with a fresh budget.

        Refused (False) while a non-idempotent write may have happened, unless `force`.
        """
        return self.store.redrive(run_id, force)

    def purge(self, older_than_seconds: float) -> int:
        if (
            isinstance(older_than_seconds, bool)
            or not isinstance(older_than_seconds, int | float)
            or not (math.isfinite(older_than_seconds) and older_than_seconds >= 0)
        ):
            raise InvalidRequest(
                f"older_than_seconds must be a number >= 0, got {older_than_seconds!r}"
            )
        return self.store.purge(float(older_than_seconds))

    def close(self) -> None:
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
