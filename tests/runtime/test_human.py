"""Human in the loop: approvals and typed input, on every store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import tenure
from tenure import (
    EventKind,
    Outcome,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
)

from ..store.test_races import race

MakeRuntime = Callable[..., tenure.Runtime]


def gated(rt: tenure.Runtime) -> dict[str, list[Any]]:
    calls: dict[str, list[Any]] = {"pay": [], "look": [], "ship": []}

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    def pay(ctx: ToolContext, amount: int) -> str:
        calls["pay"].append((amount, ctx.fencing_token))
        return f"paid {amount}"

    @rt.tool
    def look() -> str:
        calls["look"].append(1)
        return "looked"

    class Address(BaseModel):
        street: str
        zip_code: str

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE, input_schema=Address, sensitive=True)
    def ship(item: str, street: str = "", zip_code: str = "") -> str:
        calls["ship"].append((item, street, zip_code))
        return f"shipped {item} to {street}"

    return calls


def pay_request(**kwargs: Any) -> RunRequest:
    return RunRequest(
        prompt="pay 5",
        model="scripted",
        tools=["pay", "look"],
        script=[
            {"call": [{"tool": "look"}, {"tool": "pay", "args": {"amount": 5}}]},
            {"say": "done"},
        ],
        **kwargs,
    )


def test_the_whole_turn_waits_for_approval_without_a_lease(runtime: tenure.Runtime) -> None:
    calls = gated(runtime)
    run_id = runtime.enqueue(pay_request())
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.AWAITING_APPROVAL
    assert calls["look"] == [] and calls["pay"] == []  # nothing of the turn ran
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.WAITING_FOR_APPROVAL
    assert run.lease_expires is None and run.claimed_by == ""
    assert run.waiting is not None and run.waiting["kind"] == "approval"
    assert [(c["tool"], c["kind"]) for c in run.waiting["calls"]] == [
        ("look", "none"),
        ("pay", "approval"),
    ]
    assert runtime.reap().requeued == 0  # the reaper ignores a waiting run
    assert [r.id for r in runtime.pending()] == [run_id]
    pending = runtime.pending_calls(run_id)
    assert pending[1] == {
        "call_id": pending[1]["call_id"],
        "tool": "pay",
        "effect": "non_idempotent_write",
        "args": {"amount": 5},
        "kind": "approval",
        "sensitive": False,
        "input_schema": None,
    }

    assert runtime.approve(run_id, True, decided_by="ada", note="ok") is None
    assert runtime.status(run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]
    runtime.work(concurrency=1, burst=True, poll_interval=0.02)
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.waiting is None
    assert calls["look"] == [1] and [a for a, _ in calls["pay"]] == [5]
    approval = next(e for e in runtime.events(run_id) if e.kind is EventKind.APPROVAL)
    assert approval.payload["decided_by"] == "ada" and approval.payload["approved"] is True
    tool_events = [e.payload for e in runtime.events(run_id) if e.kind is EventKind.TOOL]
    assert [t["name"] for t in tool_events] == ["look", "pay"]


def test_a_denial_goes_back_to_the_model_as_a_refusal(runtime: tenure.Runtime) -> None:
    calls = gated(runtime)
    run_id = runtime.enqueue(pay_request())
    runtime.run_queued(run_id)
    result = runtime.approve(run_id, False, decided_by="bob", note="too much", execute="inline")
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert calls["pay"] == []
    refusal = next(
        e.payload
        for e in runtime.events(run_id)
        if e.kind is EventKind.TOOL and e.payload["name"] == "pay"
    )
    assert refusal["error"] == "denied by bob: too much" and refusal["result"] is None


def test_inline_approval_runs_the_write_fenced_under_a_new_lease(
    runtime: tenure.Runtime,
) -> None:
    calls = gated(runtime)
    run_id = runtime.enqueue(pay_request())
    runtime.run_queued(run_id)
    result = runtime.approve(run_id, True, decided_by="ada", execute="inline")
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert calls["pay"] == [(5, 2)]  # a fresh claim: token 2
    run = runtime.status(run_id)
    assert run is not None and run.attempt == 1


def test_an_inline_approval_of_a_keyed_run_is_queued_for_a_claim_that_keeps_the_limit(
    runtime: tenure.Runtime,
) -> None:
    """SPEC §22: continued here, the run would start without the claim's check of its
    key's limit; it goes back to the queue and waits there while the key is full."""
    calls = gated(runtime)
    run_id = runtime.enqueue(pay_request(concurrency_key="tenant"))
    runtime.run_queued(run_id)
    runtime.set_concurrency_limit("tenant", 0)
    assert runtime.approve(run_id, True, decided_by="ada", execute="inline") is None
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert runtime.run_queued(run_id) is None  # the key is full: not claimable
    runtime.set_concurrency_limit("tenant", 1)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert calls["pay"] == [(5, 2)]


