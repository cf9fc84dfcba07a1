"""A step past its deadline is reported as such (SPEC §15), not as a dead worker: the worker
that gives the step's slot back marks the run, and the reaper's requeue carries that cause.
Real worker threads and real databases; time passes for real (the database's clock)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import tenure
from tenure import EventKind, RunRequest, RunStatus
from tenure._worker import Worker
from tenure.audit import audit
from tenure.store import Lease

MakeRuntime = Callable[..., tenure.Runtime]
STALE_ERROR = "lease expired: the worker stopped renewing it"
# A lease that outlives the worker's look for hung steps (every HUNG_CHECK_SECONDS) after a
# step's deadline: the keeper's last renewal leaves at least two thirds of it. (With a lease
# shorter than that the mark may come too late, and the run is reported as a stale lease.)
LEASE = 2.0


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.02)


def _stuck_on_first_attempt(
    rt: tenure.Runtime,
    unblock: threading.Event,
    then: threading.Event | None = None,
    returned: threading.Event | None = None,
) -> str:
    """A run whose read-only tool hangs past its 0.3 s timeout on attempt 0 only (and on
    later attempts waits for `then`, within its timeout)."""

    @rt.tool(timeout=0.3)
    def stuck(ctx: tenure.ToolContext) -> int:
        if ctx.attempt == 0:
            unblock.wait(30)
            if returned is not None:
                returned.set()
        elif then is not None:
            then.wait(0.2)
        return ctx.attempt

    return rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["stuck"],
            script=[{"call": [{"tool": "stuck"}]}, {"say": "ok"}],
        )
    )


def _work_until_completed(worker: Worker, rt: tenure.Runtime, run_id: str) -> None:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: getattr(rt.status(run_id), "status", None) is RunStatus.COMPLETED)
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()


def _requeues(rt: tenure.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]


def test_a_step_past_its_deadline_is_requeued_as_such(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=LEASE)
    unblock, looked = threading.Event(), threading.Event()
    run_id = _stuck_on_first_attempt(rt, unblock, then=looked)
    seen: list[tenure.Run] = []
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        # The run as the operator sees it between the requeue and its completion (the
        # next attempt's tool waits until it was looked at).
        wait_for(lambda: bool(_requeues(rt, run_id)))
        run = rt.status(run_id)
        assert run is not None
        seen.append(run)
        looked.set()
        wait_for(lambda: getattr(rt.status(run_id), "status", None) is RunStatus.COMPLETED)
    finally:
        unblock.set()
        worker.stop()
        thread.join(10)
    why = "step 3 (tool stuck) ran past its deadline of 0.3 s"
    (requeued,) = _requeues(rt, run_id)
    assert requeued["cause"] == "step_deadline" and requeued["why"] == why
    assert requeued["lease_token"] == 1
    assert seen[0].error == why and seen[0].error_class is tenure.FailureClass.TIMEOUT
    assert rt.status(run_id).requeue_count == 1  # type: ignore[union-attr]
    assert audit(rt.store).violations == []  # a reaper's requeue, charged, under its token


class MarkAfterTheReaper:
    """The real store; `mark_step_deadline` is held (the worker has decided, not yet
    written) until the run has left the lease the worker decided under."""

    def __init__(self, store: Any, run_id: str) -> None:
        self._store, self._run_id = store, run_id
        self.marks: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def mark_step_deadline(self, lease: Lease, *args: Any) -> bool:
        def moved_on() -> bool:
            run = self._store.get_run(self._run_id)
            return run is not None and (
                run.status is not RunStatus.RUNNING or run.lease_token != lease.token
            )

        wait_for(moved_on, 10)
        won: bool = self._store.mark_step_deadline(lease, *args)
        self.marks.append(won)
        return won


def test_a_mark_that_comes_after_the_reapers_requeue_changes_nothing(
    make_runtime: MakeRuntime,
) -> None:
    """The race lost: the worker decides the step is past its deadline and stalls before
    its mark; the lease expires and the worker's own reaper requeues the run as stale. The
    late mark is refused: the requeue stands as written, and no other segment's row or
    event is touched."""
    rt = make_runtime(lease_seconds=0.6)
    unblock = threading.Event()
    run_id = _stuck_on_first_attempt(rt, unblock)
    store = MarkAfterTheReaper(rt.store, run_id)
    worker = Worker(
        dataclasses.replace(rt.engine, store=store),  # type: ignore[arg-type]
        concurrency=1,
        poll_interval=0.05,
        reap_interval=0.15,
    )
    try:
        _work_until_completed(worker, rt, run_id)
    finally:
        unblock.set()
    assert store.marks == [False]
    (requeued,) = _requeues(rt, run_id)
    assert requeued["cause"] == "stale" and "why" not in requeued
    tool_results = [e.payload["result"] for e in rt.events(run_id) if e.kind is EventKind.TOOL]
    assert tool_results == [1]  # the second attempt's; the hung one's never recorded


class StepReturnsBeforeTheMark:
    """The real store; before `mark_step_deadline` is written, the hung tool is let go and
    its segment ends (the step returned between the worker's decision and its mark)."""

    def __init__(self, store: Any, unblock: threading.Event, returned: threading.Event) -> None:
        self._store, self._unblock, self._returned = store, unblock, returned
        self.marks: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def mark_step_deadline(self, *args: Any) -> bool:
        self._unblock.set()
        assert self._returned.wait(10)
        time.sleep(0.1)  # the step's segment tries its next write, which is refused
        won: bool = self._store.mark_step_deadline(*args)
        self.marks.append(won)
        return won


def test_a_hung_step_that_returns_before_the_mark_records_nothing(
    make_runtime: MakeRuntime,
) -> None:
    """The step was given up before the mark: its late result is refused in-process and
    never recorded, so the step the mark names is still the last one, and the mark says
    why the lease lapsed."""
    rt = make_runtime(lease_seconds=LEASE)  # outlives the stall too: the mark is not late
    unblock, returned = threading.Event(), threading.Event()
    run_id = _stuck_on_first_attempt(rt, unblock, returned=returned)
    store = StepReturnsBeforeTheMark(rt.store, unblock, returned)
    worker = Worker(
        dataclasses.replace(rt.engine, store=store),  # type: ignore[arg-type]
        concurrency=1,
        poll_interval=0.05,
        reap_interval=0.15,
    )
    try:
        _work_until_completed(worker, rt, run_id)
    finally:
        unblock.set()
    assert store.marks == [True]
    (requeued,) = _requeues(rt, run_id)
    assert requeued["cause"] == "step_deadline"
    tool_results = [e.payload["result"] for e in rt.events(run_id) if e.kind is EventKind.TOOL]
    assert tool_results == [1]


def test_an_agent_functions_step_past_its_deadline_is_requeued_as_such(
    make_runtime: MakeRuntime,
) -> None:
    """The same for a step of an agent function (SPEC §20): one engine, one mark."""
    rt = make_runtime(lease_seconds=LEASE)
    unblock = threading.Event()

    @rt.tool(timeout=0.3)
    def stuck(ctx: tenure.ToolContext) -> int:
        if ctx.attempt == 0:
            unblock.wait(30)
        return ctx.attempt

    @rt.agent
    def flow(ctx: tenure.AgentContext) -> Any:
        return ctx.tool("stuck")

    run_id = rt.enqueue(RunRequest(agent="flow", input={}, model="scripted"))
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    try:
        _work_until_completed(worker, rt, run_id)
    finally:
        unblock.set()
    (requeued,) = _requeues(rt, run_id)
    assert requeued["cause"] == "step_deadline"
    assert requeued["why"].endswith("(tool stuck) ran past its deadline of 0.3 s")
    assert rt.status(run_id).output == "1"  # type: ignore[union-attr]
    assert audit(rt.store).violations == []
