"""Fork: rerun a run from a step (SPEC §23), on both stores: what is kept and what runs
again, the writes rule, in-doubt writes, agent functions (the repair of a nondeterministic
dead-letter), races with a claim, bad input, and the original left as it was."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import (
    EventKind,
    FailureClass,
    ForkRefused,
    InvalidRequest,
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
SCRIPT = [
    {"call": [{"tool": "look", "args": {"q": "a"}}]},
    {"call": [{"tool": "pay", "args": {"amount": 7}}]},
    {"call": [{"tool": "look", "args": {"q": "b"}}]},
    {"say": "paid"},
]


class Payments:
    def __init__(self) -> None:
        self.keys: list[str] = []


def shop(make_runtime: MakeRuntime, **kwargs: Any) -> tuple[tenure.Runtime, Payments]:
    rt = make_runtime(**kwargs)
    payments = Payments()

    @rt.tool
    def look(q: str) -> str:
        return f"seen {q}"

    @rt.tool(effect=WRITE)
    def pay(ctx: tenure.ToolContext, amount: int) -> dict[str, int]:
        payments.keys.append(ctx.idempotency_key)
        return {"paid": amount}

    return rt, payments


def finished(rt: tenure.Runtime, script: list[dict[str, Any]] = SCRIPT) -> str:
    run_id = rt.enqueue(
        RunRequest(prompt="shop", model="scripted", tools=["look", "pay"], script=script)
    )
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    return run_id


def seq_of(rt: tenure.Runtime, run_id: str, kind: EventKind, name: str) -> int:
    return next(
        e.sequence for e in rt.events(run_id) if e.kind is kind and e.payload.get("name") == name
    )


def snapshot(rt: tenure.Runtime, run_id: str) -> tuple[Any, ...]:
    run = rt.status(run_id)
    assert run is not None
    return run, [dataclasses.replace(e) for e in rt.events(run_id)]


def forks_of(rt: tenure.Runtime, run_id: str) -> list[tenure.Run]:
    return [r for r in rt.runs(limit=1000) if r.forked_from and r.forked_from.run_id == run_id]


def test_a_fork_after_a_write_keeps_it_and_runs_the_rest_again(make_runtime: MakeRuntime) -> None:
    rt, payments = shop(make_runtime)
    original = finished(rt)
    before = snapshot(rt, original)
    paid_at = seq_of(rt, original, EventKind.TOOL, "pay")
    at = paid_at + 1  # the model turn after the payment

    plan = rt.fork_plan(original, at)
    assert [k["sequence"] for k in plan.kept] == list(range(at))
    assert plan.repeated_writes == () and plan.refusal(False) is None
    assert [(a["kind"], a["name"]) for a in plan.again][:2] == [("llm", "model"), ("tool", "look")]

    fork_id = rt.fork(original, at)
    fork = rt.status(fork_id)
    assert fork is not None and fork.status is RunStatus.QUEUED
    assert fork.forked_from == tenure.ForkedFrom(original, at)
    assert fork.to_json()["forked_from"] == {"run_id": original, "sequence": at}
    copied = rt.events(fork_id)
    originals = rt.events(original)
    assert [(e.sequence, e.kind, e.payload, e.attempt, e.lease_token) for e in copied[:at]] == [
        (e.sequence, e.kind, e.payload, e.attempt, e.lease_token) for e in originals[:at]
    ]
    assert copied[at].kind is EventKind.FORKED
    assert copied[at].payload["from"] == original and copied[at].payload["at"] == at

    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert result.output == "paid"
    assert payments.keys == [f"{original}:{paid_at - 1}"]  # the write ran once, ever
    looks = [e for e in rt.events(fork_id)[at:] if e.kind is EventKind.TOOL]
    assert [e.payload["idempotency_key"].split(":")[0] for e in looks] == [fork_id]
    assert snapshot(rt, original) == before  # the original is not changed
    report = audit(rt.store)
    assert report.violations == [], report.violations


def test_a_fork_that_would_repeat_a_write_is_refused_naming_it(make_runtime: MakeRuntime) -> None:
    rt, payments = shop(make_runtime)
    original = finished(rt)
    before = snapshot(rt, original)
    paid_at = seq_of(rt, original, EventKind.TOOL, "pay")
    key = f"{original}:{paid_at - 1}"

    plan = rt.fork_plan(original, paid_at - 1)  # the model turn that asked for the payment
    assert plan.repeated_writes == ({"sequence": paid_at, "name": "pay", "idempotency_key": key},)
    with pytest.raises(ForkRefused) as refused:
        rt.fork(original, paid_at - 1)
    message = str(refused.value)
    assert "\n" not in message and "pay" in message and key in message
    assert forks_of(rt, original) == [] and len(rt.runs()) == 1  # nothing stored
    assert snapshot(rt, original) == before

    # Allowed: the write runs again, under the fork's own key.
    fork_id = rt.fork(original, paid_at - 1, allow_repeat_writes=True)
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    again = seq_of(rt, fork_id, EventKind.TOOL, "pay")
    assert rt.events(fork_id)[again].payload["idempotency_key"] == payments.keys[1]
    assert payments.keys == [key, f"{fork_id}:{again - 1}"]
    forked = rt.events(fork_id)[paid_at - 1]
    assert forked.kind is EventKind.FORKED and forked.payload["repeated_writes"] == [key]
    report = audit(rt.store)
    assert report.violations == [], report.violations


def test_forking_twice_gives_two_independent_runs(make_runtime: MakeRuntime) -> None:
    rt, payments = shop(make_runtime)
    original = finished(rt)
    at = seq_of(rt, original, EventKind.TOOL, "pay") + 1
    first, second = rt.fork(original, at), rt.fork(original, at)
    assert first != second
    for fork_id in (first, second):
        result = rt.run_queued(fork_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
    keys = {
        fork_id: {
            e.payload["idempotency_key"]
            for e in rt.events(fork_id)[at:]
            if e.kind is EventKind.TOOL
        }
        for fork_id in (first, second)
    }
    assert all(k.startswith(f"{first}:") for k in keys[first])
    assert all(k.startswith(f"{second}:") for k in keys[second])
    assert len(payments.keys) == 1
    assert sorted(r.id for r in forks_of(rt, original)) == sorted([first, second])
    report = audit(rt.store)
    assert report.violations == [], report.violations


class Fixed:
    """A model that answers at once (the fixed prompt or model the fork was made for)."""

    def complete(self, call: Any) -> tenure.ModelReply:
        return tenure.ModelReply(text="fixed answer")


def test_two_forks_at_the_same_instant_are_two_runs(make_runtime: MakeRuntime) -> None:
    """Both hold the original (a shared lock on PostgreSQL, the writer lock in turn on
    SQLite): neither blocks the other out, and neither changes the original."""
    import threading

    rt, _ = shop(make_runtime)
    original = finished(rt)
    before = snapshot(rt, original)
    at = seq_of(rt, original, EventKind.TOOL, "pay") + 1
    barrier = threading.Barrier(2)
    made: list[str] = []

    def fork() -> None:
        barrier.wait()
        made.append(rt.fork(original, at))

    threads = [threading.Thread(target=fork) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 2
    assert sorted(r.id for r in forks_of(rt, original)) == sorted(made)
    assert snapshot(rt, original) == before
    report = audit(rt.store)
    assert report.violations == [], report.violations


def test_a_fork_with_another_model(make_runtime: MakeRuntime) -> None:
    rt, _ = shop(make_runtime)
    rt.add_model("fixed", Fixed())
    original = finished(rt)
    at = seq_of(rt, original, EventKind.TOOL, "pay") + 1
    with pytest.raises(tenure.UnknownModel):
        rt.fork(original, at, model="nope")
    fork_id = rt.fork(original, at, model="fixed")
    result = rt.run_queued(fork_id)
    assert result is not None and result.output == "fixed answer"


@pytest.mark.parametrize(
    "at, says",
    [(0, "from 1 to"), (99, "from 1 to"), ("3", "from 1 to"), (True, "from 1 to")],
)
def test_a_sequence_out_of_range_is_refused(make_runtime: MakeRuntime, at: Any, says: str) -> None:
    rt, _ = shop(make_runtime)
    original = finished(rt)
    before = snapshot(rt, original)
    with pytest.raises(InvalidRequest, match=says):
        rt.fork(original, at)
    assert len(rt.runs()) == 1 and snapshot(rt, original) == before


def test_an_unknown_run_is_refused(make_runtime: MakeRuntime) -> None:
    rt, _ = shop(make_runtime)
    with pytest.raises(InvalidRequest, match="unknown run 'nope'"):
        rt.fork("nope", 1)
    with pytest.raises(InvalidRequest, match="unknown run"):
        rt.fork_plan("nope", 1)
    assert rt.runs() == []


def test_a_running_or_queued_run_is_refused(make_runtime: MakeRuntime) -> None:
    rt, _ = shop(make_runtime)
    run_id = rt.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "hi"}]))
    with pytest.raises(InvalidRequest, match="is queued"):
        rt.fork(run_id, 1)
    claimed = rt.store.claim_run(run_id, "worker:t:1:0", 30)
    assert claimed is not None
    with pytest.raises(InvalidRequest, match="is running"):
        rt.fork(run_id, 1)
    assert len(rt.runs()) == 1


def test_a_run_claimed_between_the_plan_and_the_copy_is_not_forked(
    make_runtime: MakeRuntime,
) -> None:
    """The plan reads a dead-letter; before the copy, an operator redrives it and a worker
    claims it: the fork's guard sees the run is no longer what the plan read, and nothing
    is stored."""
    rt, _ = shop(make_runtime)
    run_id = rt.enqueue(
        RunRequest(
            prompt="shop",
            model="scripted",
            tools=["look"],
            script=[{"call": [{"tool": "look", "args": {"q": "a"}}]}, {"fail": "auth"}],
        )
    )
    rt.run_queued(run_id)
    dead = rt.status(run_id)
    assert dead is not None and dead.termination_reason is TerminationReason.NOT_RETRYABLE
    plan = rt.fork_plan(run_id, 3)  # the read
    assert rt.redrive(run_id)
    assert rt.store.claim_run(run_id, "worker:t:1:0", 30) is not None  # the stall's winner
    before = snapshot(rt, run_id)
    with pytest.raises(ForkRefused, match="changed while its fork was planned"):
        rt._fork(plan, None, False)  # the copy
    assert forks_of(rt, run_id) == [] and len(rt.runs()) == 1
    assert snapshot(rt, run_id) == before


def test_a_run_redriven_back_to_a_dead_letter_between_plan_and_copy_is_not_forked(
    make_runtime: MakeRuntime,
) -> None:
    """The status alone would pass (failed again); the journal grew since the plan."""
    rt, _ = shop(make_runtime)
    run_id = rt.enqueue(
        RunRequest(
            prompt="x", model="scripted", script=[{"fail": "auth", "attempts": [0]}, {"say": "a"}]
        )
    )
    rt.run_queued(run_id)
    plan = rt.fork_plan(run_id, 1)
    assert rt.redrive(run_id)
    rt.run_queued(run_id)
    assert rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    with pytest.raises(ForkRefused):
        rt._fork(plan, None, False)
    assert forks_of(rt, run_id) == []


# -- writes in doubt (SPEC §16) ------------------------------------------------------------


def interrupted_payment(
    make_runtime: MakeRuntime, with_probe: bool
) -> tuple[tenure.Runtime, Payments, str]:
    """A run whose payment happened but did not answer: its fence stands, and it is
    dead-lettered (no budget left) with the fence kept."""
    rt = make_runtime(max_requeues=0)
    payments = Payments()

    def check(ctx: tenure.ToolContext, amount: int) -> Probe:
        return (
            Probe.done({"paid": amount})
            if ctx.idempotency_key in payments.keys
            else (Probe.not_done())
        )

    @rt.tool(effect=WRITE, timeout=2, probe=check if with_probe else None)
    def pay(ctx: tenure.ToolContext, amount: int) -> dict[str, int]:
        payments.keys.append(ctx.idempotency_key)
        if len(payments.keys) == 1:  # the first payment happens, its answer is lost
            raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)
        return {"paid": amount}

    run_id = rt.enqueue(
        RunRequest(
            prompt="pay",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay", "args": {"amount": 7}}]}, {"say": "paid"}],
        )
    )
    rt.run_queued(run_id)
    run = rt.status(run_id)
    assert run is not None and run.is_dead_letter and run.pending_effect is WRITE
    return rt, payments, run_id


def test_a_fork_at_an_interrupted_write_with_a_probe_goes_in_doubt(
    make_runtime: MakeRuntime,
) -> None:
    rt, payments, original = interrupted_payment(make_runtime, with_probe=True)
    last = rt.events(original)[-1].sequence  # the dead-letter: the write stood before it
    plan = rt.fork_plan(original, last)
    assert plan.in_doubt is not None and plan.in_doubt["name"] == "pay"
    assert plan.refusal(False) is None
    fork_id = rt.fork(original, last)
    fork = rt.status(fork_id)
    assert fork is not None and fork.pending_effect is WRITE and fork.fence_probe
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    assert len(payments.keys) == 1  # the probe said it happened: never paid again
    probe = next(e for e in rt.events(fork_id) if e.kind is EventKind.PROBE)
    assert probe.payload["verdict"] == "done"
    assert probe.payload["idempotency_key"] == payments.keys[0]  # asked about the original's
    resolved = next(e for e in rt.events(fork_id)[last:] if e.kind is EventKind.TOOL)
    assert resolved.payload["resolved_by"] == "probe"
    assert resolved.payload["idempotency_key"].startswith(f"{fork_id}:")
    report = audit(rt.store, max_requeues=0)
    assert report.violations == [], report.violations


def test_a_fork_at_an_interrupted_write_without_a_probe_is_refused(
    make_runtime: MakeRuntime,
) -> None:
    rt, payments, original = interrupted_payment(make_runtime, with_probe=False)
    last = rt.events(original)[-1].sequence
    for allow in (False, True):
        with pytest.raises(ForkRefused, match="no probe"):
            rt.fork(original, last, allow_repeat_writes=allow)
    assert forks_of(rt, original) == []
    # From before the model turn that asked for it, the write is one that would repeat.
    asked = next(e.sequence for e in rt.events(original) if e.kind is EventKind.LLM)
    plan = rt.fork_plan(original, asked)
    assert [w.get("in_doubt") for w in plan.repeated_writes] == [True]
    with pytest.raises(ForkRefused, match="would repeat 1 non-idempotent write"):
        rt.fork(original, asked)
    fork_id = rt.fork(original, asked, allow_repeat_writes=True)
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    # Run again by choice, under the fork's own key.
    assert [k.split(":")[0] for k in payments.keys] == [original, fork_id]


# -- agent functions (SPEC §20) ------------------------------------------------------------


def test_forking_repairs_a_nondeterministic_dead_letter(make_runtime: MakeRuntime) -> None:
    """The code changed while the run waited for a person: at position 1 it now asks
    another step than the journal holds, and the run dead-letters `nondeterministic`.
    Forked at that step's event, the steps before it replay under the new code, and the
    new step runs."""
    rt = make_runtime()
    ran: list[str] = []
    changed = {"now": False}

    def one() -> int:
        ran.append("one")
        return 1

    def two() -> int:
        ran.append("two")
        return 2

    def three() -> int:
        ran.append("three")
        return 3

    @rt.agent
    def flow(ctx: tenure.AgentContext, n: int) -> dict[str, Any]:
        a = ctx.step(one)
        b = ctx.step(three) if changed["now"] else ctx.step(two)
        ok = ctx.approve("go", {"n": n})
        return {"sum": a + b + n, "ok": ok}

    run_id = rt.enqueue(RunRequest(agent="flow", input={"n": 10}))
    waiting = rt.run_queued(run_id)
    assert waiting is not None and waiting.outcome is Outcome.AWAITING_APPROVAL
    changed["now"] = True  # the new code is deployed while the run waits
    rt.approve(run_id, True, decided_by="ana")
    rt.run_queued(run_id)
    dead = rt.status(run_id)
    assert dead is not None and dead.termination_reason is TerminationReason.NOT_RETRYABLE
    assert (dead.error or "").startswith("nondeterministic at step 1"), dead.error
    assert ran == ["one", "two"]

    at = next(e.sequence for e in rt.events(run_id) if e.payload.get("position") == 1)
    plan = rt.fork_plan(run_id, at)
    assert [(k.get("position"), k["name"]) for k in plan.kept if "position" in k] == [(0, "one")]
    fork_id = rt.fork(run_id, at)
    waiting = rt.run_queued(fork_id)
    assert waiting is not None and waiting.outcome is Outcome.AWAITING_APPROVAL
    rt.approve(fork_id, True, decided_by="ana")
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    assert result.output is not None and '"sum": 14' in result.output
    assert ran == ["one", "two", "three"]  # position 0 replayed, not run again
    report = audit(rt.store)
    assert report.violations == [], report.violations


def test_an_agent_functions_write_before_the_fork_is_kept_and_keys_are_the_forks(
    make_runtime: MakeRuntime,
) -> None:
    rt, payments = shop(make_runtime)
    fail = {"now": True}

    @rt.agent
    def buy(ctx: tenure.AgentContext) -> str:
        ctx.tool("pay", amount=3)
        ctx.tool("look", q="x")
        if fail["now"]:
            raise ValueError("a bug at the third step")
        ctx.tool("pay", amount=4)
        return "bought"

    run_id = rt.enqueue(RunRequest(agent="buy", input={}))
    rt.run_queued(run_id)
    dead = rt.status(run_id)
    assert dead is not None and dead.is_dead_letter
    fail["now"] = False
    at = rt.events(run_id)[-1].sequence  # the dead-letter: every step is kept
    fork_id = rt.fork(run_id, at)
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert payments.keys == [f"{run_id}:0", f"{fork_id}:2"]
    # Forked before the first payment: it would repeat, and says so.
    first_pay = seq_of(rt, run_id, EventKind.TOOL, "pay")
    with pytest.raises(ForkRefused, match=f"{run_id}:0"):
        rt.fork(run_id, first_pay)
    report = audit(rt.store)
    assert report.violations == [], report.violations


# -- the audit of forks --------------------------------------------------------------------


def test_the_audit_catches_an_original_changed_after_its_fork(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    """The checks can fail: an original whose copied events were edited behind tenure's
    back, and a fork's own call under another run's key, are each one violation."""
    from tests._raw import raw_execute

    rt, _ = shop(make_runtime)
    original = finished(rt)
    at = seq_of(rt, original, EventKind.TOOL, "pay") + 1
    fork_id = rt.fork(original, at)
    rt.run_queued(fork_id)
    assert audit(rt.store).violations == []

    edited = raw_execute(
        db_url,
        "UPDATE tenure_events SET attempt = attempt + 5 WHERE run_id = ? AND sequence = ?",
        original,
        2,
    )
    assert edited == 1
    found = audit(rt.store).violations
    assert any(fork_id in v and "differs from the original at sequence 2" in v for v in found), (
        found
    )

    look = next(  # the fork's own look, after its copy
        e.sequence for e in rt.events(fork_id)[at:] if e.payload.get("name") == "look"
    )
    payload = dict(rt.events(fork_id)[look].payload)
    payload["idempotency_key"] = f"{original}:{look - 1}"
    import json

    raw_execute(
        db_url,
        "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = ?",
        json.dumps(payload),
        fork_id,
        look,
    )
    found = audit(rt.store).violations
    assert any("a fork's own call under another run's key" in v for v in found), found


def test_a_run_waiting_for_a_person_can_be_forked_and_stays_waiting(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()

    @rt.tool(effect=WRITE, requires_approval=True)
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    run_id = rt.enqueue(
        RunRequest(
            prompt="refund",
            model="scripted",
            tools=["refund"],
            script=[{"call": [{"tool": "refund", "args": {"amount": 3}}]}, {"say": "done"}],
        )
    )
    waiting = rt.run_queued(run_id)
    assert waiting is not None and waiting.outcome is Outcome.AWAITING_APPROVAL
    before = snapshot(rt, run_id)
    asked = next(e.sequence for e in rt.events(run_id) if e.kind is EventKind.LLM)
    fork_id = rt.fork(run_id, asked)  # from the turn that asked: the model is asked again
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.AWAITING_APPROVAL
    rt.approve(fork_id, True, decided_by="ana")
    done = rt.run_queued(fork_id)
    assert done is not None and done.outcome is Outcome.COMPLETED
    assert snapshot(rt, run_id) == before  # the original still waits, untouched
    report = audit(rt.store)
    assert report.violations == [], report.violations


def test_an_agent_functions_interrupted_write_with_a_probe_forks_in_doubt(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(max_requeues=0)
    payments = Payments()

    def check(ctx: tenure.ToolContext, amount: int) -> Probe:
        if ctx.idempotency_key in payments.keys:
            return Probe.done({"paid": amount})
        return Probe.not_done()

    @rt.tool(effect=WRITE, timeout=2, probe=check)
    def pay(ctx: tenure.ToolContext, amount: int) -> dict[str, int]:
        payments.keys.append(ctx.idempotency_key)
        if len(payments.keys) == 1:
            raise tenure.RetryableError("no answer", failure_class=FailureClass.TIMEOUT)
        return {"paid": amount}

    @rt.agent
    def buy(ctx: tenure.AgentContext) -> Any:
        ctx.now()
        return ctx.tool("pay", amount=9)

    run_id = rt.enqueue(RunRequest(agent="buy", input={}))
    rt.run_queued(run_id)
    dead = rt.status(run_id)
    assert dead is not None and dead.is_dead_letter and dead.pending_effect is WRITE
    last = rt.events(run_id)[-1].sequence
    plan = rt.fork_plan(run_id, last)
    assert plan.in_doubt is not None and plan.in_doubt["idempotency_key"] == f"{run_id}:1"
    fork_id = rt.fork(run_id, last)
    result = rt.run_queued(fork_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    assert payments.keys == [f"{run_id}:1"]  # asked of the probe: it happened, not paid again
    report = audit(rt.store, max_requeues=0)
    assert report.violations == [], report.violations


def test_a_fork_never_takes_over_the_originals_children(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()

    @rt.agent
    def reader(ctx: tenure.AgentContext, topic: str) -> str:
        return f"read {topic}"

    @rt.agent
    def parent(ctx: tenure.AgentContext) -> str:
        note = ctx.now().isoformat()
        return f"{ctx.wait(ctx.child(agent='reader', input={'topic': 'x'}))} after {note}"

    original = rt.enqueue(RunRequest(agent="parent", input={}, model="scripted"))
    rt.work(concurrency=1, burst=True)
    assert rt.status(original).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    (child_step,) = [
        e for e in rt.events(original)
        if e.kind is EventKind.STEP and e.payload.get("step") == "child"
    ]  # fmt: skip
    with pytest.raises(ForkRefused, match="cannot take over the original's children"):
        rt.fork(original, at=child_step.sequence + 1)
    assert len(rt.runs()) == 2  # nothing stored
    fork = rt.fork(original, at=child_step.sequence)
    rt.work(concurrency=1, burst=True)
    done = rt.status(fork)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    (own,) = rt.runs(parent=fork)  # the fork's own child, under its own key
    assert own.idempotency_key == f"{fork}:{child_step.payload['position']}"
    assert len(rt.runs(parent=original)) == 1
    report = audit(rt.store)
    assert report.ok, report.summary()
