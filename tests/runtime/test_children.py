"""Child runs and fan-out (SPEC §21) on both stores: children created once under the key
PARENT_ID:POSITION, a parent that waits without a lease or a slot and is woken by the
transaction that settles its last awaited child, failures raised as ChildFailed, and the
tree's control (cancel, dead-letter, redrive)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import ChildFailed, Outcome, RunRequest, RunStatus, TerminationReason
from tenure.audit import audit
from tenure.store import NewEvent, NewRun
from tenure.store._base import Store

MakeRuntime = Callable[..., tenure.Runtime]
DONE = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


def request(agent: str, **input: Any) -> RunRequest:
    return RunRequest(agent=agent, input=input, model="scripted", script=[{"say": "ok"}])


def children_app(make_runtime: MakeRuntime, **kwargs: Any) -> tenure.Runtime:
    rt = make_runtime(**kwargs)

    @rt.agent
    def reader(ctx: tenure.AgentContext, topic: str, fail: bool = False) -> dict[str, Any]:
        """Read about a topic.

        Args:
            topic: what to read about
            fail: raise instead of answering
        """
        if fail:
            raise ValueError(f"cannot read {topic}")
        return {"topic": topic, "words": len(topic)}

    @rt.agent
    def researcher(ctx: tenure.AgentContext, topics: list[str], catch: bool = False) -> Any:
        """Fan out to readers, then gather what they found.

        Args:
            topics: the topics to read about
            catch: return the failures instead of failing
        """
        handles = ctx.map("reader", [{"topic": t, "fail": t == "bad"} for t in topics])
        extra = ctx.child(agent="reader", input={"topic": "extra"})
        found = ctx.gather(*handles, return_exceptions=catch)
        return {
            "found": [
                f if not isinstance(f, ChildFailed) else f"failed: {f.reason}" for f in found
            ],
            "extra": ctx.wait(extra),
        }

    return rt


def assert_audited(rt: tenure.Runtime) -> None:
    report = audit(rt.store)
    assert report.ok, report.summary()


def child_steps(rt: tenure.Runtime, run_id: str) -> list[tuple[int, str, str]]:
    return [
        (e.payload["position"], e.payload["step"], e.payload["name"])
        for e in rt.events(run_id)
        if "position" in e.payload
    ]


def test_a_worker_of_concurrency_one_runs_a_parent_and_all_its_children(
    make_runtime: MakeRuntime,
) -> None:
    rt = children_app(make_runtime)
    parent = rt.enqueue(request("researcher", topics=["a", "bb", "ccc"]))
    rt.worker(concurrency=1, burst=True).run()

    run = rt.status(parent)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert json.loads(run.output or "") == {
        "found": [{"topic": t, "words": len(t)} for t in ("a", "bb", "ccc")],
        "extra": {"topic": "extra", "words": 5},
    }
    assert run.parent_id is None and run.root_id == parent
    children = rt.runs(parent=parent)
    assert len(children) == 4
    for child in children:
        assert child.status is RunStatus.COMPLETED
        assert child.parent_id == parent and child.root_id == parent
    keys = sorted(c.idempotency_key or "" for c in children)
    assert keys == sorted(f"{parent}:{p}" for p in range(4))
    assert [r.id for r in rt.runs(roots=True)] == [parent]
    assert child_steps(rt, parent) == [
        (0, "child", "reader"),
        (1, "child", "reader"),
        (2, "child", "reader"),
        (3, "child", "reader"),
        (4, "wait", "gather"),
        (5, "wait", "wait"),
    ]
    # The parent ended its first segment waiting for the three it gathers, and was claimed
    # again once woken. It may also have waited for `extra` once more: a worker commits the
    # ends of its runs in batches, and when one commit ends `ccc` (waking the parent) and
    # claims both `extra` and the parent, `extra` runs first, but its end is committed only
    # once the buffer runs dry, after the parent, which finds it still running and waits.
    by_position = {c.idempotency_key: c.id for c in children}
    gathered = [by_position[f"{parent}:{p}"] for p in range(3)]
    waits = [e.payload["children"] for e in rt.events(parent) if e.kind is tenure.EventKind.WAITING]
    assert waits in ([gathered], [gathered, [by_position[f"{parent}:3"]]]), waits
    claims = [e for e in rt.events(parent) if e.kind is tenure.EventKind.CLAIMED]
    assert len(claims) == len(waits) + 1
    tree = rt.store.tree(parent)
    assert tree[0].id == parent and len(tree) == 5
    assert_audited(rt)


def test_a_waiting_parent_holds_no_lease_and_is_woken_by_its_last_child(
    make_runtime: MakeRuntime,
) -> None:
    rt = children_app(make_runtime)
    parent = rt.enqueue(request("researcher", topics=["a", "b"]))
    first = rt.run_queued(parent)
    assert first is not None and first.outcome is Outcome.AWAITING_CHILDREN, first
    run = rt.status(parent)
    assert run is not None and run.status is RunStatus.WAITING_FOR_CHILDREN
    assert run.lease_expires is None and run.claimed_by == ""
    assert run.waiting is not None
    awaited = list(run.waiting["children"])
    gathered = sorted(rt.runs(parent=parent), key=lambda c: c.idempotency_key or "")[:2]
    assert sorted(awaited) == sorted(c.id for c in gathered)
    # One child settled: the parent still waits; the last one wakes it in its transaction.
    done = rt.run_queued(awaited[0])
    assert done is not None and done.outcome is Outcome.COMPLETED
    waiting = rt.status(parent)
    assert waiting is not None and waiting.status is RunStatus.WAITING_FOR_CHILDREN
    done = rt.run_queued(awaited[1])
    assert done is not None and done.outcome is Outcome.COMPLETED
    woken = rt.status(parent)
    assert woken is not None and woken.status is RunStatus.QUEUED and woken.waiting is None
    # Woken, it goes on to the next wait (the extra child), then completes.
    again = rt.run_queued(parent)
    assert again is not None and again.outcome is Outcome.AWAITING_CHILDREN
    extra = [c.id for c in rt.runs(parent=parent) if c.status is RunStatus.QUEUED]
    assert len(extra) == 1
    rt.run_queued(extra[0])
    last = rt.run_queued(parent)
    assert last is not None and last.outcome is Outcome.COMPLETED, last
    assert_audited(rt)


def test_a_failed_child_raises_child_failed_in_the_parent(make_runtime: MakeRuntime) -> None:
    rt = children_app(make_runtime)
    caught = rt.enqueue(request("researcher", topics=["a", "bad"], catch=True))
    failing = rt.enqueue(request("researcher", topics=["bad"]))
    rt.worker(concurrency=2, burst=True).run()

    run = rt.status(caught)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    output = json.loads(run.output or "")
    assert output["found"] == [{"topic": "a", "words": 1}, "failed: not_retryable"]

    run = rt.status(failing)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error is not None and "ChildFailed" in run.error and "cannot read bad" in run.error
    assert_audited(rt)


def test_a_child_created_before_a_crash_is_not_created_again(make_runtime: MakeRuntime) -> None:
    """The window between creating a child and recording the step: a child already holds
    the key PARENT_ID:POSITION (an earlier segment created it and died); the step finds it
    instead of creating a second."""
    rt = children_app(make_runtime)

    @rt.agent
    def one(ctx: tenure.AgentContext) -> Any:
        return ctx.wait(ctx.child(agent="reader", input={"topic": "once"}))

    parent = rt.enqueue(request("one"))
    earlier = "01900000-0000-7000-8000-000000000001"
    child = RunRequest(
        agent="reader", input={"topic": "once"}, model="scripted", idempotency_key=f"{parent}:0"
    )
    data = tenure._requests.to_json(child)
    rt.store.enqueue_many(
        [
            NewRun(
                earlier,
                "default",
                json.dumps(data),
                f"{parent}:0",
                events=(NewEvent(tenure.EventKind.REQUEST, data),),
                parent_id=parent,
                root_id=parent,
            )
        ]
    )
    rt.worker(concurrency=1, burst=True).run()
    run = rt.status(parent)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert json.loads(run.output or "") == {"topic": "once", "words": 4}
    assert [c.id for c in rt.runs(parent=parent)] == [earlier]
    assert_audited(rt)


def test_the_last_child_settling_while_the_parent_goes_waiting_never_strands_it(
    make_runtime: MakeRuntime,
) -> None:
    """The parent reads its child not done, stalls, and the child completes before the
    parent's write that would set it waiting: that write re-checks the children and the
    parent goes on in the same segment, instead of waiting for a wake that already passed."""
    rt = children_app(make_runtime)

    @rt.agent
    def one(ctx: tenure.AgentContext) -> Any:
        return ctx.wait(ctx.child(agent="reader", input={"topic": "race"}))

    store: Store = rt.store
    read = store.children_of
    stalled = threading.Event()

    def children_of(parent: str, ids: Any) -> Any:
        states = read(parent, ids)
        if not stalled.is_set():
            stalled.set()
            (child,) = ids
            finisher = threading.Thread(target=rt.run_queued, args=(child,))
            finisher.start()
            finisher.join()
        return states

    store.children_of = children_of  # type: ignore[method-assign]
    parent = rt.enqueue(request("one"))
    result = rt.run_queued(parent)
    assert stalled.is_set()
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    assert json.loads(result.output or "") == {"topic": "race", "words": 4}
    assert_audited(rt)


def test_cancelling_a_run_cancels_its_whole_tree(make_runtime: MakeRuntime) -> None:
    rt = children_app(make_runtime)

    @rt.agent
    def grand(ctx: tenure.AgentContext) -> Any:
        return ctx.wait(ctx.child(agent="researcher", input={"topics": ["x", "y"]}))

    root = rt.enqueue(request("grand"))
    rt.run_queued(root)
    (middle,) = rt.runs(parent=root)
    rt.run_queued(middle.id)
    leaves = rt.runs(parent=middle.id)
    assert len(leaves) == 3
    rt.run_queued(leaves[0].id)
    assert rt.cancel(root)
    tree = rt.store.tree(root)
    assert len(tree) == 5
    by_id = {r.id: r for r in tree}
    assert by_id[root].status is RunStatus.CANCELLED
    assert by_id[middle.id].status is RunStatus.CANCELLED
    statuses = sorted(str(by_id[leaf.id].status) for leaf in leaves)
    assert statuses == ["cancelled", "cancelled", "completed"]
    cancelled = [e for e in rt.events(middle.id) if e.kind is tenure.EventKind.CANCELLED]
    assert [e.payload for e in cancelled] == [{"by": "parent", "parent_id": root}]
    assert_audited(rt)


def test_a_dead_lettered_parent_takes_its_children_with_it(make_runtime: MakeRuntime) -> None:
    rt = children_app(make_runtime)

    @rt.agent
    def careless(ctx: tenure.AgentContext) -> Any:
        ctx.child(agent="reader", input={"topic": "left"})
        raise ValueError("the parent fails")

    parent = rt.enqueue(request("careless"))
    result = rt.run_queued(parent)
    assert result is not None and result.outcome is Outcome.FAILED
    (child,) = rt.runs(parent=parent)
    assert child.status is RunStatus.CANCELLED
    assert_audited(rt)


def test_a_redriven_child_that_completes_wakes_the_parent_still_waiting(
    make_runtime: MakeRuntime,
) -> None:
    rt = children_app(make_runtime)
    flaky = {"fail": True}

    @rt.agent
    def sometimes(ctx: tenure.AgentContext) -> str:
        if flaky["fail"]:
            raise ValueError("not yet")
        return "done"

    @rt.agent
    def both(ctx: tenure.AgentContext) -> Any:
        a = ctx.child(agent="sometimes", input={})
        b = ctx.child(agent="reader", input={"topic": "b"})
        return ctx.gather(a, b, return_exceptions=True)

    parent = rt.enqueue(request("both"))
    rt.run_queued(parent)
    a, b = sorted(rt.runs(parent=parent), key=lambda r: r.idempotency_key or "")
    rt.run_queued(a.id)  # dead-letters: the parent still waits for b
    failed = rt.status(a.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert rt.redrive(a.id)
    rt.run_queued(b.id)  # b done, a queued again: the parent still waits for a
    waiting = rt.status(parent)
    assert waiting is not None and waiting.status is RunStatus.WAITING_FOR_CHILDREN
    flaky["fail"] = False
    rt.run_queued(a.id)
    woken = rt.status(parent)
    assert woken is not None and woken.status is RunStatus.QUEUED
    rt.run_queued(parent)
    run = rt.status(parent)
    assert run is not None and json.loads(run.output or "") == ["done", {"topic": "b", "words": 1}]
    assert_audited(rt)


def test_a_redriven_child_the_parent_no_longer_waits_for_does_not_hold_it_back(
    make_runtime: MakeRuntime,
) -> None:
    """The parent caught its first child's failure and waits for a second, the only child
    still going: every child's end then only asks whether a child is still going. The
    first is redriven meanwhile; the second's end must still wake the parent, although a
    child it does not wait for is going again."""
    rt = children_app(make_runtime)

    @rt.agent
    def failing(ctx: tenure.AgentContext) -> str:
        raise ValueError("not this time")

    @rt.agent
    def second_try(ctx: tenure.AgentContext) -> Any:
        first = ctx.child(agent="failing", input={})
        with contextlib.suppress(ChildFailed):
            ctx.wait(first)
        return ctx.wait(ctx.child(agent="reader", input={"topic": "second"}))

    parent = rt.enqueue(request("second_try"))
    rt.run_queued(parent)
    (first,) = rt.runs(parent=parent)
    rt.run_queued(first.id)  # dead-lettered: wakes the parent
    rt.run_queued(parent)  # catches it, waits for the second child
    second = next(r for r in rt.runs(parent=parent) if r.id != first.id)
    assert rt.redrive(first.id)
    rt.run_queued(second.id)
    woken = rt.status(parent)
    assert woken is not None and woken.status is RunStatus.QUEUED, woken
    again = rt.status(first.id)
    assert again is not None and again.status is RunStatus.QUEUED
    rt.run_queued(parent)
    run = rt.status(parent)
    assert run is not None and json.loads(run.output or "") == {"topic": "second", "words": 6}
    gone = rt.status(first.id)  # the parent's end took the child it left going with it
    assert gone is not None and gone.status is RunStatus.CANCELLED
    assert_audited(rt)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ctx: ctx.child(agent="nope", input={}), "nope"),
        (lambda ctx: ctx.child(agent="reader", input={"topic": 1, "x": 2}), "invalid input"),
        (
            lambda ctx: ctx.child(agent="reader", input={"topic": "t"}, idempotency_key="k"),
            "PARENT_ID:POSITION",
        ),
        (lambda ctx: ctx.wait("not a handle"), "handle"),
    ],
)
def test_a_child_asked_wrongly_fails_the_parent_with_one_line(
    make_runtime: MakeRuntime, call: Callable[[tenure.AgentContext], Any], message: str
) -> None:
    rt = children_app(make_runtime)

    @rt.agent
    def wrong(ctx: tenure.AgentContext) -> Any:
        return call(ctx)

    parent = rt.enqueue(request("wrong"))
    result = rt.run_queued(parent)
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(parent)
    assert run is not None and message in run.error and "\n" not in run.error
    assert rt.runs(parent=parent) == []


def test_a_child_of_an_ended_parent_is_not_redriven(make_runtime: MakeRuntime) -> None:
    rt = children_app(make_runtime)
    parent = rt.enqueue(request("researcher", topics=["bad"], catch=True))
    rt.worker(concurrency=1, burst=True).run()
    ended = rt.status(parent)
    assert ended is not None and ended.status is RunStatus.COMPLETED
    (failed,) = [c for c in rt.runs(parent=parent) if c.status is RunStatus.FAILED]
    assert failed.is_dead_letter
    # It would run on under a parent that has ended, which nothing would ever wait for.
    assert not rt.redrive(failed.id)
    again = rt.status(failed.id)
    assert again is not None and again.status is RunStatus.FAILED
    assert_audited(rt)


def test_the_audit_finds_a_broken_tree(make_runtime: MakeRuntime, db_url: str) -> None:
    """Rows tenure never writes, planted behind its back: a child queued under a parent
    that has ended, and a parent waiting for children that have all ended."""
    from tests._raw import raw_execute

    rt = children_app(make_runtime)
    ended = rt.enqueue(request("reader", topic="x"))
    rt.run_queued(ended)
    orphan = rt.enqueue(request("reader", topic="y"))
    sql = "UPDATE tenure_runs SET parent_id = ?, root_id = ? WHERE id = ?"
    assert raw_execute(db_url, sql, ended, ended, orphan) == 1
    stranded = rt.enqueue(request("reader", topic="z"))
    waiting = json.dumps({"kind": "children", "children": [ended]})
    sql = "UPDATE tenure_runs SET status = 'waiting_for_children', waiting = ? WHERE id = ?"
    assert raw_execute(db_url, sql, waiting, stranded) == 1
    report = audit(rt.store)
    problems = [v for v in report.violations if "parent" in v or "wake" in v]
    assert sorted(problems) == sorted(
        [
            f"run {orphan}: queued, but its parent {ended} has ended (completed)",
            f"run {stranded}: waits for children that have all ended: nothing will wake it",
        ]
    )


def test_a_parent_waiting_for_children_is_counted_in_its_queue(
    make_runtime: MakeRuntime,
) -> None:
    rt = children_app(make_runtime)
    parent = rt.enqueue(request("researcher", topics=["a"]))
    first = rt.run_queued(parent)
    assert first is not None and first.outcome is Outcome.AWAITING_CHILDREN, first
    [queue] = rt.queues()
    # The parent waits (no lease, no slot); its two children are queued.
    assert (queue.queued, queue.running, queue.waiting, queue.children) == (2, 0, 0, 1)
    assert queue.to_json()["waiting_for_children"] == 1
    rt.worker(concurrency=1, burst=True).run()
    [queue] = rt.queues()
    assert (queue.queued, queue.children) == (0, 0)