def _decision(runtime: tenure.Runtime, run_id: str, approved: bool) -> str:
    try:
        runtime.approve(run_id, approved, decided_by="x")
    except tenure.DecisionConflict:
        return "conflict"
    return "won"


def test_two_concurrent_decisions_one_wins(runtime: tenure.Runtime) -> None:
    gated(runtime)
    for _ in range(5):
        run_id = runtime.enqueue(pay_request())
        runtime.run_queued(run_id)
        outcomes = race(
            lambda r=run_id: _decision(runtime, r, True),
            lambda r=run_id: _decision(runtime, r, False),
        )
        assert sorted(outcomes) == ["conflict", "won"]
        approvals = [e for e in runtime.events(run_id) if e.kind is EventKind.APPROVAL]
        assert len(approvals) == 1
        assert runtime.cancel(run_id)


def test_approve_vs_cancel_one_wins(runtime: tenure.Runtime) -> None:
    gated(runtime)
    for _ in range(5):
        run_id = runtime.enqueue(pay_request())
        runtime.run_queued(run_id)
        approved, cancelled = race(
            lambda r=run_id: _decision(runtime, r, True) == "won",
            lambda r=run_id: runtime.cancel(r),
        )
        run = runtime.status(run_id)
        # Cancel always applies (to the waiting run, or to the queued continuation after a
        # winning approval); an approval that lost to it was refused with a conflict.
        assert cancelled is True
        assert run is not None and run.status is RunStatus.CANCELLED
        assert runtime.run_queued(run_id) is None
        kinds = [e.kind for e in runtime.events(run_id)]
        assert kinds.count(EventKind.CANCELLED) == 1
        assert kinds.count(EventKind.APPROVAL) == (1 if approved else 0)


def test_decisions_on_runs_that_do_not_wait(runtime: tenure.Runtime) -> None:
    gated(runtime)
    with pytest.raises(tenure.InvalidRequest, match="unknown run"):
        runtime.approve("nope", True, decided_by="x")
    run_id = runtime.enqueue(pay_request())
    with pytest.raises(tenure.DecisionConflict, match="not waiting_for_approval"):
        runtime.approve(run_id, True, decided_by="x")
    runtime.run_queued(run_id)
    with pytest.raises(tenure.DecisionConflict):
        runtime.submit_input(run_id, {}, submitted_by="x")
    with pytest.raises(tenure.InvalidRequest, match="who decided"):
        runtime.approve(run_id, True, decided_by=" ")
    with pytest.raises(tenure.InvalidRequest, match="execute"):
        runtime.approve(run_id, True, decided_by="x", execute="later")
    assert runtime.status(run_id).status is RunStatus.WAITING_FOR_APPROVAL  # type: ignore[union-attr]


def test_input_is_validated_then_overlays_only_declared_keys(runtime: tenure.Runtime) -> None:
    calls = gated(runtime)
    run_id = runtime.enqueue(
        RunRequest(
            prompt="ship it",
            model="scripted",
            tools=["ship"],
            script=[
                {"call": [{"tool": "ship", "args": {"item": "book", "street": "model's"}}]},
                {"say": "shipped"},
            ],
        )
    )
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.AWAITING_INPUT
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.WAITING_FOR_INPUT
    assert run.waiting is not None and run.waiting["calls"][0]["args"] == "<hidden>"
    schema = runtime.pending_calls(run_id)[0]["input_schema"]
    assert set(schema["properties"]) == {"street", "zip_code"}

    with pytest.raises(tenure.InvalidRequest, match="zip_code"):
        runtime.submit_input(run_id, {"street": "Main St 1"}, submitted_by="eve")
    assert runtime.status(run_id).status is RunStatus.WAITING_FOR_INPUT  # type: ignore[union-attr]

    secret = {"street": "Main St 1", "zip_code": "12345", "item": "a car"}
    result = runtime.submit_input(run_id, secret, submitted_by="eve", execute="inline")
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert calls["ship"] == [("book", "Main St 1", "12345")]  # `item` is not the person's
    submitted = next(e for e in runtime.events(run_id) if e.kind is EventKind.INPUT)
    assert submitted.payload == {
        "turn": submitted.payload["turn"],
        "submitted_by": "eve",
        "keys": ["street", "zip_code"],
    }
    stream = str([e.payload for e in runtime.events(run_id) if e.kind is not EventKind.TOOL])
    assert "Main St 1" not in stream and "12345" not in stream


