"""Agent functions (SPEC §20): what ends a segment is not the function's to swallow."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import Outcome, RunRequest, ToolContext, ToolEffect
from tenure.audit import LedgerEntry, audit

from .._raw import raw_execute

MakeRuntime = Callable[..., tenure.Runtime]


def test_a_write_in_doubt_is_not_swallowed_by_the_function(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    """A write that does not answer within its timeout may have happened: its run goes in
    doubt (SPEC §16), whatever the function does with the exception. A function that
    catches every exception around the call must not carry on as if the write had failed:
    its probe decides, and the write stays executed once."""
    ledger = tmp_path / "ledger"

    rt = make_runtime()

    def paid(ctx: ToolContext) -> tenure.Probe:
        keys = ledger.read_text().split() if ledger.exists() else []
        return tenure.Probe.done("paid") if ctx.idempotency_key in keys else tenure.Probe.not_done()

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=0.3, probe=paid)
    async def slow_pay(ctx: ToolContext) -> str:
        with ledger.open("a") as f:
            f.write(ctx.idempotency_key + "\n")
        await asyncio.sleep(5)  # the payment went through; its answer never comes in time
        return "paid"

    @rt.agent
    def hopeful(ctx: tenure.AgentContext) -> str:
        try:
            return str(ctx.tool("slow_pay"))
        except Exception:
            return "gave up"

    run_id = rt.enqueue(RunRequest(agent="hopeful", input={}))
    for _ in range(5):
        rt.run_queued(run_id)
        run = rt.status(run_id)
        assert run is not None
        if run.status.is_terminal:
            break
        time.sleep(0.1)
    assert run.status is tenure.RunStatus.COMPLETED and run.output == '"paid"', run
    assert ledger.read_text().split() == [f"{run_id}:0"]
    found = audit(rt.store, [LedgerEntry(run_id, f"{run_id}:0")])
    assert found.violations == [], found.violations


def test_a_nondeterministic_step_stops_the_run_even_when_the_function_catches_it(
    make_runtime: MakeRuntime,
) -> None:
    """The code changed while the run was parked: at position 0 it now asks another step
    than the journal holds. The function catches every exception around that step; the run
    must still stop as nondeterministic, never complete with the journal's steps and the
    code's out of step."""
    rt = make_runtime(lease_seconds=1.0)
    changed = {"now": False}

    @rt.agent
    def drifting(ctx: tenure.AgentContext) -> str:
        try:
            if changed["now"]:
                ctx.uuid()
            else:
                ctx.now()
        except Exception:
            pass
        ctx.sleep(1.5)  # past the lease: the run is parked, the code changes meanwhile
        return "done"

    run_id = rt.enqueue(RunRequest(agent="drifting", input={}))
    parked = rt.run_queued(run_id)
    assert parked is not None and parked.outcome is Outcome.SLEEPING
    changed["now"] = True
    time.sleep(1.7)
    rt.run_queued(run_id)
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert "nondeterministic at step 0" in (run.error or ""), run.error


