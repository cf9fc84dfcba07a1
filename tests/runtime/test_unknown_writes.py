"""A write whose outcome is unknown is never an error result (STYLE: "An unknown outcome is
never an error result"), on both stores.

An async write cut off at its timeout, or cancelled by something other than its segment's
abort, may have happened. Its fence stays standing and the run goes the in-doubt way (SPEC
§16): the probe is asked, else the run is dead-lettered `not_retryable`. A model told "it
failed" would call the write again, and the customer would be charged twice."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import tenure
from tenure import (
    EventKind,
    Outcome,
    Probe,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
)
from tenure.audit import audit
from tenure.providers import ModelCall, ModelReply, ToolCall

from .test_probe import Ledger  # the outside system: every payment under its key

MakeRuntime = Callable[..., tenure.Runtime]
WRITE = ToolEffect.NON_IDEMPOTENT_WRITE


class RetryingModel:
    """As real models do: a write reported as failed is called again (a new call, so a new
    idempotency key), up to three times; a result ends the run."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        usage = tenure.Usage(input_tokens=1, output_tokens=1)
        results = [m for m in call.messages if m["role"] == "tool"]
        if (results and "error" not in str(results[-1]["content"])) or len(results) >= 3:
            return ModelReply("done", (), usage, "retrying")
        charge = ToolCall(f"c{len(results)}", "charge", {"amount": 5})
        return ModelReply(None, (charge,), usage, "retrying")


def charge_app(
    make_runtime: MakeRuntime,
    *,
    effect: ToolEffect = WRITE,
    with_probe: bool = True,
    hang_on: Callable[[ToolContext], bool] = lambda ctx: True,
    **runtime: Any,
) -> tuple[tenure.Runtime, Ledger, threading.Event]:
    """An async `charge` that takes the money, then does not answer within its 0.5 s."""
    rt = make_runtime(**runtime)
    rt.add_model("retrying", RetryingModel())
    ledger = Ledger()
    cancelled = threading.Event()

    def check(ctx: ToolContext, amount: int) -> Probe:
        return (
            Probe.done({"charged": amount})
            if ledger.paid(ctx.idempotency_key)
            else (Probe.not_done())
        )

    async def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        """Charge the customer."""
        ledger.pay(ctx.idempotency_key)
        if hang_on(ctx):
            try:
                await asyncio.sleep(30)  # the answer never comes back in time
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return {"charged": amount}

    probe = check if with_probe and effect is WRITE else None
    rt.tool(effect=effect, timeout=0.5, probe=probe)(charge)
    return rt, ledger, cancelled


def charging() -> RunRequest:
    return RunRequest(prompt="charge the customer 5", model="retrying", tools=["charge"])


def tool_events(rt: tenure.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in rt.events(run_id) if e.kind is EventKind.TOOL]


def test_an_async_write_past_its_timeout_goes_in_doubt_and_its_probe_settles_it(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, cancelled = charge_app(make_runtime)
    run_id = rt.enqueue(charging())
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    assert cancelled.is_set()
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.pending_effect is WRITE and run.fence_probe  # the fence stands, with its call
    assert tool_events(rt, run_id) == []  # never told the model "it failed"
    requeued = [e.payload for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
    assert requeued[-1]["cause"] == "in_doubt"

    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert len(ledger.rows) == 1  # charged once: the probe found it, nothing repeated it
    (tool,) = tool_events(rt, run_id)
    assert tool["resolved_by"] == "probe" and tool["result"] == {"charged": 5}
    assert tool["error"] is None and tool["idempotency_key"] == ledger.rows[0]
    report = audit(rt.store)
    assert report.ok, report.summary()


def test_an_async_write_past_its_timeout_without_a_probe_is_dead_lettered(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, _ = charge_app(make_runtime, with_probe=False)
    run_id = rt.enqueue(charging())
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is WRITE  # kept as evidence of a write that may have happened
    assert "may have happened" in (run.error or ""), run.error
    assert tool_events(rt, run_id) == [] and len(ledger.rows) == 1


def test_an_interactive_async_write_past_its_timeout_fails_without_repeating(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, _ = charge_app(make_runtime)
    result = rt.run(charging())
    assert result.outcome is Outcome.FAILED
    assert len(ledger.rows) == 1  # the model was not handed an error to retry on
    run = rt.status(result.run_id)
    assert run is not None and run.pending_effect is WRITE
    assert tool_events(rt, result.run_id) == []


def test_an_idempotent_async_write_past_its_timeout_is_retried_under_the_same_key(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, _ = charge_app(
        make_runtime, effect=ToolEffect.IDEMPOTENT_WRITE, hang_on=lambda ctx: ctx.attempt == 0
    )
    run_id = rt.enqueue(charging())
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    assert tool_events(rt, run_id) == []
    time.sleep(0.2)  # past the retry's backoff (at most 0.1 s here)
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    (tool,) = tool_events(rt, run_id)
    assert tool["error"] is None and tool["result"] == {"charged": 5}
    # Repeated, as an idempotent write may be: under one key, which the outside dedupes.
    assert len(ledger.rows) == 2 and len(set(ledger.rows)) == 1


def test_an_async_write_cancelled_by_something_else_goes_in_doubt(
    make_runtime: MakeRuntime,
) -> None:
    """A cancellation the segment did not ask for (the loop shutting the task down, a
    library cancelling its own scope) cuts the write off before it answered."""
    rt = make_runtime()
    rt.add_model("retrying", RetryingModel())
    ledger = Ledger()

    async def charge(ctx: ToolContext, amount: int) -> dict[str, int]:
        """Charge the customer."""
        ledger.pay(ctx.idempotency_key)
        raise asyncio.CancelledError

    rt.tool(effect=WRITE, timeout=5, probe=lambda ctx, amount: Probe.done({"charged": 5}))(charge)
    run_id = rt.enqueue(charging())
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.pending_effect is WRITE and run.fence_probe
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert len(ledger.rows) == 1


def test_a_read_tool_past_its_timeout_is_still_an_error_result(
    make_runtime: MakeRuntime,
) -> None:
    rt, ledger, _ = charge_app(make_runtime, effect=ToolEffect.READ_ONLY)
    result = rt.run(charging())
    # A read has nothing to repeat: the model is told and may call it again.
    assert result.outcome is Outcome.COMPLETED
    events = tool_events(rt, result.run_id)
    assert len(events) == 3 and all("did not finish within" in e["error"] for e in events)
    assert len(ledger.rows) == 3