def test_json_schema_input_and_registration_rules(runtime: tenure.Runtime) -> None:
    got: list[int] = []

    @runtime.tool(
        input_schema={
            "type": "object",
            "properties": {"pin": {"type": "integer"}},
            "required": ["pin"],
        }
    )
    def unlock(pin: int = 0) -> str:
        got.append(pin)
        return "open"

    with pytest.raises(tenure.InvalidRequest, match="accepts anything"):

        @runtime.tool(input_schema={"type": "object"})
        def anything() -> None: ...

    with pytest.raises(tenure.InvalidRequest, match="not both"):

        @runtime.tool(
            input_schema={"type": "object", "properties": {"a": {}}}, requires_approval=True
        )
        def both() -> None: ...

    run_id = runtime.enqueue(
        RunRequest(
            prompt="u",
            model="scripted",
            tools=["unlock"],
            script=[{"call": [{"tool": "unlock"}]}, {"say": "ok"}],
        )
    )
    runtime.run_queued(run_id)
    with pytest.raises(tenure.InvalidRequest, match="pin: does not satisfy type 'integer'"):
        runtime.submit_input(run_id, {"pin": "1234"}, submitted_by="x")
    runtime.submit_input(run_id, {"pin": 1234}, submitted_by="x")
    runtime.work(concurrency=1, burst=True, poll_interval=0.02)
    assert got == [1234]


