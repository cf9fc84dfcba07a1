"""`async def` tools and async providers: they run on the process's one event loop thread,
a timeout cancels the coroutine, and a lost run aborts an async model call."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import (
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunStatus,
    ToolContext,
    ToolEffect,
    _loop,
)
from tenure._worker import Worker
from tenure.providers import Fallback, ModelCall, ModelReply, OpenAICompatible, ToolCall
from tests.fakes.openai_service import FakeOpenAI
from tests.loopkill import kill_loop

MakeRuntime = Callable[..., tenure.Runtime]


def calling(tool: str, args: dict[str, Any] | None = None) -> RunRequest:
    return RunRequest(
        prompt="p",
        model="scripted",
        tools=[tool],
        script=[{"call": [{"tool": tool, "args": args or {}}]}, {"say": "done"}],
    )


def tool_events(rt: tenure.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in rt.events(run_id) if e.kind is EventKind.TOOL]


def start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> float:
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < timeout, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - began


def test_an_async_read_tool_runs_on_the_loop_thread(runtime: tenure.Runtime) -> None:
    threads: list[threading.Thread] = []

    @runtime.tool
    async def weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        threads.append(threading.current_thread())
        await asyncio.sleep(0.01)
        return {"city": city, "sky": "clear"}

    result = runtime.run(calling("weather", {"city": "Oslo"}))
    assert result.outcome is Outcome.COMPLETED and result.output == "done"
    (event,) = tool_events(runtime, result.run_id)
    assert event["result"] == {"city": "Oslo", "sky": "clear"} and event["error"] is None
    assert threads == [_loop.loop_thread()]
    assert runtime.tool_names == ["weather"]


def test_an_async_write_tool_is_fenced_and_gets_its_context(runtime: tenure.Runtime) -> None:
    seen: dict[str, Any] = {}

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def pay(ctx: ToolContext, amount: int) -> str:
        # The fence is stamped before the write runs: the run row says so meanwhile.
        run = await asyncio.to_thread(runtime.status, ctx.run_id)
        seen.update(fence=run.pending_effect if run else None, ctx=ctx, cancelled=ctx.cancelled)
        ctx.raise_if_cancelled()
        return f"paid {amount}"

    result = runtime.run(calling("pay", {"amount": 5}))
    assert result.outcome is Outcome.COMPLETED
    assert seen["fence"] is ToolEffect.NON_IDEMPOTENT_WRITE and seen["cancelled"] is False
    ctx: ToolContext = seen["ctx"]
    assert ctx.run_id == result.run_id and ctx.effect is ToolEffect.NON_IDEMPOTENT_WRITE
    (event,) = tool_events(runtime, result.run_id)
    assert event["result"] == "paid 5" and event["idempotency_key"] == ctx.idempotency_key
    run = runtime.status(result.run_id)
    assert run is not None and run.pending_effect is None  # the fence was cleared


def test_an_async_tool_past_its_timeout_is_cancelled_and_the_model_sees_an_error(
    runtime: tenure.Runtime,
) -> None:
    cancelled = threading.Event()

    @runtime.tool(timeout=0.3)
    async def stuck() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    began = time.monotonic()
    result = runtime.run(calling("stuck"))
    assert time.monotonic() - began < 5
    assert cancelled.is_set()
    # The step fails as a tool's exception does: an error result, and the run goes on.
    assert result.outcome is Outcome.COMPLETED and result.output == "done"
    (event,) = tool_events(runtime, result.run_id)
    assert event["result"] is None
    assert "stuck" in event["error"] and "0.3 s" in event["error"], event["error"]


def test_a_worker_slot_waits_for_an_async_tool_timeout_without_abandoning_the_run(
    make_runtime: MakeRuntime,
) -> None:
    # A tool timeout longer than the lease: the keeper renews it while the slot waits. Both
    # are a few seconds so that a loaded machine still renews in time (a lease of 1 s was
    # lost once under three test processes on two cores).
    rt = make_runtime(lease_seconds=2.5)

    @rt.tool(timeout=3.5)
    async def stuck() -> None:
        await asyncio.sleep(30)

    run_id = rt.enqueue(calling("stuck"))
    worker = rt.worker(concurrency=1, burst=True, poll_interval=0.02)
    worker.run()
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.requeue_count == 0 and worker.stats.reaped == 0
    (event,) = tool_events(rt, run_id)
    assert "did not finish within 3.5 s" in event["error"]


def test_an_async_tool_raising_retryable_error_sends_the_run_to_recovery(
    runtime: tenure.Runtime,
) -> None:
    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    async def upsert() -> None:
        await asyncio.sleep(0)
        raise tenure.RetryableError("503 from the warehouse")

    run_id = runtime.enqueue(calling("upsert"))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.error_class is FailureClass.SERVER_ERROR and run.pending_effect is None
    assert "503 from the warehouse" in (run.error or "")


def test_eight_async_tools_wait_together_on_one_loop_thread(runtime: tenure.Runtime) -> None:
    spans: list[tuple[float, float]] = []
    threads: set[threading.Thread] = set()

    @runtime.tool
    async def nap() -> str:
        threads.add(threading.current_thread())
        began = time.monotonic()
        await asyncio.sleep(0.5)
        spans.append((began, time.monotonic()))
        return "rested"

    run_ids = runtime.enqueue_many([calling("nap") for _ in range(8)])
    runtime.work(concurrency=8, burst=True, poll_interval=0.02)
    assert all(runtime.status(r).status is RunStatus.COMPLETED for r in run_ids)  # type: ignore[union-attr]
    assert len(spans) == 8
    first_start = min(s for s, _ in spans)
    last_start = max(s for s, _ in spans)
    first_end = min(e for _, e in spans)
    last_end = max(e for _, e in spans)
    assert last_start < first_end  # all eight were waiting at once
    assert last_end - first_start < 1.0, spans  # about 0.5 s for the eight, not 4 s
    assert threads == {_loop.loop_thread()}


class AsyncModel:
    """An async provider: asks for one tool call, then answers with what it returned."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0
        self.cancelled = threading.Event()
        self.threads: set[threading.Thread] = set()

    async def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        self.threads.add(threading.current_thread())
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        usage = tenure.Usage(input_tokens=10, output_tokens=2, cost=0.001)
        results = [m for m in call.messages if m["role"] == "tool"]
        if not results:
            return ModelReply(None, (ToolCall("c1", "double", {"n": 21}),), usage, "async-1")
        return ModelReply(f"the answer is {results[-1]['content']}", (), usage, "async-1")


