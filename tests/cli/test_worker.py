"""`tenure worker` with real processes: the drain on SIGTERM/SIGINT, the reaper after a
SIGKILL, and a redrive refused while a non-idempotent fence stands."""

from __future__ import annotations

import signal

import pytest

import tenure
from tenure import RunStatus, TerminationReason, ToolEffect

from .conftest import Cli, one_line_error, wait_for

pytestmark = pytest.mark.slow


def _run(runtime: tenure.Runtime, run_id: str) -> tenure.Run:
    run = runtime.status(run_id)
    assert run is not None
    return run


def _running(runtime: tenure.Runtime, run_id: str) -> bool:
    return _run(runtime, run_id).status is RunStatus.RUNNING


def _expired(runtime: tenure.Runtime, run_id: str) -> bool:
    expires = _run(runtime, run_id).lease_expires
    return expires is not None and expires < runtime.store.now()


def _fenced(runtime: tenure.Runtime, run_id: str) -> bool:
    return _run(runtime, run_id).pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_worker_drains_in_flight_runs_on_signal(
    cli: Cli, runtime: tenure.Runtime, sig: signal.Signals
) -> None:
    run_id = cli.enqueue([{"sleep": 1.5}, {"say": "finished in time"}])
    worker = cli.popen("worker", "--concurrency", "2", "--poll-interval", "0.1")
    wait_for(lambda: _running(runtime, run_id))
    worker.send_signal(sig)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert f"{sig.name} received, draining" in err
    assert "worker drained and stopped: claimed 1 run (1 completed)" in out
    assert "Traceback" not in err
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.output == "finished in time"


def test_reap_requeues_the_runs_of_a_killed_worker(cli: Cli, runtime: tenure.Runtime) -> None:
    run_id = cli.enqueue([{"sleep": 30}, {"say": "never"}])
    worker = cli.popen("worker", "--lease-seconds", "1", "--poll-interval", "0.1")
    wait_for(lambda: _running(runtime, run_id))
    worker.kill()
    worker.communicate(timeout=30)
    wait_for(lambda: _expired(runtime, run_id))
    result = cli("reap")
    assert (result.code, result.out) == (0, "requeued 1\ndead-lettered 0\nskipped 0\n")
    assert _run(runtime, run_id).status is RunStatus.QUEUED
    requeued = [e for e in runtime.events(run_id) if e.kind == "requeued"]
    assert [e.payload["cause"] for e in requeued] == ["stale"]


def test_redrive_refused_while_a_non_idempotent_fence_stands(
    cli: Cli, runtime: tenure.Runtime, slow_app: str
) -> None:
    turns = [{"call": [{"tool": "slow_charge", "args": {"seconds": 3}}]}, {"say": "charged"}]
    script = cli.script(turns)
    enqueue = ["enqueue", "--prompt", "p", "--tool", "slow_charge", "--script", script]
    run_id = cli("--app", slow_app, *enqueue).out.strip()
    # No grace: the drain hands the run back at once, but its write is under way, so the run
    # is dead-lettered with the fence standing instead.
    worker = cli.popen(
        "--app", slow_app, "worker", "--grace-seconds", "0", "--poll-interval", "0.1"
    )
    wait_for(lambda: _fenced(runtime, run_id))
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE

    refused = cli("--app", slow_app, "redrive", run_id)
    assert refused.code == 1
    line = one_line_error(refused)
    assert run_id in line and "non-idempotent write" in line and "--force" in line

    bulk = cli("--app", slow_app, "redrive", "--all-dead-letters")
    assert bulk.code == 0
    assert bulk.out.splitlines()[:2] == [
        "redriven 0",
        "skipped 1 (non-idempotent fence stands and its tool has no probe: "
        "redrive each with --force)",
    ]
    forced = cli("--app", slow_app, "redrive", run_id, "--force")
    assert (forced.code, forced.out.strip()) == (0, f"redriven {run_id} (forced)")
    assert _run(runtime, run_id).status is RunStatus.QUEUED
