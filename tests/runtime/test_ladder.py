"""The execution ladder (SPEC §6) through the public API, on real databases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import tenure
from tenure import (
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
)
from tenure._ladder import Segment
from tenure.store import NewEvent

MakeRuntime = Callable[..., tenure.Runtime]


def kinds(rt: tenure.Runtime, run_id: str) -> list[str]:
    return [str(e.kind) for e in rt.events(run_id)]


def test_interactive_run_completes_under_a_lease(runtime: tenure.Runtime) -> None:
    seen: list[tenure.Run | None] = []

    @runtime.tool
    def lookup(ctx: ToolContext, customer_id: str) -> dict[str, str]:
        seen.append(runtime.status(ctx.run_id))
        return {"name": "Ada", "id": customer_id}

    result = runtime.run(
        RunRequest(
            prompt="who is c1?",
            model="scripted",
            tools=["lookup"],
            script=[{"call": [{"tool": "lookup", "args": {"customer_id": "c1"}}]}, {"say": "Ada"}],
        )
    )
    assert result.outcome is Outcome.COMPLETED and result.output == "Ada"
    assert [str(e.kind) for e in result.steps] == ["llm", "tool", "llm", "assembled"]
    during = seen[0]
    assert during is not None and during.status is RunStatus.RUNNING
    assert during.claimed_by.startswith("run:") and during.lease_token == 1
    assert during.lease_expires is not None
    run = runtime.status(result.run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.output == "Ada"
    assert run.input_tokens > 0 and run.output_tokens > 0
    assert result.usage.total_tokens == run.input_tokens + run.output_tokens
    tool_event = result.steps[1].payload
    assert tool_event["result"] == {"name": "Ada", "id": "c1"}
    assert tool_event["effect"] == "read_only" and tool_event["error"] is None
    assert tool_event["idempotency_key"] == f"{result.run_id}:{result.steps[0].sequence}"
    assert set(tool_event) >= {"name", "args", "effect", "result", "error", "duration_ms"}


def test_queued_run_is_claimed_and_completed_once(runtime: tenure.Runtime) -> None:
    run_id = runtime.enqueue(RunRequest(prompt="hi", model="scripted", script=[{"say": "yo"}]))
    assert runtime.status(run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED and result.output == "yo"
    assert runtime.run_queued(run_id) is None
    assert kinds(runtime, run_id) == ["request", "claimed", "llm", "assembled"]
    assert [e.sequence for e in runtime.events(run_id)] == [0, 1, 2, 3]


def test_cancellation_is_seen_at_the_next_step_boundary(runtime: tenure.Runtime) -> None:
    calls: list[str] = []

    @runtime.tool
    def step_one(ctx: ToolContext) -> str:
        calls.append("one")
        assert runtime.cancel(ctx.run_id)
        return "cancelled myself"

    @runtime.tool
    def step_two() -> str:
        calls.append("two")
        return "never"

    run_id = runtime.enqueue(
        RunRequest(
            prompt="go",
            model="scripted",
            tools=["step_one", "step_two"],
            script=[
                {"call": [{"tool": "step_one"}]},
                {"call": [{"tool": "step_two"}]},
                {"say": "done"},
            ],
        )
    )
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.CANCELLED
    assert calls == ["one"]
    assert kinds(runtime, run_id)[-1] == "cancelled"  # the step after it was not recorded
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.CANCELLED


def test_lease_lost_stops_without_writing_or_settling(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=0.3)
    taken: list[Any] = []

    @rt.tool(timeout=0.1)  # past its timeout the lease keeper stops renewing the lease
    def slow(ctx: ToolContext) -> str:
        time.sleep(0.5)  # the lease runs out; another worker takes the run over
        assert rt.reap().requeued == 1
        taken.append(rt.store.claim_run(ctx.run_id, "worker:other:1:1", 30))
        return "late"

    run_id = rt.enqueue(
        RunRequest(
            prompt="go",
            model="scripted",
            tools=["slow"],
            script=[{"call": [{"tool": "slow"}]}, {"say": "done"}],
        )
    )
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.LEASE_LOST
    assert taken[0] is not None
    events = rt.events(run_id)
    assert [str(e.kind) for e in events][-2:] == ["requeued", "claimed"]
    assert not any(e.kind is EventKind.TOOL for e in events)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    assert run.claimed_by == "worker:other:1:1" and run.lease_token == 2


def test_write_tool_is_fenced_with_a_lease_covering_its_timeout(runtime: tenure.Runtime) -> None:
    during: list[tenure.Run | None] = []

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=600)
    def charge(ctx: ToolContext, amount: int) -> dict[str, Any]:
        during.append(runtime.status(ctx.run_id))
        assert ctx.effect is ToolEffect.NON_IDEMPOTENT_WRITE and ctx.fencing_token == 1
        return {"charged": amount}

    run_id = runtime.enqueue(
        RunRequest(
            prompt="charge",
            model="scripted",
            tools=["charge"],
            script=[{"call": [{"tool": "charge", "args": {"amount": 5}}]}, {"say": "ok"}],
        )
    )
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    run = during[0]
    assert run is not None and run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert run.lease_expires is not None
    assert run.lease_expires - runtime.store.now() > timedelta(seconds=600)
    after = runtime.status(run_id)
    assert after is not None and after.pending_effect is None
    tool = next(e for e in runtime.events(run_id) if e.kind is EventKind.TOOL)
    assert tool.payload["effect"] == "non_idempotent_write"
    assert tool.payload["result"] == {"charged": 5}


def test_read_only_tool_is_never_fenced(runtime: tenure.Runtime) -> None:
    during: list[tenure.Run | None] = []

    @runtime.tool
    def peek(ctx: ToolContext) -> int:
        during.append(runtime.status(ctx.run_id))
        return 1

    result = runtime.run(
        RunRequest(
            prompt="p",
            model="scripted",
            tools=["peek"],
            script=[{"call": [{"tool": "peek"}]}, {"say": "ok"}],
        )
    )
    assert result.outcome is Outcome.COMPLETED
    assert during[0] is not None and during[0].pending_effect is None


def test_write_in_a_segment_without_its_lease_is_refused_before_it_runs(
    runtime: tenure.Runtime,
) -> None:
    ran: list[str] = []

    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def write() -> str:
        ran.append("x")
        return "written"

    request = RunRequest(
        prompt="w",
        model="scripted",
        tools=["write"],
        script=[{"call": [{"tool": "write"}]}, {"say": "ok"}],
    )
    run_id = runtime.enqueue(request)
    store = runtime.store
    old = store.claim_run(run_id, "worker:old:1:1", 0.2)
    assert old is not None
    # The old segment recorded the model's call to `write`, then stalled past its lease.
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "write", "arguments": "{}"}}
        ],
    }
    assert store.record_step(old.lease, 0.2, [NewEvent(EventKind.LLM, {"message": message})])
    time.sleep(0.35)
    assert runtime.reap().requeued == 1
    assert store.claim_run(run_id, "worker:new:1:1", 30) is not None
    # The stalled segment resumes: its pending write must not run.
    result = Segment(runtime.engine, old.lease, old.request, 0, collect_steps=False).execute()
    assert result.outcome is Outcome.LEASE_LOST
    assert ran == []
    assert runtime.status(run_id).pending_effect is None  # type: ignore[union-attr]


def test_unrecorded_write_fails_the_run_not_retryable(tmp_path: Any) -> None:
    # SQLite only: holding its writer lock is how this test makes the write's event unstorable.
    db_url = f"sqlite:///{tmp_path / 'locked.db'}"
    url = f"{db_url}?busy_timeout=0.05&locked_retries=1"
    rt = tenure.Runtime(url, backoff_base=0.05, backoff_cap=0.1)
    locker = tenure.Runtime(db_url).store
    release = threading.Event()

    def hold_lock() -> None:
        conn = locker._conn  # type: ignore[attr-defined]
        conn.execute("BEGIN IMMEDIATE")
        release.wait(10)
        conn.execute("ROLLBACK")

    holder = threading.Thread(target=hold_lock)

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def send() -> str:
        holder.start()
        time.sleep(0.1)  # the lock is taken before the write's event is stored
        return "sent"

    run_id = rt.enqueue(
        RunRequest(
            prompt="s",
            model="scripted",
            tools=["send"],
            script=[{"call": [{"tool": "send"}]}, {"say": "ok"}],
        )
    )
    try:
        result = rt.run_queued(run_id)
    finally:
        release.set()
        holder.join()
    assert result is not None and result.outcome is Outcome.FAILED
    # The database was locked for the dead-letter too: the run still shows the fence, so
    # the reaper will dead-letter it; either way the write is never reported as success.
    run = rt.status(run_id)
    assert run is not None
    assert run.status is not RunStatus.COMPLETED
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert not any(e.kind is EventKind.TOOL for e in rt.events(run_id))
    rt.close()
    locker.close()


def test_max_iterations_counts_across_attempts(runtime: tenure.Runtime) -> None:
    @runtime.tool
    def noop() -> None:
        return None

    script = [
        {"call": [{"tool": "noop"}]},
        {"fail": "server_error", "attempts": [0]},
        {"call": [{"tool": "noop"}]},
        {"call": [{"tool": "noop"}]},
        {"say": "never reached"},
    ]
    run_id = runtime.enqueue(
        RunRequest(prompt="loop", model="scripted", tools=["noop"], script=script, max_iterations=2)
    )
    first = runtime.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    time.sleep(0.15)
    second = runtime.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.FAILED
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.MAX_ITERATIONS
    assert sum(e.kind is EventKind.LLM for e in runtime.events(run_id)) == 2


def test_token_budget_counts_across_attempts(runtime: tenure.Runtime) -> None:
    @runtime.tool
    def noop() -> None:
        return None

    usage = {"input_tokens": 50, "output_tokens": 10}
    script = [
        {"call": [{"tool": "noop"}], "usage": usage},
        {"fail": "timeout", "attempts": [0]},
        {"call": [{"tool": "noop"}], "usage": usage},
        {"say": "never", "usage": usage},
    ]
    run_id = runtime.enqueue(
        RunRequest(prompt="b", model="scripted", tools=["noop"], script=script, max_tokens=100)
    )
    assert runtime.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    time.sleep(0.15)
    assert runtime.run_queued(run_id).outcome is Outcome.FAILED  # type: ignore[union-attr]
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.BUDGET_EXHAUSTED
    assert run.input_tokens == 100 and run.output_tokens == 20


def test_cost_budget(runtime: tenure.Runtime) -> None:
    script = [{"call": [{"tool": "nothing"}], "usage": {"cost": 0.6}}, {"say": "x"}]

    @runtime.tool
    def nothing() -> None:
        return None

    result = runtime.run(
        RunRequest(prompt="c", model="scripted", tools=["nothing"], script=script, max_cost=0.5)
    )
    assert result.outcome is Outcome.FAILED
    run = runtime.status(result.run_id)
    assert run is not None and run.termination_reason is TerminationReason.BUDGET_EXHAUSTED


def test_tool_errors_go_back_to_the_model(runtime: tenure.Runtime) -> None:
    @runtime.tool
    def broken(n: int) -> int:
        raise RuntimeError(f"boom {n}")

    result = runtime.run(
        RunRequest(
            prompt="b",
            model="scripted",
            tools=["broken"],
            script=[
                {"call": [{"tool": "broken", "args": {"n": 1}}]},
                {"call": [{"tool": "broken", "args": {"n": "not a number"}}]},
                {"call": [{"tool": "missing_tool"}]},
                {"say": "recovered"},
            ],
        )
    )
    assert result.outcome is Outcome.COMPLETED and result.output == "recovered"
    tools = [e.payload for e in result.steps if e.kind is EventKind.TOOL]
    assert tools[0]["error"] == "RuntimeError: boom 1"
    assert "invalid arguments for broken" in tools[1]["error"]
    assert "not available" in tools[2]["error"]
    assert tools[2]["effect"] == "non_idempotent_write"  # fail-closed for an unknown name


def test_retryable_tool_error_fails_the_step(runtime: tenure.Runtime) -> None:
    @runtime.tool
    def flaky() -> None:
        raise tenure.RetryableError("upstream 503")

    run_id = runtime.enqueue(
        RunRequest(
            prompt="f",
            model="scripted",
            tools=["flaky"],
            script=[{"call": [{"tool": "flaky"}]}, {"say": "x"}],
        )
    )
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = runtime.status(run_id)
    assert run is not None and run.error_class is FailureClass.SERVER_ERROR
    assert "upstream 503" in run.error