def test_an_async_provider_runs_a_real_run(runtime: tenure.Runtime) -> None:
    model = AsyncModel()
    runtime.add_model("async", model)

    @runtime.tool
    def double(n: int) -> int:
        return n * 2

    result = runtime.run(RunRequest(prompt="p", model="async", tools=["double"]))
    assert result.outcome is Outcome.COMPLETED and result.output == 'the answer is {"result": 42}'
    assert model.calls == 2 and model.threads == {_loop.loop_thread()}
    assert result.usage.input_tokens == 20 and abs(result.usage.cost - 0.002) < 1e-9
    kinds = [e.kind for e in runtime.events(result.run_id)]
    assert kinds.count(EventKind.LLM) == 2 and EventKind.TOOL in kinds


def test_an_async_provider_past_the_model_timeout_fails_the_step_as_a_timeout(
    runtime: tenure.Runtime,
) -> None:
    model = AsyncModel(delay=30)
    runtime.add_model("async", model, timeout=0.3)
    run_id = runtime.enqueue(RunRequest(prompt="p", model="async", tools=[]))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    assert model.cancelled.is_set()
    run = runtime.status(run_id)
    assert run is not None and run.error_class is FailureClass.TIMEOUT


def test_cancelling_a_run_aborts_its_async_model_call(make_runtime: MakeRuntime) -> None:
    lease = 1.5
    rt = make_runtime(lease_seconds=lease)
    model = AsyncModel(delay=30)
    rt.add_model("async", model)
    run_id = rt.enqueue(RunRequest(prompt="p", model="async", tools=[]))
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = start(worker)
    wait_for(lambda: model.calls == 1)
    assert rt.cancel(run_id)
    took = wait_for(lambda: worker.stats.outcomes.get(str(Outcome.CANCELLED)) == 1)
    assert took < lease, took  # within a keeper round, not after the 30 s call
    assert model.cancelled.is_set() and worker.inflight == 0
    worker.stop()
    thread.join(10)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED
    assert [e.kind for e in rt.events(run_id)].count(EventKind.LLM) == 0


