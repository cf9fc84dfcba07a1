"""Operator actions through the Runtime: redrive, cancel, purge, runs."""

from __future__ import annotations

import time

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus, TerminationReason, ToolEffect


def test_redrive_gives_a_dead_letter_a_fresh_budget_and_it_completes(
    runtime: tenure.Runtime,
) -> None:
    run_id = runtime.enqueue(
        RunRequest(
            prompt="r",
            model="scripted",
            script=[{"fail": "auth", "attempts": [0]}, {"say": "second time lucky"}],
        )
    )
    assert runtime.run_queued(run_id).outcome is Outcome.FAILED  # type: ignore[union-attr]
    dead = runtime.runs(reason=TerminationReason.NOT_RETRYABLE)
    assert [r.id for r in dead] == [run_id] and dead[0].is_dead_letter
    assert runtime.redrive(run_id)
    assert not runtime.redrive(run_id)  # no longer a dead letter
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    run = runtime.status(run_id)
    assert run is not None and run.attempt == 1 and run.output == "second time lucky"
    assert EventKind.REDRIVEN in [e.kind for e in runtime.events(run_id)]


def test_redrive_of_a_fenced_dead_letter_needs_force(runtime: tenure.Runtime) -> None:
    writes: list[int] = []

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def pay(ctx: tenure.ToolContext) -> None:
        writes.append(ctx.attempt)
        if ctx.attempt == 0:
            raise tenure.RetryableError("gateway lost the answer")

    run_id = runtime.enqueue(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay"}]}, {"say": "paid"}],
        )
    )
    assert runtime.run_queued(run_id).outcome is Outcome.FAILED  # type: ignore[union-attr]
    assert not runtime.redrive(run_id)
    assert runtime.redrive(run_id, force=True)  # a person decided the write did not happen
    assert runtime.run_queued(run_id).outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    assert writes == [0, 1]


def test_cancel_a_queued_run(runtime: tenure.Runtime) -> None:
    run_id = runtime.enqueue(RunRequest(prompt="c", model="scripted", script=[{"say": "x"}]))
    assert runtime.cancel(run_id)
    assert not runtime.cancel(run_id)
    assert runtime.run_queued(run_id) is None
    assert runtime.status(run_id).status is RunStatus.CANCELLED  # type: ignore[union-attr]


def test_purge_removes_old_terminal_runs(runtime: tenure.Runtime) -> None:
    done = runtime.run(RunRequest(prompt="d", model="scripted", script=[{"say": "x"}]))
    waiting = runtime.enqueue(RunRequest(prompt="w", model="scripted", script=[{"say": "x"}]))
    assert runtime.purge(3600) == 0
    time.sleep(0.2)
    assert runtime.purge(0.1) == 1
    assert runtime.status(done.run_id) is None and runtime.events(done.run_id) == []
    assert runtime.status(waiting) is not None


def test_runs_json_uses_the_spec_names(runtime: tenure.Runtime) -> None:
    result = runtime.run(RunRequest(prompt="j", model="scripted", script=[{"say": "x"}]))
    row = runtime.runs()[0].to_json()
    assert row["id"] == result.run_id and row["status"] == "completed"
    assert row["pending_effect"] == "" and row["error_class"] == ""
    assert isinstance(row["created_at"], str) and row["created_at"].endswith("+00:00")
    event = runtime.events(result.run_id)[0].to_json()
    assert event["kind"] == "request" and event["sequence"] == 0
