"""A step past its deadline, as an operator sees it: `tenure runs`, `tenure status` and
`tenure events` name the step and its deadline, not a dead worker (SPEC §15)."""

from __future__ import annotations

import threading

import tenure
from tenure import RunRequest, RunStatus, TerminationReason
from tenure.audit import audit

from .conftest import Cli, wait_for


def test_a_step_past_its_deadline_is_shown_as_such(cli: Cli) -> None:
    """The tool hangs on every attempt under a budget of one requeue: its first attempt is
    requeued for its deadline, its second dead-lettered for it, and each place that shows
    the run says so."""
    # The lease outlives the worker's look for hung steps after the deadline (every 0.5 s).
    rt = tenure.Runtime(cli.url, lease_seconds=2.0, max_requeues=1)
    unblock = threading.Event()

    @rt.tool(timeout=0.3)
    def stuck() -> str:
        unblock.wait(30)
        return "late"

    run_id = rt.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["stuck"],
            script=[{"call": [{"tool": "stuck"}]}, {"say": "ok"}],
        )
    )
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: getattr(rt.status(run_id), "status", None) is RunStatus.FAILED)
        assert audit(rt.store, max_requeues=1).violations == []
    finally:
        unblock.set()
        worker.stop()
        thread.join(10)
        rt.close()

    first = "step 3 (tool stuck) ran past its deadline of 0.3 s"
    last = "step 5 (tool stuck) ran past its deadline of 0.3 s"
    status = cli("status", run_id, "--json").json()
    assert status["termination_reason"] == str(TerminationReason.RETRIES_EXHAUSTED)
    assert status["error_class"] == "timeout"
    assert status["error"] == f"{last}, and the requeue budget is spent (1 of 1)"
    assert last in cli("status", run_id).out
    assert last in cli("runs").out  # the error column, clipped after the cause

    events = cli("events", run_id).out
    assert f"step deadline: {first}" in events
    assert "lease expired" not in events and "stopped renewing" not in events
    assert "retries_exhausted (step_deadline)" in events
