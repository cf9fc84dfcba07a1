"""Agent functions (SPEC §20) on both stores: steps recorded once and replayed, replay that
cannot lie, the fence and probe of a write step, people and timers that hold no slot, and
bad input refused with one line."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

import tenure
from tenure import (
    EventKind,
    FailureClass,
    Outcome,
    Probe,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolEffect,
)
from tenure.audit import audit

MakeRuntime = Callable[..., tenure.Runtime]
WRITE = ToolEffect.NON_IDEMPOTENT_WRITE


class Calls:
    """What ran outside tenure, by name: a step that ran twice shows here."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def add(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1


def agent_request(
    agent: str, script: list[dict[str, Any]] | None = None, **input: Any
) -> RunRequest:
    return RunRequest(agent=agent, input=input, model="scripted", script=script or [{"say": "ok"}])


def steps(rt: tenure.Runtime, run_id: str) -> list[tuple[int, str, str]]:
    """The run's steps as the journal has them: (position, kind, name)."""
    found = []
    for e in rt.events(run_id):
        if "position" in e.payload and not e.payload.get("parked"):
            found.append((e.payload["position"], e.payload["step"], e.payload["name"]))
    return found


def assert_audited(rt: tenure.Runtime) -> None:
    report = audit(rt.store)
    assert report.ok, report.summary()


def triage_app(make_runtime: MakeRuntime, calls: Calls, **kwargs: Any) -> tenure.Runtime:
    rt = make_runtime(**kwargs)

    @rt.tool(effect=WRITE)
    def refund(ctx: tenure.ToolContext, ticket_id: str) -> dict[str, str]:
        calls.add(f"refund:{ctx.idempotency_key}")
        return {"refunded": ticket_id}

    @rt.agent
    def triage(ctx: tenure.AgentContext, ticket_id: str, text: str, fail: bool = False) -> Any:
        """Route a support ticket.

        Args:
            ticket_id: the ticket's id
            text: what the customer wrote
        """
        label = ctx.model(f"Label this ticket: {text}").text or ""
        calls.add("after-model")
        if "refund" in label:
            ctx.tool("refund", ticket_id=ticket_id)
        stamp = ctx.now()
        if fail and ctx.attempt == 0:
            raise tenure.RetryableError("flaky", failure_class=FailureClass.SERVER_ERROR)
        doubled = ctx.step(double, 21)
        return {"label": label, "doubled": doubled, "at": stamp.isoformat()}

    def double(n: int) -> int:
        calls.add("double")
        return n * 2

    return rt


