"""Crash safety by crashing: real worker processes SIGKILLed mid-run, then an audit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus, TerminationReason, ToolEffect
from tenure.audit import audit

from ..apps import make_app

ROOT = Path(__file__).resolve().parents[2]
LEASE = 1.0
pytestmark = pytest.mark.slow


def spawn_worker(db_url: str, ledger: Path, *extra: str) -> subprocess.Popen[str]:
    log = ledger.with_name(f"worker-{time.monotonic_ns()}.log")
    command = [sys.executable, "-m", "tests.apps", db_url, str(ledger), "--lease", str(LEASE)]
    with log.open("w") as err:
        return subprocess.Popen(
            [*command, *extra],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def ledger_lines(ledger: Path) -> list[tuple[str, str]]:
    if not ledger.exists():
        return []
    return [tuple(line.split()[:2]) for line in ledger.read_text().splitlines()]  # type: ignore[misc]


def request(nap: float, hold: float = 0.0) -> RunRequest:
    return RunRequest(
        prompt="pay",
        model="scripted",
        tools=["read", "nap", "charge"],
        script=[
            {"call": [{"tool": "read"}]},
            {"call": [{"tool": "nap", "args": {"seconds": nap}}]},
            {"call": [{"tool": "charge", "args": {"amount": 100, "hold": hold}}]},
            {"say": "paid"},
        ],
    )


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_sigkilled_workers_runs_are_finished_by_another_worker(tmp_path: Path, db_url: str) -> None:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger))
    ids = rt.enqueue_many([request(nap=0.7) for _ in range(4)])  # a step shorter than the lease
    victim = spawn_worker(db_url, ledger, "--concurrency", "4")
    survivor = None
    try:
        # Kill it while every run is inside its nap: read recorded, charge not yet reached.
        wait_for(lambda: all(_naps(rt, i) for i in ids))
        killed_at = time.monotonic()
        victim.kill()
        victim.wait()
        survivor = spawn_worker(db_url, ledger, "--concurrency", "4")
        wait_for(lambda: all(rt.status(i).status.is_terminal for i in ids), 60)  # type: ignore[union-attr]
        recovered_in = time.monotonic() - killed_at
    finally:
        stop(victim)
        if survivor is not None:
            stop(survivor)
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
        assert run.requeue_count == 1 and run.attempt == 1
        events = rt.events(run_id)
        causes = [e.payload.get("cause") for e in events if e.kind is EventKind.REQUEUED]
        assert causes == ["stale"]
        reads = [e for e in events if e.kind is EventKind.TOOL and e.payload["name"] == "read"]
        assert len(reads) == 1, "a recorded step was executed again"
        assert [e.sequence for e in events] == list(range(len(events)))
    counts = Counter(ledger_lines(ledger))
    assert sorted(run for run, _ in counts) == sorted(ids)
    assert set(counts.values()) == {1}
    # Recovery within lease + reap interval, plus the nap and the start of a process.
    assert recovered_in < LEASE + LEASE / 4 + 0.7 + 10
    rt.close()


def _naps(rt: tenure.Runtime, run_id: str) -> bool:
    return any(
        e.kind is EventKind.LLM and "nap" in str(e.payload["message"]) for e in rt.events(run_id)
    )


def test_sigkill_during_a_non_idempotent_write_never_repeats_it(
    tmp_path: Path, db_url: str
) -> None:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger))
    run_id = rt.enqueue(request(nap=0.0, hold=30.0))
    victim = spawn_worker(db_url, ledger, "--concurrency", "1")
    survivor = None
    try:
        wait_for(lambda: len(ledger_lines(ledger)) == 1)  # the write happened, tool still busy
        victim.kill()
        victim.wait()
        survivor = spawn_worker(db_url, ledger, "--concurrency", "1")
        wait_for(lambda: rt.status(run_id).status.is_terminal, 60)  # type: ignore[union-attr]
    finally:
        stop(victim)
        if survivor is not None:
            stop(survivor)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert len(ledger_lines(ledger)) == 1, "the interrupted write was repeated"
    assert not rt.redrive(run_id), "redrive must refuse while the fence stands"
    rt.close()


def test_sigkill_while_ends_wait_for_their_commit_loses_nothing_and_repeats_nothing(
    tmp_path: Path, db_url: str
) -> None:
    """Short runs: the worker claims ahead and commits the ends of several runs together.
    Killed mid-drain, the runs it held (some finished but not yet committed) are requeued by
    the next worker's reaper and done once; nothing is completed twice or lost."""
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger))
    short = RunRequest(prompt="s", model="scripted", script=[{"say": "ok"}])
    ids = rt.enqueue_many([short for _ in range(1500)])
    victim = spawn_worker(db_url, ledger, "--concurrency", "8")
    survivor = None
    try:
        wait_for(lambda: len(rt.runs(RunStatus.COMPLETED, limit=301)) > 300)
        victim.kill()
        victim.wait()
        held = {r.id for r in rt.runs(RunStatus.RUNNING, limit=2000)}
        survivor = spawn_worker(db_url, ledger, "--concurrency", "8")
        wait_for(lambda: len(rt.runs(RunStatus.COMPLETED, limit=2000)) == len(ids), 120)
    finally:
        stop(victim)
        if survivor is not None:
            stop(survivor)
    assert held, "the kill found no run in flight"
    for run_id in ids:
        events = rt.events(run_id)
        assert [e.kind for e in events].count(EventKind.ASSEMBLED) == 1
        assert [e.sequence for e in events] == list(range(len(events)))
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
        assert run.requeue_count == (1 if run_id in held else 0)
    report = audit(rt.store)
    assert report.ok, report.summary()
    rt.close()
