"""Journal resume (SPEC §8): a retried run continues at its first unrecorded step."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus, ToolContext, ToolEffect
from tenure.audit import audit
from tenure.providers import ModelCall, ModelReply, Scripted, ToolCall

MakeRuntime = Callable[..., tenure.Runtime]


class Counting:
    """The Scripted model, counting how often it is really called."""

    def __init__(self) -> None:
        self.calls = 0
        self.inner = Scripted()

    def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        return self.inner.complete(call)


def test_completed_write_and_model_calls_are_not_repeated_after_a_later_failure(
    runtime: tenure.Runtime,
) -> None:
    ledger: list[tuple[str, int]] = []
    model = Counting()
    runtime.add_model("counting", model)

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def send_email(ctx: ToolContext, to: str) -> str:
        ledger.append((ctx.idempotency_key, ctx.fencing_token))
        return f"sent to {to}"

    script = [
        {"call": [{"tool": "send_email", "args": {"to": "a@example.com"}}]},
        {"fail": "server_error", "attempts": [0]},
        {"say": "done"},
    ]
    run_id = runtime.enqueue(
        RunRequest(prompt="mail", model="counting", tools=["send_email"], script=script)
    )
    first = runtime.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    assert model.calls == 2  # the call turn, then the failing one
    time.sleep(0.15)
    second = runtime.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert second.output == "done"
    assert len(ledger) == 1, "the completed write ran again"
    assert model.calls == 3, "the recorded model call was repeated"
    llm_events = [e for e in runtime.events(run_id) if e.kind is EventKind.LLM]
    assert [e.attempt for e in llm_events] == [0, 1]


def test_idempotency_key_is_stable_across_attempts_and_fencing_token_grows(
    runtime: tenure.Runtime,
) -> None:
    seen: list[tuple[str, int, int]] = []

    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def upsert(ctx: ToolContext) -> str:
        seen.append((ctx.idempotency_key, ctx.fencing_token, ctx.attempt))
        if ctx.attempt == 0:
            raise tenure.RetryableError("connection reset")
        return "ok"

    run_id = runtime.enqueue(
        RunRequest(
            prompt="u",
            model="scripted",
            tools=["upsert"],
            script=[{"call": [{"tool": "upsert"}, {"tool": "upsert"}]}, {"say": "done"}],
        )
    )
    assert runtime.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    time.sleep(0.15)
    assert runtime.run_queued(run_id).outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    llm_seq = next(e.sequence for e in runtime.events(run_id) if e.kind is EventKind.LLM)
    first_key = f"{run_id}:{llm_seq}"
    assert seen == [(first_key, 1, 0), (first_key, 2, 1), (f"{first_key}.1", 2, 1)]


def test_a_reaped_run_resumes_on_another_segment_without_repeating_steps(
    make_runtime: MakeRuntime,
) -> None:
    reads: list[int] = []

    def read(ctx: ToolContext) -> int:
        """Read a value."""
        reads.append(ctx.attempt)
        return 7

    rt = make_runtime(lease_seconds=0.3)
    # The model call outlives its deadline: the lease keeper stops renewing, the lease runs out.
    rt.add_model("scripted", tenure.providers.Scripted(), timeout=0.1)
    rt.tool(read)
    # The next worker's lease and model deadline outlast the same slow call.
    other = make_runtime(lease_seconds=5.0)
    other.add_model("scripted", tenure.providers.Scripted(), timeout=5.0)
    other.tool(read)

    script = [{"call": [{"tool": "read"}]}, {"sleep": 0.8}, {"say": "finished"}]
    run_id = rt.enqueue(RunRequest(prompt="r", model="scripted", tools=["read"], script=script))
    results: list[tenure.RunResult | None] = []
    stalled = threading.Thread(target=lambda: results.append(rt.run_queued(run_id)))
    stalled.start()  # reads, then sleeps in the model call past its lease
    time.sleep(0.5)
    assert rt.reap().requeued == 1
    second = other.run_queued(run_id)
    stalled.join()
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert results[0] is not None and results[0].outcome is Outcome.LEASE_LOST
    assert reads == [0], "the recorded read ran again"
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.attempt == 1
    assert [str(e.kind) for e in rt.events(run_id)] == [
        "request",
        "claimed",
        "llm",
        "tool",
        "requeued",
        "claimed",
        "llm",
        "assembled",
    ]


def test_pending_calls_of_a_recorded_turn_run_before_the_next_model_call(
    runtime: tenure.Runtime,
) -> None:
    order: list[str] = []

    @runtime.tool
    def a() -> str:
        order.append("a")
        return "a"

    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def b(ctx: ToolContext) -> str:
        order.append(f"b{ctx.attempt}")
        if ctx.attempt == 0:
            raise tenure.RetryableError("b failed")
        return "b"

    script = [{"call": [{"tool": "a"}, {"tool": "b"}]}, {"say": "ok"}]
    run_id = runtime.enqueue(
        RunRequest(prompt="p", model="scripted", tools=["a", "b"], script=script)
    )
    runtime.run_queued(run_id)
    time.sleep(0.15)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert order == ["a", "b0", "b1"]


class SameIdTwice:
    """A model whose first turn makes two calls under one call id (nothing forbids it)."""

    def complete(self, call: ModelCall) -> ModelReply:
        if any(m.get("role") == "tool" for m in call.messages):
            return ModelReply("done")
        return ModelReply(None, (ToolCall("dup", "a", {}), ToolCall("dup", "b", {})))


def test_a_call_sharing_its_id_with_an_earlier_one_runs_once_after_a_resume(
    runtime: tenure.Runtime,
) -> None:
    order: list[str] = []
    runtime.add_model("same-id", SameIdTwice())

    @runtime.tool
    def a() -> str:
        order.append("a")
        return "a"

    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def b(ctx: ToolContext) -> str:
        order.append(f"b{ctx.attempt}")
        if ctx.attempt == 0:
            raise tenure.RetryableError("b failed")
        return "b"

    run_id = runtime.enqueue(RunRequest(prompt="p", model="same-id", tools=["a", "b"]))
    first = runtime.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    time.sleep(0.15)
    second = runtime.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED
    assert order == ["a", "b0", "b1"], "the second call of the turn was skipped or repeated"
    tools = [e.payload for e in runtime.events(run_id) if e.kind is EventKind.TOOL]
    assert [(p["name"], p["call_id"], p["index"]) for p in tools] == [
        ("a", "dup", 0),
        ("b", "dup", 1),
    ]
    assert audit(runtime.store).ok


def test_the_arguments_of_a_scripted_call_are_each_calls_own() -> None:
    """Calls of the same script share its validated turns (a cache): what one caller does
    to the arguments of a reply stays in its own reply."""
    from tenure.providers import Scripted

    def reply() -> ModelReply:
        script: list[dict[str, object]] = [{"call": [{"tool": "grab", "args": {"items": [1]}}]}]
        request = RunRequest(prompt="p", model="scripted", tools=["grab"], script=script)
        messages = [{"role": "user", "content": "p"}]
        return Scripted().complete(ModelCall(messages, [], "run", 0, request))

    first = reply()
    first.tool_calls[0].args["items"].append(2)
    assert reply().tool_calls[0].args == {"items": [1]}