def test_an_agent_function_runs_its_steps_and_returns_json(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = triage_app(make_runtime, calls)
    run_id = rt.enqueue(
        agent_request("triage", [{"say": "refund"}], ticket_id="T-1", text="money back")
    )
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    output = json.loads(result.output or "")
    assert output["label"] == "refund" and output["doubled"] == 42
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert json.loads(run.output or "") == output
    assert steps(rt, run_id) == [
        (0, "model", "scripted"),
        (1, "tool", "refund"),
        (2, "now", "now"),
        (3, "step", "double"),
    ]
    (tool,) = [e.payload for e in rt.events(run_id) if e.kind is EventKind.TOOL]
    assert tool["idempotency_key"] == f"{run_id}:1" and tool["effect"] == str(WRITE)
    assert calls.counts == {f"refund:{run_id}:1": 1, "after-model": 1, "double": 1}
    assert run.pending_effect is None
    assert_audited(rt)


def test_a_retried_run_replays_its_steps_without_running_them_again(
    make_runtime: MakeRuntime,
) -> None:
    calls = Calls()
    rt = triage_app(make_runtime, calls)
    run_id = rt.enqueue(
        agent_request("triage", [{"say": "refund"}], ticket_id="T-2", text="x", fail=True)
    )
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    time.sleep(0.15)  # the backoff
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED, second
    # The code between steps ran twice; every step ran once.
    assert calls.counts == {f"refund:{run_id}:1": 1, "after-model": 2, "double": 1}
    output = json.loads(second.output or "")
    stamps = [e.payload["result"] for e in rt.events(run_id) if e.kind is EventKind.STEP]
    assert output["at"] == datetime.fromisoformat(stamps[0]).isoformat()  # ctx.now, replayed
    assert [e.kind for e in rt.events(run_id)].count(EventKind.LLM) == 1
    assert_audited(rt)


def test_changed_code_at_a_recorded_step_dead_letters_nondeterministic(
    make_runtime: MakeRuntime,
) -> None:
    old = make_runtime()

    @old.agent(name="flow")
    def flow_v1(ctx: tenure.AgentContext) -> str:
        ctx.uuid()
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return "v1"

    run_id = old.enqueue(RunRequest(agent="flow", input={}))
    first = old.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    new = make_runtime()

    @new.agent(name="flow")
    def flow_v2(ctx: tenure.AgentContext) -> str:
        ctx.random()  # the code now asks another step where the journal has ctx.uuid
        return "v2"

    time.sleep(0.15)
    second = new.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.FAILED
    run = new.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.CONFIGURATION
    assert run.error.startswith("nondeterministic at step 0: the journal has uuid 'uuid'")
    assert "the code asked random 'random'" in run.error
    assert_audited(new)


def test_other_arguments_at_a_recorded_step_are_nondeterministic(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    seen: list[int] = []

    @rt.agent
    def shifting(ctx: tenure.AgentContext) -> int:
        n = len(seen)  # state outside the journal: what the determinism rule forbids
        seen.append(n)
        value = ctx.step(lambda x: x, n, name="echo")
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return int(value)

    run_id = rt.enqueue(RunRequest(agent="shifting", input={}))
    rt.run_queued(run_id)
    time.sleep(0.15)
    rt.run_queued(run_id)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error == (
        "nondeterministic at step 0: the journal has step 'echo' with other arguments, "
        "the code asked step 'echo'"
    )


def test_patched_is_false_for_an_old_journal_and_true_for_a_new_run(
    make_runtime: MakeRuntime,
) -> None:
    old = make_runtime()

    @old.agent(name="flow")
    def flow_v1(ctx: tenure.AgentContext) -> str:
        ctx.uuid()
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return "old"

    in_flight = old.enqueue(RunRequest(agent="flow", input={}))
    old.run_queued(in_flight)
    new = make_runtime()

    @new.agent(name="flow")
    def flow_v2(ctx: tenure.AgentContext) -> str:
        if ctx.patched("random-first"):
            ctx.random()
            ctx.uuid()
            return "new"
        ctx.uuid()
        return "old path"

    time.sleep(0.15)
    resumed = new.run_queued(in_flight)
    assert resumed is not None and resumed.outcome is Outcome.COMPLETED, resumed
    assert json.loads(resumed.output or "") == "old path"
    fresh = new.run(RunRequest(agent="flow", input={}))
    assert fresh.outcome is Outcome.COMPLETED and json.loads(fresh.output or "") == "new"
    assert steps(new, fresh.run_id) == [
        (0, "patched", "random-first"),
        (1, "random", "random"),
        (2, "uuid", "uuid"),
    ]


def test_an_approval_holds_no_slot_and_is_consumed_once(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = make_runtime()

    @rt.agent
    def refunder(ctx: tenure.AgentContext, order: str) -> dict[str, Any]:
        if not ctx.approve("refund", {"order": order}):
            return {"status": "denied"}
        ctx.step(lambda: calls.add(order), name="pay", effect=WRITE)
        return {"status": "refunded"}

    approved = rt.enqueue(RunRequest(agent="refunder", input={"order": "A"}))
    denied = rt.enqueue(RunRequest(agent="refunder", input={"order": "B"}))
    for run_id in (approved, denied):
        held = rt.run_queued(run_id)
        assert held is not None and held.outcome is Outcome.AWAITING_APPROVAL
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.WAITING_FOR_APPROVAL
        assert run.lease_expires is None and run.claimed_by == ""
    (call,) = rt.pending_calls(approved)
    assert call["tool"] == "refund" and call["args"] == {"order": "A"}
    rt.approve(approved, True, decided_by="ana")
    rt.approve(denied, False, decided_by="bo", note="no receipt")
    with pytest.raises(tenure.DecisionConflict):
        rt.approve(approved, True, decided_by="ana")
    for run_id in (approved, denied):
        done = rt.run_queued(run_id)
        assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert json.loads(rt.status(approved).output or "") == {"status": "refunded"}  # type: ignore[union-attr]
    assert json.loads(rt.status(denied).output or "") == {"status": "denied"}  # type: ignore[union-attr]
    assert calls.counts == {"A": 1}
    assert steps(rt, approved) == [(0, "approve", "refund"), (1, "step", "pay")]
    assert_audited(rt)


def test_a_tool_that_needs_approval_waits_for_it_and_a_denial_is_its_error(
    make_runtime: MakeRuntime,
) -> None:
    calls = Calls()
    rt = make_runtime()

    @rt.tool(effect=WRITE, requires_approval=True)
    def wire(amount: int) -> str:
        calls.add(f"wire:{amount}")
        return "sent"

    @rt.agent
    def payer(ctx: tenure.AgentContext, amount: int) -> str:
        try:
            return str(ctx.tool("wire", amount=amount))
        except tenure.ToolFailed as exc:
            return f"not sent: {exc.error}"

    run_id = rt.enqueue(RunRequest(agent="payer", input={"amount": 5}))
    held = rt.run_queued(run_id)
    assert held is not None and held.outcome is Outcome.AWAITING_APPROVAL
    rt.approve(run_id, False, decided_by="ana", note="too much")
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED
    assert json.loads(done.output or "") == "not sent: denied by ana: too much"
    assert not calls.counts


def test_input_from_a_person_is_checked_and_recorded(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    schema = {
        "type": "object",
        "properties": {"iban": {"type": "string", "minLength": 4}},
        "required": ["iban"],
    }

    @rt.agent
    def onboarding(ctx: tenure.AgentContext) -> str:
        values = ctx.input("bank details", schema)
        if ctx.attempt == 1:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return str(values["iban"])

    run_id = rt.enqueue(RunRequest(agent="onboarding", input={}))
    held = rt.run_queued(run_id)
    assert held is not None and held.outcome is Outcome.AWAITING_INPUT
    with pytest.raises(tenure.InvalidRequest, match="iban"):
        rt.submit_input(run_id, {"iban": "x"}, submitted_by="ana")
    rt.submit_input(run_id, {"iban": "DE89"}, submitted_by="ana")
    # The segment that continues with the decision fails after recording the values: the
    # next one replays them from the journal (the decision itself is consumed once).
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    time.sleep(0.15)
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert json.loads(done.output or "") == "DE89"


def test_a_long_sleep_parks_the_run_uncharged_and_a_short_one_sleeps_here(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(lease_seconds=1.0)

    @rt.agent
    def napper(ctx: tenure.AgentContext) -> str:
        ctx.sleep(0.05)
        ctx.sleep(1.5)
        return "rested"

    run_id = rt.enqueue(RunRequest(agent="napper", input={}))
    parked = rt.run_queued(run_id)
    assert parked is not None and parked.outcome is Outcome.SLEEPING
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    assert run.available_at > rt.store.now()
    assert rt.run_queued(run_id) is None  # not due yet
    time.sleep(1.6)
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    sleeping = [e.payload for e in rt.events(run_id) if e.kind is EventKind.SLEEPING]
    assert [(s["position"], s["parked"]) for s in sleeping] == [(0, False), (1, True)]
    run = rt.status(run_id)
    assert run is not None and run.requeue_count == 0
    assert_audited(rt)


def test_a_write_step_in_doubt_is_settled_by_its_probe_not_repeated(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    ledger: list[str] = []

    def charge(ctx: tenure.ToolContext, amount: int) -> str:
        ledger.append(ctx.idempotency_key)
        if ctx.attempt == 0:  # charged, then the gateway's answer was lost
            raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)
        return "charged"

    def charged(ctx: tenure.ToolContext, amount: int) -> Probe:
        return Probe.done("charged (probe)") if ctx.idempotency_key in ledger else Probe.not_done()

    @rt.agent
    def checkout(ctx: tenure.AgentContext) -> str:
        ctx.uuid()
        return str(ctx.step(charge, 7, effect=WRITE, probe=charged))

    run_id = rt.enqueue(RunRequest(agent="checkout", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.pending_effect is WRITE and run.fence_probe
    second = rt.run_queued(run_id)
    assert second is not None and second.outcome is Outcome.COMPLETED, second
    assert json.loads(second.output or "") == "charged (probe)"
    assert ledger == [f"{run_id}:1"]  # once, under RUN_ID:POSITION
    (probe,) = [e.payload for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    assert probe["verdict"] == "done"
    assert_audited(rt)


def test_a_write_step_without_a_probe_in_doubt_dead_letters(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    ledger: list[str] = []

    def charge(ctx: tenure.ToolContext) -> str:
        ledger.append(ctx.idempotency_key)
        raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)

    @rt.agent
    def checkout(ctx: tenure.AgentContext) -> str:
        return str(ctx.step(charge, effect=WRITE))

    run_id = rt.enqueue(RunRequest(agent="checkout", input={}))
    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert len(ledger) == 1


def test_a_failed_tool_raises_tool_failed_once_and_is_replayed(
    make_runtime: MakeRuntime,
) -> None:
    calls = Calls()
    rt = make_runtime()

    @rt.tool
    def lookup(order: str) -> str:
        calls.add("lookup")
        raise KeyError(order)

    @rt.agent
    def finder(ctx: tenure.AgentContext) -> str:
        try:
            ctx.tool("lookup", order="Z")
        except tenure.ToolFailed as exc:
            error = exc.error
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return error

    run_id = rt.enqueue(RunRequest(agent="finder", input={}))
    rt.run_queued(run_id)
    time.sleep(0.15)
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED
    assert "KeyError" in json.loads(done.output or "") and calls.counts == {"lookup": 1}


def test_the_built_in_loop_as_steps(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = make_runtime()

    @rt.tool
    def search_docs(query: str) -> str:
        calls.add(query)
        return f"docs on {query}"

    @rt.agent
    def answerer(ctx: tenure.AgentContext, question: str) -> str:
        return ctx.agent_loop(question, tools=["search_docs"])

    script = [
        {"call": [{"tool": "search_docs", "args": {"query": "refunds"}}]},
        {"say": "see docs"},
    ]
    result = rt.run(agent_request("answerer", script, question="how?"))
    assert result.outcome is Outcome.COMPLETED and json.loads(result.output or "") == "see docs"
    assert steps(rt, result.run_id) == [
        (0, "model", "scripted"),
        (1, "tool", "search_docs"),
        (2, "model", "scripted"),
    ]
    assert calls.counts == {"refunds": 1}
    assert_audited(rt)


def test_an_escaping_exception_dead_letters_unknown_naming_the_agent(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()

    @rt.agent
    def broken(ctx: tenure.AgentContext) -> str:
        raise ValueError("bad ticket")

    run_id = rt.enqueue(RunRequest(agent="broken", input={}))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.UNKNOWN
    assert "agent broken raised ValueError" in run.error and "bad ticket" in run.error


def test_a_return_value_that_is_not_json_fails_configuration(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    @rt.agent
    def odd(ctx: tenure.AgentContext) -> object:
        return {1, 2}

    run_id = rt.enqueue(RunRequest(agent="odd", input={}))
    rt.run_queued(run_id)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.CONFIGURATION
    assert run.error.startswith("agent odd returned a set, which is not JSON")


def test_a_lambda_step_without_a_name_is_refused(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    @rt.agent
    def anonymous(ctx: tenure.AgentContext) -> int:
        return int(ctx.step(lambda: 1))

    run_id = rt.enqueue(RunRequest(agent="anonymous", input={}))
    rt.run_queued(run_id)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error_class is FailureClass.CONFIGURATION
    assert "a lambda needs name=" in run.error


def test_bad_input_is_refused_at_enqueue_and_stores_nothing(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    @rt.agent
    def typed(ctx: tenure.AgentContext, count: int, label: str = "x") -> int:
        return count

    cases: list[tuple[RunRequest, str]] = [
        (RunRequest(agent="nope", input={}), "unknown agent 'nope' (agents: typed)"),
        (RunRequest(agent="typed", input={}), "agent typed: invalid input: count: Field required"),
        (
            RunRequest(agent="typed", input={"count": 1, "extra": 2}),
            "agent typed: invalid input: extra: Extra inputs are not permitted",
        ),
        (
            RunRequest(agent="typed", input={"count": "many"}),
            "agent typed: invalid input: count: Input should be a valid integer",
        ),
        (RunRequest(prompt="p", input={"a": 1}), "input is the argument of an agent function"),
    ]
    for request, message in cases:
        with pytest.raises(tenure.InvalidRequest) as caught:
            rt.enqueue(request)
        assert str(caught.value).startswith(message), caught.value
        assert "\n" not in str(caught.value)
    assert rt.runs() == []


def test_registration_refuses_what_cannot_be_an_agent(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    with pytest.raises(tenure.InvalidRequest, match="lambda needs name="):
        rt.agent(lambda ctx: 1)

    async def coroutine(ctx: tenure.AgentContext) -> int:
        return 1

    with pytest.raises(tenure.InvalidRequest, match="plain function"):
        rt.agent(coroutine)

    def first(ctx: tenure.AgentContext) -> int:
        return 1

    def second(ctx: tenure.AgentContext) -> int:
        return 2

    rt.agent(first, name="same")
    rt.agent(first, name="same")  # the very same function again: fine
    with pytest.raises(tenure.InvalidRequest, match="already registered"):
        rt.agent(second, name="same")


def test_agents_list_their_input_schema(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = triage_app(make_runtime, calls)
    (listed,) = rt.agents()
    assert listed["name"] == "triage" and listed["description"] == "Route a support ticket."
    schema = listed["input_schema"]
    assert schema["required"] == ["ticket_id", "text"]
    assert schema["properties"]["ticket_id"]["description"] == "the ticket's id"


def test_a_worker_without_the_agent_hands_the_run_back(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = triage_app(make_runtime, calls)
    run_id = rt.enqueue(agent_request("triage", ticket_id="T", text="x"))
    plain = make_runtime()
    result = plain.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = plain.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.attempt == 0
    assert "agent 'triage'" in run.error
    assert not calls.counts


def test_a_token_budget_ends_the_run_at_the_next_model_step(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    @rt.agent
    def chatty(ctx: tenure.AgentContext) -> str:
        for i in range(5):
            ctx.model(f"turn {i}: " + "x" * 400)
        return "done"

    request = RunRequest(
        agent="chatty", input={}, model="scripted", script=[{"say": "y"}] * 5, max_tokens=150
    )
    result = rt.run(request)
    assert result.outcome is Outcome.FAILED
    run = rt.status(result.run_id)
    assert run is not None and run.termination_reason is TerminationReason.BUDGET_EXHAUSTED
    assert [e.kind for e in rt.events(result.run_id)].count(EventKind.LLM) == 2


def test_a_cancelled_run_is_seen_by_its_code(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    seen: list[bool] = []
    started = threading.Event()

    @rt.agent
    def patient(ctx: tenure.AgentContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(ctx.cancelled)
        ctx.raise_if_cancelled()
        return "never"

    run_id = rt.enqueue(RunRequest(agent="patient", input={}))
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(rt.run_queued(run_id)))
    thread.start()
    assert started.wait(10)
    assert rt.cancel(run_id)
    thread.join(15)
    assert seen == [True]
    assert results[0].outcome is Outcome.CANCELLED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED


def test_a_worker_drains_agent_runs(make_runtime: MakeRuntime) -> None:
    calls = Calls()
    rt = triage_app(make_runtime, calls)
    ids = rt.enqueue_many(
        [
            agent_request(
                "triage", [{"say": "refund" if i % 2 else "question"}], ticket_id=f"T{i}", text="t"
            )
            for i in range(20)
        ]
    )
    rt.worker(concurrency=4, burst=True).run()
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
    assert sum(1 for name in calls.counts if name.startswith("refund:")) == 10
    assert all(n == 1 for name, n in calls.counts.items() if name.startswith("refund:"))
    assert_audited(rt)


def test_a_run_handed_back_after_its_steps_replays_them_on_the_next_worker(
    make_runtime: MakeRuntime,
) -> None:
    """A worker that lacks a tool the code reaches only later gives the run back before it
    records anything; the next worker (its attempt not counted) still replays the steps
    of earlier segments instead of running them again."""
    calls = Calls()
    full = make_runtime()
    partial = make_runtime()

    def register(rt: tenure.Runtime, with_tool: bool) -> None:
        if with_tool:

            @rt.tool(effect=WRITE)
            def ship(order: str) -> str:
                calls.add(f"ship:{order}")
                return "shipped"

        @rt.agent
        def fulfil(ctx: tenure.AgentContext, order: str) -> str:
            ctx.step(lambda: calls.add("charge"), name="charge", effect=WRITE)
            if ctx.attempt == 0:
                raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
            return str(ctx.tool("ship", order=order))

    register(full, True)
    register(partial, False)
    run_id = full.enqueue(RunRequest(agent="fulfil", input={"order": "O"}))
    assert full.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    time.sleep(0.15)
    handed = partial.run_queued(run_id)
    assert handed is not None and handed.outcome is Outcome.REQUEUED
    run = full.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and "tool 'ship'" in run.error
    results: list[Any] = []
    deadline = time.monotonic() + 10  # an unserved run waits a moment before its next claim
    while not results and time.monotonic() < deadline:
        results = [r for r in [full.run_queued(run_id)] if r is not None]
        time.sleep(0.05)
    assert results and results[0].outcome is Outcome.COMPLETED, results
    assert calls.counts == {"charge": 1, "ship:O": 1}
    assert_audited(full)


def test_code_that_asks_another_step_where_a_write_is_in_doubt_is_nondeterministic(
    make_runtime: MakeRuntime,
) -> None:
    old = make_runtime()
    ledger: list[str] = []

    def charge(ctx: tenure.ToolContext) -> str:
        ledger.append(ctx.idempotency_key)
        raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)

    def charged(ctx: tenure.ToolContext) -> Probe:
        return Probe.done("yes")

    @old.agent(name="checkout")
    def checkout_v1(ctx: tenure.AgentContext) -> str:
        return str(ctx.step(charge, effect=WRITE, probe=charged))

    run_id = old.enqueue(RunRequest(agent="checkout", input={}))
    assert old.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    new = make_runtime()

    @new.agent(name="checkout")
    def checkout_v2(ctx: tenure.AgentContext) -> str:
        return str(ctx.uuid())

    result = new.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = new.status(run_id)
    assert run is not None and run.error == (
        "nondeterministic at step 0: the journal has an interrupted write, step 'charge', "
        "the code asked uuid 'uuid'"
    )
    assert run.pending_effect is WRITE  # the fence stands: the write is still in doubt
    assert ledger == [f"{run_id}:0"]


def test_code_that_returns_before_a_write_in_doubt_is_nondeterministic(
    make_runtime: MakeRuntime,
) -> None:
    old = make_runtime()

    def charge(ctx: tenure.ToolContext) -> str:
        raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)

    @old.agent(name="checkout")
    def checkout_v1(ctx: tenure.AgentContext) -> str:
        return str(ctx.step(charge, effect=WRITE, probe=lambda ctx: Probe.done("yes")))

    run_id = old.enqueue(RunRequest(agent="checkout", input={}))
    assert old.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    new = make_runtime()

    @new.agent(name="checkout")
    def checkout_v2(ctx: tenure.AgentContext) -> str:
        return "skipped"

    result = new.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = new.status(run_id)
    assert run is not None and run.error.startswith(
        "nondeterministic at step 0: the journal has an interrupted write"
    )


def test_a_rate_limited_model_step_parks_the_run_and_the_replay_goes_on(
    make_runtime: MakeRuntime,
) -> None:
    """A 429 with Retry-After opens the model's circuit: the run is parked uncharged
    (SPEC §17) and its next segment replays the steps before the model call."""
    calls = Calls()
    rt = make_runtime(lease_seconds=1.0)

    @rt.agent
    def limited(ctx: tenure.AgentContext) -> str:
        ctx.step(lambda: calls.add("before"), name="before")
        return ctx.model("hello").text or ""

    script = [{"fail": "rate_limit", "retry_after": 0.6, "attempts": [0]}, {"say": "hi"}]
    run_id = rt.enqueue(agent_request("limited", script))
    parked = rt.run_queued(run_id)
    assert parked is not None and parked.outcome is Outcome.REQUEUED, parked
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    assert [e.kind for e in rt.events(run_id)].count(EventKind.THROTTLED) == 1
    deadline = time.monotonic() + 10
    done = None
    while done is None and time.monotonic() < deadline:
        time.sleep(0.1)
        done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert json.loads(done.output or "") == "hi" and calls.counts == {"before": 1}
    assert_audited(rt)


def test_a_nondeterministic_dead_letter_is_repaired_by_a_patched_branch_and_a_redrive(
    make_runtime: MakeRuntime,
) -> None:
    calls = Calls()
    old = make_runtime()

    @old.agent(name="flow")
    def flow_v1(ctx: tenure.AgentContext) -> str:
        ctx.step(lambda: calls.add("notify"), name="notify", effect=WRITE)
        if ctx.attempt == 0:
            raise tenure.RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return "v1"

    run_id = old.enqueue(RunRequest(agent="flow", input={}))
    assert old.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    broken = make_runtime()

    @broken.agent(name="flow")
    def flow_v2(ctx: tenure.AgentContext) -> str:
        ctx.uuid()  # a new first step: journals recorded before it no longer replay
        ctx.step(lambda: calls.add("notify"), name="notify", effect=WRITE)
        return "v2"

    time.sleep(0.15)
    assert broken.run_queued(run_id).outcome is Outcome.FAILED  # type: ignore[union-attr]
    fixed = make_runtime()

    @fixed.agent(name="flow")
    def flow_v3(ctx: tenure.AgentContext) -> str:
        if ctx.patched("uuid-first"):
            ctx.uuid()
        ctx.step(lambda: calls.add("notify"), name="notify", effect=WRITE)
        return "v3"

    assert fixed.redrive(run_id)
    done = fixed.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert json.loads(done.output or "") == "v3"
    assert calls.counts == {"notify": 1}  # the write of the old journal was not repeated
    assert_audited(fixed)


def test_a_decision_read_for_one_held_step_never_applies_to_the_next_hold(
    make_runtime: MakeRuntime,
) -> None:
    """A decider reads the waiting turn, stalls; meanwhile another decides it, the run goes
    on and waits again at its next step. The stalled decision (for the first turn) must
    match nothing: a decision is guarded by the turn it was decided on, not only by the
    status, which is the same again."""
    calls = Calls()
    rt = make_runtime()

    @rt.tool(effect=WRITE, requires_approval=True)
    def refund(amount: int) -> str:
        calls.add(f"refund:{amount}")
        return "refunded"

    @rt.agent
    def give_back(ctx: tenure.AgentContext, amount: int) -> str:
        if not ctx.approve("refund", {"amount": amount}):
            return "kept"
        ctx.tool("refund", amount=amount)
        return "refunded"

    run_id = rt.enqueue(RunRequest(agent="give_back", input={"amount": 5}))
    assert rt.run_queued(run_id).outcome is Outcome.AWAITING_APPROVAL  # type: ignore[union-attr]
    stalled_turn, _ = rt._waiting(run_id, RunStatus.WAITING_FOR_APPROVAL)  # the slow decider reads
    rt.approve(run_id, True, decided_by="ana")  # the fast one decides turn 0
    again = rt.run_queued(run_id)
    assert again is not None and again.outcome is Outcome.AWAITING_APPROVAL  # held at turn 1
    event = tenure.store.NewEvent(
        EventKind.APPROVAL, {"turn": stalled_turn, "approved": True, "decided_by": "bo"}
    )
    decision = {"turn": stalled_turn, "approved": True}
    assert not rt.store.decide_queued(run_id, RunStatus.WAITING_FOR_APPROVAL, decision, event)
    assert (
        rt.store.decide_inline(
            run_id, RunStatus.WAITING_FOR_APPROVAL, decision, event, "run:bo", 30.0
        )
        is None
    )
    turns = [e.payload["turn"] for e in rt.events(run_id) if e.kind is EventKind.APPROVAL]
    assert turns == [0]
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.WAITING_FOR_APPROVAL
    rt.approve(run_id, True, decided_by="ana")
    done = rt.run_queued(run_id)
    assert done is not None and done.outcome is Outcome.COMPLETED, done
    assert calls.counts == {"refund:5": 1}
    assert_audited(rt)


def test_a_database_outage_inside_the_function_is_retried_not_dead_lettered(
    tmp_path: Any,
) -> None:
    """The store gives up on a step's write (SQLite's writer lock held elsewhere past the
    busy timeout): the run is retried as a connection failure, as the built-in loop's is,
    not dead-lettered as the function's own exception. SQLite only: the lock is a real
    outage there; PostgreSQL's (a server that stops answering) is the same code path."""
    import sqlite3

    path = tmp_path / "locked.db"
    rt = tenure.Runtime(
        f"sqlite:///{path}?busy_timeout=0.1&locked_retries=0", backoff_base=0.05, backoff_cap=0.1
    )
    outages: list[str] = []

    @rt.agent
    def books(ctx: tenure.AgentContext) -> str:
        if not outages:
            locker = sqlite3.connect(path, isolation_level=None)
            locker.execute("BEGIN IMMEDIATE")
            try:
                ctx.step(lambda: "booked", name="book")
            except tenure.DatabaseUnavailable as exc:
                outages.append(str(exc))
                raise
            finally:
                locker.execute("ROLLBACK")
                locker.close()
        return str(ctx.step(lambda: "booked", name="book"))

    try:
        run_id = rt.enqueue(RunRequest(agent="books", input={}))
        first = rt.run_queued(run_id)
        assert first is not None and first.outcome is Outcome.REQUEUED, first
        deadline = time.monotonic() + 10
        while rt.run_queued(run_id) is None:  # claimable again once its backoff has passed
            assert time.monotonic() < deadline, "never claimable again"
            time.sleep(0.02)
        run = rt.status(run_id)
        assert len(outages) == 1, outages
        assert run is not None and run.status is RunStatus.COMPLETED, (run.status, run.error)
        assert json.loads(run.output or "") == "booked" and run.requeue_count == 1
        requeued = [e for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
        assert [e.payload["error_class"] for e in requeued] == ["connection"]
    finally:
        rt.close()
