"""The worker: concurrency, queues, burst, the periodic reaper, and the graceful drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus, TerminationReason, ToolContext, ToolEffect
from tenure._worker import Worker
from tenure.audit import audit

from ..apps import make_app

MakeRuntime = Callable[..., tenure.Runtime]
ROOT = Path(__file__).resolve().parents[2]


def start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def nap_request(seconds: float, queue: str = "default") -> RunRequest:
    return RunRequest(
        prompt="nap",
        model="scripted",
        tools=["nap"],
        queue=queue,
        script=[{"call": [{"tool": "nap", "args": {"seconds": seconds}}]}, {"say": "rested"}],
    )


def with_nap(rt: tenure.Runtime) -> tenure.Runtime:
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    @rt.tool
    def nap(seconds: float) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(seconds)
        with lock:
            state["now"] -= 1
        return state["peak"]

    rt.nap_state = state  # type: ignore[attr-defined]
    return rt


def test_concurrency_runs_that_many_at_once_and_burst_drains(runtime: tenure.Runtime) -> None:
    rt = with_nap(runtime)
    ids = rt.enqueue_many([nap_request(0.2) for _ in range(9)])
    rt.work(concurrency=3, burst=True, poll_interval=0.02)
    assert all(rt.status(i).status is RunStatus.COMPLETED for i in ids)  # type: ignore[union-attr]
    assert rt.nap_state["peak"] == 3  # type: ignore[attr-defined]


def test_queues_filter(runtime: tenure.Runtime) -> None:
    rt = with_nap(runtime)
    mail = rt.enqueue(nap_request(0, "mail"))
    other = rt.enqueue(nap_request(0, "other"))
    rt.work(concurrency=2, queues=["mail"], burst=True, poll_interval=0.02)
    assert rt.status(mail).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    assert rt.status(other).status is RunStatus.QUEUED  # type: ignore[union-attr]


def test_burst_returns_while_a_run_backs_off(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(backoff_base=60, backoff_cap=60)
    run_id = rt.enqueue(
        RunRequest(prompt="f", model="scripted", script=[{"fail": "timeout"}, {"say": "x"}])
    )
    started = time.monotonic()
    rt.work(concurrency=2, burst=True, poll_interval=0.02)
    assert time.monotonic() - started < 10
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1


def test_the_worker_reaps_a_dead_workers_run_and_finishes_it(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=0.4)
    run_id = rt.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "saved"}]))
    assert rt.store.claim_run(run_id, "worker:dead:1:1", 0.4) is not None  # then it "dies"
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = start(worker)
    started = time.monotonic()
    wait_for(lambda: rt.status(run_id).status is RunStatus.COMPLETED)  # type: ignore[union-attr]
    elapsed = time.monotonic() - started
    worker.stop()
    thread.join(10)
    assert elapsed < 0.4 + 0.1 + 2.0  # lease + reap interval (lease/4) + slack
    causes = [e.payload.get("cause") for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
    assert causes == ["stale"]


def test_drain_lets_in_flight_runs_finish_within_the_grace_period(
    runtime: tenure.Runtime,
) -> None:
    rt = with_nap(runtime)
    run_id = rt.enqueue(nap_request(0.5))
    worker = rt.worker(concurrency=1, poll_interval=0.02, grace_seconds=10)
    thread = start(worker)
    wait_for(lambda: rt.status(run_id).status is RunStatus.RUNNING)  # type: ignore[union-attr]
    later = rt.enqueue(nap_request(0))
    worker.stop()
    thread.join(15)
    assert not thread.is_alive()
    assert rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    assert rt.status(later).status is RunStatus.QUEUED  # type: ignore[union-attr]


def test_after_the_grace_period_runs_are_handed_back_without_charge(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    release = threading.Event()
    writing = threading.Event()

    @rt.tool
    def hang() -> str:
        release.wait(10)
        return "late"

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def pay() -> str:
        writing.set()
        release.wait(10)
        return "paid"

    def request(tool: str) -> RunRequest:
        return RunRequest(
            prompt="h",
            model="scripted",
            tools=[tool],
            script=[{"call": [{"tool": tool}]}, {"say": "x"}],
        )

    reader = rt.enqueue(request("hang"))
    payer = rt.enqueue(request("pay"))
    worker = rt.worker(concurrency=2, poll_interval=0.02, grace_seconds=0.3)
    thread = start(worker)
    wait_for(writing.is_set)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    release.set()

    handed = rt.status(reader)
    assert handed is not None and handed.status is RunStatus.QUEUED
    assert handed.requeue_count == 0  # a drain is not the run's fault
    assert rt.events(reader)[-1].payload == {"cause": "drain", "worker": worker.identity}

    fenced = rt.status(payer)
    assert fenced is not None and fenced.status is RunStatus.FAILED
    assert fenced.termination_reason is TerminationReason.NOT_RETRYABLE
    assert fenced.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    time.sleep(0.1)  # the abandoned segments wake up: they must write nothing
    assert rt.status(reader).status is RunStatus.QUEUED  # type: ignore[union-attr]
    assert not any(e.kind is EventKind.TOOL for e in rt.events(payer))


def test_sigterm_drains_a_real_worker_process(tmp_path: Path, db_url: str) -> None:
    rt = make_app(db_url, str(tmp_path / "ledger"))
    run_id = rt.enqueue(
        RunRequest(
            prompt="n",
            model="scripted",
            tools=["nap"],
            script=[{"call": [{"tool": "nap", "args": {"seconds": 1.0}}]}, {"say": "ok"}],
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.apps", db_url, str(tmp_path / "ledger"), "--lease", "30"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_for(lambda: rt.status(run_id).status is RunStatus.RUNNING, 30)  # type: ignore[union-attr]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "SIGTERM received, draining" in err
    assert rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    rt.close()


def test_tool_context_reaches_a_worker_run(runtime: tenure.Runtime) -> None:
    seen: list[ToolContext] = []

    @runtime.tool
    def look(ctx: ToolContext) -> None:
        seen.append(ctx)

    run_id = runtime.enqueue(
        RunRequest(
            prompt="l",
            model="scripted",
            tools=["look"],
            script=[{"call": [{"tool": "look"}]}, {"say": "x"}],
        )
    )
    runtime.work(concurrency=1, burst=True, poll_interval=0.02)
    assert seen and seen[0].run_id == run_id and seen[0].fencing_token == 1


def test_a_worker_without_a_runs_tool_hands_it_back_untouched(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never a made-up answer: a worker that lacks the run's tool (or model) gives the run
    back without counting an attempt or charging the budget, says what it lacks, and does
    not take it again at once (no claim/hand-back loop)."""
    app = make_runtime()

    @app.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def tag_ticket(ticket: str) -> str:
        return f"tagged {ticket}"

    run_id = app.enqueue(
        RunRequest(
            prompt="tag it",
            model="scripted",
            tools=["tag_ticket"],
            script=[
                {"fail": "server_error", "attempts": [0]},
                {"call": [{"tool": "tag_ticket", "args": {"ticket": "T-1"}}]},
                {"say": "Tagged."},
            ],
        )
    )
    plain = make_runtime()  # the scripted model, but no tag_ticket
    plain.work(concurrency=2, burst=True)  # returns: the run is not claimable again now
    run = plain.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.attempt == 0 and run.requeue_count == 0
    assert run.error_class is tenure.FailureClass.CONFIGURATION and "tag_ticket" in run.error
    assert run.available_at is not None and run.available_at > plain.store.now()
    handed = [e for e in plain.events(run_id) if e.kind is EventKind.REQUEUED]
    assert [e.payload["cause"] for e in handed] == ["unserved"]
    assert handed[0].payload["missing"] == ["tool 'tag_ticket'"]
    assert [e.kind for e in plain.events(run_id)].count(EventKind.CLAIMED) == 1

    first_wait = run.available_at - plain.store.now()
    monkeypatch.setattr("tenure.store._owner.UNSERVED_BASE_SECONDS", 0.05)
    # A worker that has the tool serves it, from its first real attempt: the scripted
    # failure on attempt 0 happens (the hand-back counted no attempt).
    time.sleep(max(0.0, first_wait.total_seconds()) + 0.1)
    served = app.run_queued(run_id)
    assert served is not None and served.outcome is tenure.Outcome.REQUEUED
    time.sleep(0.2)
    served = app.run_queued(run_id)
    assert served is not None and served.outcome is tenure.Outcome.COMPLETED
    run = app.status(run_id)
    assert run is not None and run.requeue_count == 1 and run.attempt == 1
    tool = [e for e in app.events(run_id) if e.kind is EventKind.TOOL]
    assert len(tool) == 1 and tool[0].payload["result"] == "tagged T-1"
    assert audit(app.store, max_requeues=3).ok


