"""An agent function's model answer rides with what the segment writes next (SPEC §20): with
the run's end when the function returns, as the built-in loop's last answer does, so that
an agent function's run makes as many write transactions as the loop's for the same steps;
and before anything else when the function goes on, fails, waits or is cancelled. On both
stores; write transactions are counted where they are made, as `bench/steps.py` counts
them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import EventKind, FailureClass, Outcome, RunRequest, RunStatus, TerminationReason
from tenure.audit import audit

MakeRuntime = Callable[..., tenure.Runtime]
USAGE = {"input_tokens": 7, "output_tokens": 3}
READS = 10  # the bench's steps: ten read tool calls, five per model turn, then an answer
SCRIPT: list[dict[str, Any]] = [
    *[{"call": [{"tool": "read"}] * 5}] * (READS // 5),
    {"say": "done"},
]


def count_writes(rt: tenure.Runtime) -> list[int]:
    """Counts the store's write transactions from now on (each one commit): `_write` runs a
    function in a transaction; PostgreSQL's one-statement paths commit in `_statement`."""
    store: Any = rt.store
    counted = [0]
    for name in ("_write", "_statement"):
        write = getattr(store, name, None)
        if write is not None:

            def counting(*args: Any, _write: Callable[..., Any] = write) -> Any:
                counted[0] += 1
                return _write(*args)

            setattr(store, name, counting)
    return counted


def looped_app(make_runtime: MakeRuntime) -> tenure.Runtime:
    rt = make_runtime()

    @rt.tool
    def read() -> int:
        """A read-only step."""
        return 1

    @rt.agent
    def looped(ctx: tenure.AgentContext) -> str:
        return ctx.agent_loop("x", tools=["read"], max_iterations=5)

    return rt


def test_an_agent_run_writes_as_often_as_the_loop_for_the_same_steps(
    make_runtime: MakeRuntime,
) -> None:
    rt = looped_app(make_runtime)
    loop = RunRequest(prompt="x", model="scripted", tools=["read"], script=SCRIPT)
    agent = RunRequest(agent="looped", input={}, model="scripted", script=SCRIPT)
    writes: dict[str, int] = {}
    for kind, request in (("loop", loop), ("agent", agent)):
        run_id = rt.enqueue(request)
        counted = count_writes(rt)
        before = counted[0]
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED, result
        writes[kind] = counted[0] - before
        kinds = [e.kind for e in rt.events(run_id)]
        assert kinds.count(EventKind.LLM) == 3 and kinds.count(EventKind.TOOL) == READS
        assert kinds[-2:] == [EventKind.LLM, EventKind.ASSEMBLED], kinds
    # The claim, two answers with calls, ten tool steps, and the end with the last answer.
    assert writes == {"loop": 14, "agent": 14}


def test_a_worker_draining_agent_runs_records_as_many_steps_as_for_the_loops(
    make_runtime: MakeRuntime,
) -> None:
    """As the bench drains them: one worker, concurrency 1. Its ends are committed with its
    claims in batches whose size depends on timing, so the transactions that record steps
    are counted here: ten tool steps and two answers with calls per run, either way (the
    last answer rides with the end)."""
    rt = looped_app(make_runtime)
    runs = 4
    loop = RunRequest(prompt="x", model="scripted", tools=["read"], script=SCRIPT)
    agent = RunRequest(agent="looped", input={}, model="scripted", script=SCRIPT)
    store: Any = rt.store
    record_step = store.record_step
    counted = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return record_step(*args, **kwargs)

    store.record_step = counting
    recorded: dict[str, int] = {}
    for kind, request in (("loop", loop), ("agent", agent)):
        ids = rt.enqueue_many([request] * runs)
        before = counted[0]
        rt.work(concurrency=1, burst=True, poll_interval=0.01)
        recorded[kind] = counted[0] - before
        for run_id in ids:
            assert rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
            kinds = [e.kind for e in rt.events(run_id)]
            assert kinds[-2:] == [EventKind.LLM, EventKind.ASSEMBLED], kinds
    assert recorded == {"loop": runs * (READS + 2), "agent": runs * (READS + 2)}


def ending_app(make_runtime: MakeRuntime, then: str, **settings: Any) -> tenure.Runtime:
    rt = make_runtime(**settings)

    @rt.agent
    def asker(ctx: tenure.AgentContext) -> str:
        text = ctx.model("answer?").text or ""
        if then == "raise":
            raise ValueError("the function's own bug")
        if then == "retry" and ctx.attempt == 0:
            raise tenure.RetryableError("flaky", failure_class=FailureClass.SERVER_ERROR)
        if then == "sleep":
            ctx.sleep(settings["lease_seconds"] + 0.1)
        if then == "approve" and not ctx.approve("go", {"answer": text}):
            return "denied"
        if then == "input":
            ctx.input("why?", {"type": "object", "properties": {"why": {"type": "string"}}})
        if then == "lacking":
            ctx.tool("absent")
        if then == "cancel":
            rt.cancel(ctx.run_id)
            ctx.raise_if_cancelled()
        return text

    return rt


def asked(then: str) -> RunRequest:
    return RunRequest(
        agent="asker", input={}, model="scripted", script=[{"say": "yes", "usage": USAGE}]
    )