def test_a_replay_over_a_damaged_step_event_stops_the_run(
    make_runtime: Callable[..., tenure.Runtime], db_url: str
) -> None:
    """The journal is read as one array; one event that is not an object (written behind
    tenure's back) must not shift or drop the others: the replay stops at it, naming it."""
    rt = make_runtime()

    @rt.agent(name="flow")
    def flow(ctx: tenure.AgentContext) -> list[str]:
        ids = [ctx.uuid() for _ in range(3)]
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=tenure.FailureClass.SERVER_ERROR)
        return ids

    run_id = rt.enqueue(tenure.RunRequest(agent="flow", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is tenure.Outcome.REQUEUED
    [second_step] = [e for e in rt.events(run_id) if e.payload.get("position") == 1]
    sql = "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = ?"
    assert raw_execute(db_url, sql, '["not", "an object"]', run_id, second_step.sequence) == 1
    time.sleep(0.15)  # the backoff
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is tenure.Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.error_class is tenure.FailureClass.CONFIGURATION
    assert "journal holds a damaged step event: not a JSON object" in run.error


def _order_app(
    make_runtime: MakeRuntime, ran: list[str], changed: dict[str, Any]
) -> tenure.Runtime:
    """An agent function whose second attempt replays two `ctx.tool` steps (one returned, one
    raised) and then runs a write; `changed["how"]` makes the replay's code differ."""
    rt = make_runtime(backoff_base=0.001, backoff_cap=0.001)

    @rt.tool
    def lookup(order: str, lines: list[int] | None = None) -> dict[str, object]:
        """Read an order."""
        ran.append(f"lookup:{order}")
        if order == "missing":
            raise KeyError(order)
        return {"order": order, "lines": lines or [], "total": 12.5}

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def charge(order: str) -> str:
        """Charge an order."""
        ran.append(f"charge:{order}")
        return "charged"

    @rt.agent
    def orders(ctx: tenure.AgentContext) -> list[object]:
        how = changed.get("how")
        if how == "another step":
            ctx.uuid()
        found = ctx.tool("other" if how == "another tool" else "lookup", order="A", lines=[1, 2])
        if "between" in changed:  # between two replayed steps
            changed["between"]()
        try:
            ctx.tool("lookup", order="B" if how == "other arguments" else "missing")
            missing = "found"
        except tenure.ToolFailed as exc:
            missing = exc.error
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=tenure.FailureClass.SERVER_ERROR)
        return [found, missing, ctx.tool("charge", order="A")]

    @rt.tool
    def other(order: str, lines: list[int]) -> str:
        """Another read."""
        ran.append(f"other:{order}")
        return "other"

    return rt


def test_replayed_tool_steps_return_what_they_returned_and_raise_what_they_raised(
    make_runtime: MakeRuntime,
) -> None:
    """A replayed `ctx.tool` step gives back its recorded result (as JSON has it) or raises
    its recorded error again, without running; the first step past the journal runs."""
    ran: list[str] = []
    rt = _order_app(make_runtime, ran, {})
    run_id = rt.enqueue(RunRequest(agent="orders", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    assert ran == ["lookup:A", "lookup:missing"]
    second = None
    for _ in range(50):  # the backoff of a millisecond
        second = rt.run_queued(run_id)
        if second is not None:
            break
        time.sleep(0.01)
    assert second is not None and second.outcome is Outcome.COMPLETED, second
    assert ran == ["lookup:A", "lookup:missing", "charge:A"]
    found, missing, charged = json.loads(second.output or "")
    assert found == {"order": "A", "lines": [1, 2], "total": 12.5}
    assert missing == "KeyError: 'missing'" and charged == "charged"


@pytest.mark.parametrize(
    ("how", "error"),
    [
        (
            "other arguments",
            "nondeterministic at step 1: the journal has tool 'lookup' with other arguments, "
            "the code asked tool 'lookup'",
        ),
        (
            "another tool",
            "nondeterministic at step 0: the journal has tool 'lookup', "
            "the code asked tool 'other'",
        ),
        (
            "another step",
            "nondeterministic at step 0: the journal has tool 'lookup', the code asked uuid 'uuid'",
        ),
    ],
)
def test_a_replayed_tool_step_the_code_asks_otherwise_is_nondeterministic(
    make_runtime: MakeRuntime, how: str, error: str
) -> None:
    """At a recorded `ctx.tool` step, other arguments, another tool or another kind of step
    stop the run as nondeterministic, and nothing past the journal runs."""
    ran: list[str] = []
    changed: dict[str, Any] = {}
    rt = _order_app(make_runtime, ran, changed)
    run_id = rt.enqueue(RunRequest(agent="orders", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    changed["how"] = how
    second = None
    for _ in range(50):
        second = rt.run_queued(run_id)
        if second is not None:
            break
        time.sleep(0.01)
    assert second is not None and second.outcome is Outcome.FAILED, second
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is tenure.TerminationReason.NOT_RETRYABLE
    assert run.error_class is tenure.FailureClass.CONFIGURATION
    assert run.error == error
    assert ran == ["lookup:A", "lookup:missing"]


def test_a_run_cancelled_during_its_replay_runs_no_step_past_the_journal(
    make_runtime: MakeRuntime,
) -> None:
    """A replayed step does not look at the lease (nothing outside happens in it); the
    first step that runs does: a run cancelled while its code replays runs nothing more."""
    ran: list[str] = []
    changed: dict[str, Any] = {}
    rt = _order_app(make_runtime, ran, changed)
    run_id = rt.enqueue(RunRequest(agent="orders", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    changed["between"] = lambda: ran.append(f"cancelled:{rt.cancel(run_id)}")
    second = None
    for _ in range(50):
        second = rt.run_queued(run_id)
        if second is not None:
            break
        time.sleep(0.01)
    assert second is not None and second.outcome is Outcome.CANCELLED, second
    assert ran == ["lookup:A", "lookup:missing", "cancelled:True"]  # the charge never ran
    run = rt.status(run_id)
    assert run is not None and run.status is tenure.RunStatus.CANCELLED


def test_a_step_refused_once_is_refused_again_and_a_replayed_step_runs_once(
    make_runtime: MakeRuntime,
) -> None:
    """`ctx.step` builds a function's step once for a loop of calls: a refusal is raised
    at every call, not remembered as a step; a step called in a loop replays each result."""
    rt = make_runtime(backoff_base=0.001, backoff_cap=0.001)
    ran: list[int] = []

    def square(n: int) -> int:
        ran.append(n)
        return n * n

    @rt.agent
    def squares(ctx: tenure.AgentContext) -> list[object]:
        refusals = []
        for _ in range(2):
            try:
                ctx.step(square, 1, effect="sometimes")
            except tenure.InvalidRequest as exc:
                refusals.append(str(exc))
        values = [ctx.step(square, n) for n in range(3)]
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=tenure.FailureClass.SERVER_ERROR)
        return [refusals, values]

    run_id = rt.enqueue(RunRequest(agent="squares", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    second = None
    for _ in range(50):
        second = rt.run_queued(run_id)
        if second is not None:
            break
        time.sleep(0.01)
    assert second is not None and second.outcome is Outcome.COMPLETED, second
    refusals, values = json.loads(second.output or "")
    assert len(refusals) == 2 and refusals[0] == refusals[1]
    assert "unknown effect 'sometimes'" in refusals[0]
    assert values == [0, 1, 4] and ran == [0, 1, 2]


def _second_segment(rt: tenure.Runtime, run_id: str) -> tenure.RunResult:
    for _ in range(50):  # the backoff of a millisecond
        second = rt.run_queued(run_id)
        if second is not None:
            return second
        time.sleep(0.01)
    raise AssertionError("the run was not claimed again")


@pytest.mark.parametrize("cleared", ["every step", "the second step", "damaged"])
def test_steps_recorded_without_their_replay_form_replay_as_before(
    make_runtime: MakeRuntime, db_url: str, cleared: str
) -> None:
    """A journal written before the replay form (its steps have none) or partly so, or whose
    form was damaged behind tenure's back, replays from the payloads: the same results, the
    same recorded error, nothing run again."""
    ran: list[str] = []
    rt = _order_app(make_runtime, ran, {})
    run_id = rt.enqueue(RunRequest(agent="orders", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    read = rt.store.replay_journal(run_id)
    assert read is not None and read.steps[0::4] == [0, 1]  # both steps have their form
    sql = "UPDATE tenure_events SET replay = ? WHERE run_id = ? AND replay LIKE ?"
    form = '1,"tool:x:lookup"' if cleared == "damaged" else None  # two values of four
    pattern = "%" if cleared == "every step" else "1,%"
    assert raw_execute(db_url, sql, form, run_id, pattern) == (2 if cleared == "every step" else 1)
    second = _second_segment(rt, run_id)
    assert second.outcome is Outcome.COMPLETED, second
    assert ran == ["lookup:A", "lookup:missing", "charge:A"]
    found, missing, charged = json.loads(second.output or "")
    assert found == {"order": "A", "lines": [1, 2], "total": 12.5}
    assert missing == "KeyError: 'missing'" and charged == "charged"


def test_a_position_recorded_twice_replays_its_first_event(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    """Two events at one position (written behind tenure's back: each with its replay form)
    cannot be told apart by position: the journal is then read whole, and the first of them
    is the one replayed, as before the replay form."""
    ran: list[str] = []
    rt = _order_app(make_runtime, ran, {})
    run_id = rt.enqueue(RunRequest(agent="orders", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    [recorded] = [e for e in rt.events(run_id) if e.payload.get("position") == 0]
    payload = {**recorded.payload, "result": "the second"}
    form = f'0,"tool:{payload["digest"]}:lookup","the second",null'
    copy = (
        "INSERT INTO tenure_events (run_id, sequence, attempt, lease_token, kind, payload,"
        " replay, created_at) SELECT run_id, sequence + 1000, attempt, lease_token, kind, ?,"
        " ?, created_at FROM tenure_events WHERE run_id = ? AND sequence = ?"
    )
    assert raw_execute(db_url, copy, json.dumps(payload), form, run_id, recorded.sequence) == 1
    second = _second_segment(rt, run_id)
    assert second.outcome is Outcome.COMPLETED, second
    found, _, _ = json.loads(second.output or "")
    assert found == {"order": "A", "lines": [1, 2], "total": 12.5}
    assert ran == ["lookup:A", "lookup:missing", "charge:A"]


def _python_calls(fn: Callable[[], object], times: int) -> int:
    """How many Python functions `times` calls of `fn` call, `fn` included (this thread)."""
    counter = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        if event == "call":
            counter[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(times):
            fn()
    finally:
        sys.setprofile(None)
    return counter[0]


def test_a_replayed_tool_step_is_one_python_call(make_runtime: MakeRuntime) -> None:
    """What a replay costs, counted rather than timed (a count does not move with the
    machine's load): past a tool's first step in a segment, a replayed `ctx.tool` step is
    checked and returned inside `ctx.tool` itself, with no further Python call; with
    arguments, their digest is the one call besides."""
    rt = make_runtime(backoff_base=0.001, backoff_cap=0.001)
    calls: dict[int, tuple[int, int]] = {}

    @rt.tool
    def read(n: int = 0) -> int:
        """A read."""
        return n

    @rt.agent
    def reads(ctx: tenure.AgentContext) -> int:
        ctx.tool("read")  # a tool's first step in a segment looks the tool up
        plain = _python_calls(lambda: ctx.tool("read"), 40)
        with_arguments = _python_calls(lambda: ctx.tool("read", n=7), 40)
        calls[ctx.attempt] = (plain, with_arguments)
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=tenure.FailureClass.SERVER_ERROR)
        return 1

    run_id = rt.enqueue(RunRequest(agent="reads", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    second = _second_segment(rt, run_id)
    assert second.outcome is Outcome.COMPLETED, second
    # Each step is the lambda and `ctx.tool`; with arguments, and `digest`.
    assert calls[1] == (40 * 2, 40 * 3), calls
    assert min(calls[0]) > 40 * 10, calls  # the same steps executed, for scale