def test_unserved_hand_backs_wait_longer_each_time(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tenure.store._owner.UNSERVED_BASE_SECONDS", 0.4)
    app = make_runtime()
    app.add_model("special", tenure.providers.Scripted())
    run_id = app.enqueue(RunRequest(prompt="x", model="special", script=[{"say": "ok"}]))
    plain = make_runtime()
    waits = []
    for _ in range(3):
        wait_for(lambda: plain.run_queued(run_id) is not None)
        run = plain.status(run_id)
        assert run is not None and run.status is RunStatus.QUEUED and run.attempt == 0
        assert run.available_at is not None
        waits.append((run.available_at - plain.store.now()).total_seconds())
    # Each wait is read against the store's clock, whose stored times round to the
    # microsecond: allow that much past each bound.
    slack = 1e-5
    assert 0.2 < waits[0] <= 0.4 + slack and 0.6 < waits[1] <= 0.8 + slack
    assert 1.4 < waits[2] <= 1.6 + slack
    assert "model 'special'" in (plain.status(run_id).error or "")  # type: ignore[union-attr]


def test_buffered_runs_handed_back_on_stop_count_no_attempt(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run claimed ahead and handed back unstarted keeps its attempt: a scripted failure
    on attempt 0 fails its first real segment, whichever worker runs it."""
    # The worker claims ahead only while recent segments were short; on a loaded machine
    # they may not be, and then nothing is buffered. This test is about the hand-back.
    monkeypatch.setattr("tenure._worker.PREFETCH_BELOW_SECONDS", 60.0)
    rt = make_runtime()
    script = [{"fail": "server_error", "attempts": [0]}, {"say": "ok"}]
    ids = [rt.enqueue(RunRequest(prompt="p", model="scripted", script=script)) for _ in range(300)]
    # Stopped while runs wait in the buffer: with one slot, the buffer is empty while the
    # slot runs the last run of a claim, and a stop then hands nothing back. So the stop is
    # asked right after a commit that buffered runs (watching from the test's thread missed
    # that moment on a loaded machine: a buffer of trivial runs empties within milliseconds).
    committed = Worker._committed

    def stop_while_buffered(self: Worker, claimed: list[Any], ended: int) -> None:
        committed(self, claimed, ended)
        if sum(self.stats.outcomes.values()) >= 40 and self._buffered >= 3:
            self.stop()

    monkeypatch.setattr(Worker, "_committed", stop_while_buffered)
    worker = rt.worker(concurrency=1)
    thread = start(worker)
    thread.join(30)
    if thread.is_alive():  # stopped here, so that it does not run on into the next tests
        worker.stop(immediately=True)
        thread.join(20)
        pytest.fail("the worker was never stopped with runs in its buffer")
    monkeypatch.undo()
    assert worker.stats.released > 0, "nothing was buffered: the test proves nothing"
    handed = [
        e
        for run_id in ids
        for e in rt.events(run_id)
        if e.kind is EventKind.REQUEUED and e.payload["cause"] == "unstarted"
    ]
    assert handed and all(e.payload["why"] == "the worker is stopping" for e in handed)
    time.sleep(0.2)  # the failed attempts' backoff
    while rt.worker(concurrency=2, burst=True).run().claimed:
        time.sleep(0.1)
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
        assert run.requeue_count == 1 and run.attempt == 1, run
    assert audit(rt.store, max_requeues=3).ok
