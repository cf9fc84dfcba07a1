"""One budget for a run tree (SPEC §21) through the runtime: every model call of a run with
`max_tokens` / `max_cost` goes through its tree's ledger in the store.

Some tests point another run at a run's ledger by reserving on it directly (store API,
under that other run's own lease), as a child on another worker does; the last ones spend a
root's budget through real child runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus, TerminationReason
from tenure.store import Lease

MakeRuntime = Callable[..., tenure.Runtime]
SAY = {"say": "ok", "usage": {"input_tokens": 7, "output_tokens": 3}}


def _agent(rt: tenure.Runtime) -> None:
    @rt.agent
    def asks(ctx: tenure.AgentContext) -> str:
        return ctx.model("hello").text or ""


def _request(kind: str, **fields: Any) -> RunRequest:
    if kind == "agent":
        return RunRequest(agent="asks", input={}, model="scripted", script=[SAY], **fields)
    return RunRequest(prompt="hello", model="scripted", script=[SAY], **fields)


def _other_run(rt: tenure.Runtime) -> Lease:
    """Another running run, held by another worker: what a child of the tree will be."""
    run_id = rt.enqueue(RunRequest(prompt="other", model="scripted", script=[SAY]))
    claimed = rt.store.claim_run(run_id, "worker:elsewhere", 30)
    assert claimed is not None
    return claimed.lease


@pytest.mark.parametrize("kind", ["loop", "agent"])
def test_a_runs_calls_are_spent_on_its_trees_ledger(make_runtime: MakeRuntime, kind: str) -> None:
    rt = make_runtime()
    _agent(rt)
    result = rt.run(_request(kind, max_tokens=1000, max_cost=2))  # a whole number of USD
    assert result.outcome is Outcome.COMPLETED
    budget = rt.budget(result.run_id)
    assert budget is not None
    assert (budget.spent_tokens, budget.reserved_tokens) == (10, 0)
    assert (budget.max_tokens, budget.max_cost) == (1000, 2.0)


def test_a_run_without_a_budget_has_no_ledger(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    result = rt.run(_request("loop"))
    assert result.outcome is Outcome.COMPLETED
    assert rt.budget(result.run_id) is None


@pytest.mark.parametrize("kind", ["loop", "agent"])
def test_a_tree_spent_elsewhere_ends_the_run_at_its_next_call(
    make_runtime: MakeRuntime, kind: str
) -> None:
    rt = make_runtime()
    _agent(rt)
    run_id = rt.enqueue(_request(kind, max_tokens=100))
    other = _other_run(rt)
    grant = rt.store.reserve_budget(run_id, other, (100, None), 50, 0.0, 60)
    assert grant.reservation is not None
    rt.store.settle_budget(run_id, grant.reservation, 100, 0.0)
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.BUDGET_EXHAUSTED
    assert not [e for e in rt.events(run_id) if e.kind is EventKind.LLM]  # never called


@pytest.mark.parametrize("kind", ["loop", "agent"])
def test_calls_in_flight_holding_the_rest_make_the_call_wait(
    make_runtime: MakeRuntime, kind: str
) -> None:
    """The tree's budget is not spent, only held by a call in flight elsewhere: the run
    waits for it to settle instead of ending."""
    rt = make_runtime()
    _agent(rt)
    run_id = rt.enqueue(_request(kind, max_tokens=100))
    other = _other_run(rt)
    held = rt.store.reserve_budget(run_id, other, (100, None), 100, 0.0, 60)
    assert held.reservation is not None
    results: list[Any] = []
    waiting = threading.Thread(target=lambda: results.append(rt.run_queued(run_id)))
    waiting.start()
    deadline = time.monotonic() + 10
    while (found := rt.status(run_id)) is not None and found.status is RunStatus.QUEUED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    rt.store.settle_budget(run_id, held.reservation, 20, 0.0)  # used 20 of it
    waiting.join(15)
    assert results and results[0].outcome is Outcome.COMPLETED
    budget = rt.budget(run_id)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (30, 0)


def test_held_longer_than_a_segment_waits_parks_the_run_uncharged(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(lease_seconds=0.3)  # waits in place at most 0.1 s
    run_id = rt.enqueue(_request("loop", max_tokens=100))
    other = _other_run(rt)
    held = rt.store.reserve_budget(run_id, other, (100, None), 100, 0.0, 60)
    assert held.reservation is not None
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    parked = [e for e in rt.events(run_id) if e.kind is EventKind.THROTTLED]
    assert [e.payload["why"] for e in parked] == ["budget"]


def test_a_failed_call_gives_its_reservation_back(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    script = [{"fail": "timeout", "attempts": [0]}, SAY]
    run_id = rt.enqueue(RunRequest(prompt="x", model="scripted", script=script, max_tokens=100))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    budget = rt.budget(run_id)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (0, 0)


def test_children_spend_from_their_roots_budget_and_the_parent_sees_it_spent(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    _agent(rt)

    @rt.agent
    def fan(ctx: tenure.AgentContext, n: int) -> list[str]:
        handles = ctx.map("asks", [{} for _ in range(n)], script=[SAY])
        found = ctx.gather(*handles, return_exceptions=True)
        return [f.reason if isinstance(f, tenure.ChildFailed) else "ok" for f in found]

    root = rt.enqueue(RunRequest(agent="fan", input={"n": 5}, model="scripted", max_tokens=25))
    rt.work(concurrency=1, burst=True)
    run = rt.status(root)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    # Each child's call uses 10 tokens: three are made (0, 10, 20 spent before each: each
    # leaves some of the 25), then the tree's budget is spent and the next call anywhere
    # ends its run `budget_exhausted`; the parent sees that reason.
    assert run.output is not None and sorted(json.loads(run.output)) == [
        "budget_exhausted", "budget_exhausted", "ok", "ok", "ok",
    ]  # fmt: skip
    children = rt.runs(parent=root)
    budget = rt.budget(root)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (30, 0)
    for child in children:
        assert rt.budget(child.id) == budget  # every child reads its root's ledger
    ended = [c for c in children if c.termination_reason is TerminationReason.BUDGET_EXHAUSTED]
    assert len(ended) == 2


def test_a_child_with_a_budget_of_its_own_is_refused(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    _agent(rt)

    @rt.agent
    def greedy(ctx: tenure.AgentContext) -> None:
        ctx.child(agent="asks", input={}, script=[SAY], max_tokens=10_000)

    result = rt.run(RunRequest(agent="greedy", input={}, model="scripted", max_tokens=25))
    run = rt.status(result.run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert "spends from its tree's budget" in run.error
    assert rt.runs(parent=result.run_id) == []