def test_approve_writes_makes_every_write_wait(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(approve_writes=True)
    ran: list[str] = []

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def save() -> None:
        ran.append("save")

    @rt.tool
    def read() -> None:
        ran.append("read")

    run_id = rt.enqueue(
        RunRequest(
            prompt="s",
            model="scripted",
            tools=["save", "read"],
            script=[{"call": [{"tool": "read"}]}, {"call": [{"tool": "save"}]}, {"say": "x"}],
        )
    )
    assert rt.run_queued(run_id).outcome is Outcome.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert ran == ["read"]  # reads never wait
    assert rt.approve(run_id, True, decided_by="ops", execute="inline").outcome is (  # type: ignore[union-attr]
        Outcome.COMPLETED
    )
    assert ran == ["read", "save"]


def test_approval_timeout_settles_approval_denied(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(approval_timeout=0.2)
    gated(rt)
    run_id = rt.enqueue(pay_request())
    rt.run_queued(run_id)
    assert rt.reap().expired == 0
    time.sleep(0.35)
    assert rt.reap().expired == 1
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.APPROVAL_DENIED
    with pytest.raises(tenure.DecisionConflict):
        rt.approve(run_id, True, decided_by="late")


def test_an_interactive_run_waits_and_continues_on_a_worker(runtime: tenure.Runtime) -> None:
    calls = gated(runtime)
    result = runtime.run(pay_request())
    assert result.outcome is Outcome.AWAITING_APPROVAL
    runtime.approve(result.run_id, True, decided_by="ada")
    runtime.work(concurrency=1, burst=True, poll_interval=0.02)
    assert runtime.status(result.run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    assert len(calls["pay"]) == 1


def test_approved_write_whose_worker_dies_is_dead_lettered_never_repeated(
    make_runtime: MakeRuntime,
) -> None:
    # The first segment only holds the run for a person: a lease of its own, long enough
    # on a loaded machine; the continuation's lease is short, for the reaper to come.
    holder = make_runtime()
    rt = make_runtime(lease_seconds=0.2)
    release = threading.Event()
    writes: list[int] = []

    def wire(ctx: ToolContext) -> str:
        writes.append(ctx.fencing_token)
        release.wait(5)  # the worker stalls inside the approved write
        return "sent"

    for app in (holder, rt):
        app.tool(wire, effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True, timeout=0.1)
    run_id = rt.enqueue(
        RunRequest(
            prompt="w",
            model="scripted",
            tools=["wire"],
            script=[{"call": [{"tool": "wire"}]}, {"say": "x"}],
        )
    )
    held = holder.run_queued(run_id)
    assert held is not None and held.outcome is Outcome.AWAITING_APPROVAL, held
    rt.approve(run_id, True, decided_by="ada")
    stalled = threading.Thread(target=rt.run_queued, args=(run_id,))
    stalled.start()
    time.sleep(0.5)  # past the fence's lease (timeout + lease)
    report = rt.reap()
    release.set()
    stalled.join()
    assert report.dead_lettered == 1
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert writes == [2]
    assert not rt.redrive(run_id)


def test_input_is_checked_against_the_whole_json_schema(runtime: tenure.Runtime) -> None:
    got: list[dict[str, Any]] = []

    @runtime.tool(
        input_schema={
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^[0-9]{6}$"},
                "contact": {
                    "type": "object",
                    "properties": {"email": {"type": "string", "format": "email"}},
                    "required": ["email"],
                },
            },
            "required": ["code"],
        },
        sensitive=True,
    )
    def confirm(code: str = "", contact: dict[str, Any] | None = None) -> str:
        got.append({"code": code, "contact": contact})
        return "confirmed"

    run_id = runtime.enqueue(
        RunRequest(
            prompt="c",
            model="scripted",
            tools=["confirm"],
            script=[{"call": [{"tool": "confirm"}]}, {"say": "ok"}],
        )
    )
    runtime.run_queued(run_id)
    refused = [
        ({"code": "12"}, "code: does not satisfy pattern"),
        ({"code": "123456", "contact": {}}, "contact: 'email' is a required property"),
        ({"code": "123456", "contact": {"email": "nobody"}}, "contact.email: does not satisfy"),
    ]
    for values, needle in refused:
        with pytest.raises(ValueError, match=needle) as caught:
            runtime.submit_input(run_id, values, submitted_by="x")
        assert "nobody" not in str(caught.value)
        assert runtime.status(run_id).status is RunStatus.WAITING_FOR_INPUT  # type: ignore[union-attr]
    assert not [e for e in runtime.events(run_id) if e.kind is EventKind.INPUT]

    good = {"code": "123456", "contact": {"email": "ada@example.org"}}
    result = runtime.submit_input(run_id, good, submitted_by="x", execute="inline")
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert got == [good]


def test_the_context_of_a_held_turn(runtime: tenure.Runtime) -> None:
    """Why the held calls were asked for: the prompt, the model's words, the wait."""
    gated(runtime)

    @runtime.tool(sensitive=True)
    def balance(account: str) -> int:
        return 1200

    said = "Looking first, then paying 5 as the invoice says."
    plain = runtime.enqueue(
        RunRequest(
            prompt="pay invoice 17",
            model="scripted",
            tools=["pay", "look"],
            script=[
                {"call": [{"tool": "look"}, {"tool": "pay", "args": {"amount": 5}}], "text": said},
                {"say": "done"},
            ],
        )
    )
    silent = runtime.enqueue(pay_request())
    earlier = runtime.enqueue(
        RunRequest(
            prompt="pay what account 9 holds",
            model="scripted",
            tools=["pay", "balance"],
            script=[
                {"call": [{"tool": "balance", "args": {"account": "9"}}]},
                {"call": [{"tool": "pay", "args": {"amount": 1200}}], "text": "It holds 1200."},
                {"say": "done"},
            ],
        )
    )
    for run_id in (plain, silent, earlier):
        result = runtime.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.AWAITING_APPROVAL, result

    context = runtime.pending_context(plain)
    assert context is not None and context.hidden == "" and context.damaged == ""
    assert (context.prompt, context.model_text) == ("pay invoice 17", said)
    assert context.waited_seconds is not None and context.waited_seconds >= 0
    run = runtime.status(plain)
    assert run is not None and context.waiting_since == run.updated_at
    context = runtime.pending_context(silent)
    assert context is not None and (context.prompt, context.model_text) == ("pay 5", "")
    # The held call is not sensitive, but an earlier one of the run was: the model's words
    # may repeat what it returned.
    context = runtime.pending_context(earlier)
    assert context is not None and context.hidden == "sensitive tool balance"
    assert (context.prompt, context.model_text) == ("<hidden>", "<hidden>")
    context = runtime.pending_context(earlier, reveal=True)
    assert context is not None and context.model_text == "It holds 1200." and not context.hidden
    # Not waiting (any more): nothing to show.
    runtime.approve(plain, True, decided_by="ada")
    assert runtime.pending_context(plain) is None
    assert runtime.pending_context("no-such-run") is None