def answer_recorded_before(rt: tenure.Runtime, run_id: str, ending: EventKind | None) -> None:
    """One model step, recorded at position 0, before the event that ended the segment (a
    hold for a person writes none: then the answer is the last event); the run's usage
    counts it."""
    events = rt.events(run_id)
    models = [e for e in events if e.kind is EventKind.LLM]
    assert [(e.payload["position"], e.payload["step"]) for e in models] == [(0, "model")]
    ends = [e.sequence for e in events if e.kind is ending]
    assert models[0].sequence < ends[0] if ending is not None else events[-1] == models[0]
    run = rt.status(run_id)
    assert run is not None and (run.input_tokens, run.output_tokens) == (7, 3)


@pytest.mark.parametrize("then", ["raise", "lacking"])
def test_a_failure_with_an_answer_held_records_it_first(
    make_runtime: MakeRuntime, then: str
) -> None:
    rt = ending_app(make_runtime, then)
    run_id = rt.enqueue(asked(then))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED, result
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    # A worker lacking a tool after the answer was made has started the run: it fails it
    # (configuration) rather than hand it back untouched without its answer.
    assert run.error_class is (
        FailureClass.CONFIGURATION if then == "lacking" else FailureClass.UNKNOWN
    ), run.error
    answer_recorded_before(rt, run_id, EventKind.DEAD_LETTERED)
    assert audit(rt.store).ok


@pytest.mark.parametrize("then", ["retry", "approve", "input", "sleep"])
def test_a_segment_that_ends_with_an_answer_held_records_it_and_replays_it(
    make_runtime: MakeRuntime, then: str
) -> None:
    # The retry is due at once; the sleep is the shortest past the lease.
    settings = {"lease_seconds": 1.0} if then == "sleep" else {}
    if then == "retry":
        settings = {"backoff_base": 0.001, "backoff_cap": 0.001}
    rt = ending_app(make_runtime, then, **settings)
    run_id = rt.enqueue(asked(then))
    outcome, ending, status = {
        "retry": (Outcome.REQUEUED, EventKind.REQUEUED, RunStatus.QUEUED),
        "approve": (Outcome.AWAITING_APPROVAL, None, RunStatus.WAITING_FOR_APPROVAL),
        "input": (Outcome.AWAITING_INPUT, None, RunStatus.WAITING_FOR_INPUT),
        "sleep": (Outcome.SLEEPING, EventKind.SLEEPING, RunStatus.QUEUED),
    }[then]
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is outcome, first
    assert rt.status(run_id).status is status  # type: ignore[union-attr]
    answer_recorded_before(rt, run_id, ending)
    if then == "approve":
        rt.approve(run_id, True, decided_by="ana")
    elif then == "input":
        rt.submit_input(run_id, {"why": "because"}, submitted_by="ana")
    else:  # the retry's backoff, the sleep
        _wait_until_due(rt, run_id)
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert json.loads(rt.status(run_id).output or "") == "yes"  # type: ignore[union-attr]
    answer_recorded_before(rt, run_id, EventKind.ASSEMBLED)  # replayed, never asked again
    assert audit(rt.store).ok


def _wait_until_due(rt: tenure.Runtime, run_id: str) -> None:
    import time

    run = rt.status(run_id)
    assert run is not None
    time.sleep(max(0.0, (run.available_at - rt.store.now()).total_seconds()) + 0.05)


def test_a_cancel_while_an_answer_is_held_records_nothing_more(
    make_runtime: MakeRuntime,
) -> None:
    """The run was cancelled under the answer: nothing can be written to it any more (the
    built-in loop's answer that comes back after a cancel is not recorded either). The run
    is over; nothing asks the model again."""
    rt = ending_app(make_runtime, "cancel")
    run_id = rt.enqueue(asked("cancel"))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.CANCELLED, result
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED
    assert [e for e in rt.events(run_id) if e.kind is EventKind.LLM] == []
    assert audit(rt.store).ok


def test_an_answer_recorded_with_the_end_replays_as_any_model_step(
    make_runtime: MakeRuntime,
) -> None:
    """A journal whose last answer rode with the run's end: a fork from its `assembled`
    event replays both answers (the fork's model is not asked again)."""
    rt = make_runtime()

    @rt.agent
    def twice(ctx: tenure.AgentContext) -> dict[str, str]:
        first = ctx.model("one?").text or ""
        last = ctx.model("two?").text or ""
        return {"first": first, "last": last}

    script = [{"say": "a", "usage": USAGE}, {"say": "b", "usage": USAGE}]
    run_id = rt.enqueue(RunRequest(agent="twice", input={}, model="scripted", script=script))
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    events = rt.events(run_id)
    assert [e.kind for e in events][-3:] == [EventKind.LLM, EventKind.LLM, EventKind.ASSEMBLED]
    (assembled,) = [e for e in events if e.kind is EventKind.ASSEMBLED]
    fork_id = rt.fork(run_id, assembled.sequence)
    replayed = rt.run_queued(fork_id)
    assert replayed is not None and replayed.outcome is Outcome.COMPLETED, replayed
    assert json.loads(rt.status(fork_id).output or "") == {"first": "a", "last": "b"}  # type: ignore[union-attr]
    models = [e for e in rt.events(fork_id) if e.kind is EventKind.LLM]
    assert [e.payload["position"] for e in models] == [0, 1]  # copied, none asked again
    assert audit(rt.store).ok