def test_a_fallback_chain_refuses_an_async_provider() -> None:
    with pytest.raises(ValueError, match="is async"):
        Fallback([AsyncModel()])


# -- a loop thread that stops (a background task's SystemExit) ---------------------------------


def test_after_the_loop_thread_stops_an_async_tool_runs_on_a_new_one(
    runtime: tenure.Runtime,
) -> None:
    @runtime.tool
    async def weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        await asyncio.sleep(0)
        return {"city": city, "sky": "clear"}

    assert runtime.run(calling("weather", {"city": "Oslo"})).outcome is Outcome.COMPLETED
    dead = kill_loop()
    result = runtime.run(calling("weather", {"city": "Rome"}))
    assert result.outcome is Outcome.COMPLETED
    assert tool_events(runtime, result.run_id)[0]["result"] == {"city": "Rome", "sky": "clear"}
    assert _loop.loop_thread() is not dead


def test_after_the_loop_thread_stops_an_openai_call_is_made_on_a_new_one(
    runtime: tenure.Runtime,
) -> None:
    """The provider's async client was used on the loop that stopped: its pooled connection
    belongs to that loop and must not be used from the new one (it would wait for ever)."""
    with (
        FakeOpenAI() as fake,
        OpenAICompatible("fake", base_url=fake.url, timeout=60) as provider,
    ):
        runtime.add_model("fake", provider, timeout=10)
        assert runtime.run(RunRequest(prompt="p", model="fake")).outcome is Outcome.COMPLETED
        kill_loop()
        result = runtime.run(RunRequest(prompt="p", model="fake"))
        assert result.outcome is Outcome.COMPLETED, result.error
        assert (fake.stats().requests, fake.stats().answered) == (2, 2)  # no retry after a hang


def test_an_async_write_cut_off_by_the_loop_stopping_is_in_doubt(runtime: tenure.Runtime) -> None:
    """What the write did is unknown: the tool raises `TimedOut` (never a plain exception,
    which would read as a known failure) and does not wait for its 60 s timeout."""
    started = threading.Event()

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=60)
    async def pay(amount: int) -> str:
        started.set()
        await asyncio.sleep(60)
        return f"paid {amount}"

    tool = runtime._tools.get("pay")
    assert tool is not None
    context = ToolContext("run-1", 0, "key", 1, ToolEffect.NON_IDEMPOTENT_WRITE, threading.Event())
    killer = threading.Thread(target=lambda: started.wait(10) and kill_loop())
    killer.start()
    with pytest.raises(_loop.TimedOut, match="event loop thread stopped"):
        tool.invoke(context, {"amount": 5})
    killer.join(20)


def test_a_worker_whose_loop_cannot_be_started_again_stops_claiming_with_one_error_line(
    make_runtime: MakeRuntime,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = make_runtime(lease_seconds=3.0)

    @rt.tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        return "clear"

    run_ids = rt.enqueue_many([calling("weather", {"city": "Oslo"}) for _ in range(3)])
    kill_loop()

    def no_more_files() -> asyncio.AbstractEventLoop:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(asyncio, "new_event_loop", no_more_files)
    caplog.clear()  # the loop's own line about having stopped
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    with caplog.at_level(logging.ERROR, logger="tenure"):
        thread = start(worker)
        thread.join(30)  # it stops by itself
        assert not thread.is_alive(), "the worker kept claiming"
    monkeypatch.undo()
    assert worker.stats.claimed == 1  # the first run failed; nothing more was claimed
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "stops claiming" in errors[0]
    assert "Too many open files" in errors[0] and "\n" not in errors[0]
    first = rt.status(run_ids[0])
    assert first is not None and first.status is RunStatus.QUEUED  # back, retryable
    assert first.error_class is FailureClass.CONNECTION
    assert all(rt.status(r).status is RunStatus.QUEUED for r in run_ids[1:])  # type: ignore[union-attr]
    assert _loop.run(asyncio.sleep(0, "ok"), timeout=5) == "ok"  # a loop starts again
