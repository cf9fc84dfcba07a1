"""A draining worker dead-letters a run only while its non-idempotent fence stands.

Found by the chaos soak: a drain saw the fence standing (its `release` was refused), the
write then finished and was recorded (the fence cleared), and the drain dead-lettered the
run anyway — a run whose write is safely in the journal, dead-lettered `not_retryable` with
no fence. Here the interleaving is forced: the store's `release` answers, then lets the tool
finish and waits until its event is recorded, before the drain goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import tenure
from tenure import EventKind, RunRequest, RunStatus, ToolEffect
from tenure._ladder import Engine
from tenure._worker import Worker
from tenure.audit import audit
from tenure.store import Lease


class ReleaseThenLetTheWriteFinish:
    """The real store; only `release` is slowed down, after it has answered."""

    def __init__(self, store: Any, go: threading.Event, recorded: Callable[[], bool]) -> None:
        self._store, self._go, self._recorded = store, go, recorded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def release(self, lease: Lease) -> bool:
        released: bool = self._store.release(lease)
        self._go.set()
        deadline = time.monotonic() + 10
        while not self._recorded() and time.monotonic() < deadline:
            time.sleep(0.01)
        return released


def test_a_drain_does_not_dead_letter_a_write_that_was_recorded(
    make_runtime: Callable[..., tenure.Runtime],
) -> None:
    rt = make_runtime(lease_seconds=5)
    started, go = threading.Event(), threading.Event()

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def pay(amount: int) -> int:
        started.set()
        go.wait(10)
        return amount

    run_id = rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["pay"],
            script=[
                {"call": [{"tool": "pay", "args": {"amount": 3}}]},
                {"sleep": 0.5},  # the segment goes on after its write is recorded
                {"say": "paid"},
            ],
        )
    )

    def recorded() -> bool:
        return any(e.kind is EventKind.TOOL for e in rt.store.events(run_id))

    engine = rt.engine
    store = ReleaseThenLetTheWriteFinish(engine.store, go, recorded)
    worker = Worker(
        Engine(store, engine.tools, engine.models, engine.settings),  # type: ignore[arg-type]
        concurrency=1,
        poll_interval=0.02,
        grace_seconds=0.0,
    )
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(10)
    worker.stop(immediately=True)
    thread.join(20)
    assert not thread.is_alive()
    deadline = time.monotonic() + 10
    while rt.status(run_id).status is RunStatus.RUNNING and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    run = rt.status(run_id)
    assert run is not None
    assert not run.is_dead_letter, f"a recorded write's run was dead-lettered: {run}"
    assert run.status is RunStatus.QUEUED  # handed back: the next segment resumes after pay
    assert [e.payload["name"] for e in rt.events(run_id) if e.kind is EventKind.TOOL] == ["pay"]
    report = audit(rt.store)
    assert report.ok, report.summary()
    # The handed-back segment still runs on its slot thread until its next write is refused;
    # let it stop before the store closes.
    deadline = time.monotonic() + 10
    while worker.inflight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.inflight == 0
