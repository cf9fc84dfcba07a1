"""SPEC §21 races on the store, both dialects: a parent's write that sets it waiting for
its children against the transaction that settles its last child, started at the same
instant, round after round. Whichever commits first, the parent never ends up waiting for
children that have all ended (nothing would wake it)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from tenure._requests import new_run_id
from tenure._types import RunStatus, TerminationReason
from tenure.store import Lease, NewRun, Settlement, Store

from .helpers import REQUEST, completed, enqueue, new_run
from .test_races import ROUNDS, race


def _claim(store: Store, run_id: str, owner: str) -> Lease:
    claimed = store.claim_run(run_id, owner, 30)
    assert claimed is not None
    return claimed.lease


def test_the_last_child_settling_as_the_parent_goes_waiting_always_wakes_it(
    store: Store,
) -> None:
    for i in range(ROUNDS):
        parent = new_run()
        store.enqueue(parent)
        parent_lease = _claim(store, parent.run_id, f"worker:p{i}")
        children = [
            dataclasses.replace(
                new_run(),
                parent_id=parent.run_id,
                root_id=parent.run_id,
                idempotency_key=f"{parent.run_id}:{n}",
            )
            for n in range(2)
        ]
        store.enqueue_many(children)
        first, last = (_claim(store, c.run_id, f"worker:c{i}") for c in children)
        assert store.settle(first, completed()) is not None
        ids = [c.run_id for c in children]
        waited, settled = race(
            lambda lease=parent_lease, ids=ids: store.wait_for_children(lease, ids, None),
            lambda lease=last: store.settle(lease, completed()),
        )
        assert settled is not None
        run = store.get_run(parent.run_id)
        assert run is not None
        # Waiting with both children ended would strand it: never.
        assert run.status is not RunStatus.WAITING_FOR_CHILDREN, (waited, run)
        if waited is False:  # the child settled first: the parent goes on, still running
            assert run.status is RunStatus.RUNNING and run.claimed_by == f"worker:p{i}"
        else:  # the parent waited first: the child's settle woke it
            assert waited and run.status is RunStatus.QUEUED and run.waiting is None


@pytest.mark.parametrize("unawaited", [0, 1], ids=["waits-for-all", "waits-for-some"])
def test_the_last_two_children_ending_at_once_wake_their_parent_exactly_once(
    store: Store, unawaited: int
) -> None:
    """A parent waits for two children (all it has, or beside one it does not wait for);
    the end of one stalls between its statement (its trigger found the other still going:
    no wake) and its commit, while the other ends. Whichever way they take turns, the
    parent is woken once: never by neither (each deciding on a read in which the other is
    still going), never twice."""
    listener = _listen(store)
    hook = store._after_settle  # type: ignore[attr-defined]
    stalling: list[int] = []
    stalled, resume = threading.Event(), threading.Event()

    def stall() -> None:
        if threading.get_ident() in stalling:
            stalled.set()
            assert resume.wait(10)
        hook()

    store._after_settle = stall  # type: ignore[attr-defined]
    try:
        for _ in range(3):
            stalling.clear()
            stalled.clear()
            resume.clear()
            parent = enqueue(store, queue="parents")
            held = store.claim_run(parent, "worker:p", 30)
            assert held is not None
            kids = [
                store.enqueue(NewRun(new_run_id(), "kids", REQUEST, None, parent_id=parent))[0]
                for _ in range(2 + unawaited)
            ]
            assert store.wait_for_children(held.lease, kids[:2], None)
            first, second = (store.claim_run(k, f"worker:{k}", 30) for k in kids[:2])
            assert first is not None and second is not None
            _notified(listener, "parents")  # the parent's enqueue
            results: dict[str, Any] = {}

            def settle_stalled(lease: Lease = first.lease, into: dict[str, Any] = results) -> None:
                stalling.append(threading.get_ident())
                into["first"] = store.settle(lease, completed())

            def settle_other(lease: Lease = second.lease, into: dict[str, Any] = results) -> None:
                into["second"] = store.settle(lease, completed())

            t0 = threading.Thread(target=settle_stalled)
            t0.start()
            assert stalled.wait(10)
            t1 = threading.Thread(target=settle_other)
            t1.start()
            # The other end runs its trigger now, or waits for the stalled one's lock: either
            # way it is given time to decide before the stalled one commits.
            t1.join(0.5)
            resume.set()
            for t in (t0, t1):
                t.join(10)
                assert not t.is_alive()
            assert results["first"] is not None and results["second"] is not None
            run = store.get_run(parent)
            assert run is not None and run.status is RunStatus.QUEUED, run
            if listener is not None:
                assert _notified(listener, "parents") == 1
            assert store.cancel(parent)  # out of the next round's way (and its other child)
    finally:
        store._after_settle = hook  # type: ignore[attr-defined]
        if listener is not None:
            listener.close()


def _listen(store: Store) -> Any:
    """A connection listening for PostgreSQL's notifications (None on SQLite, which has
    none): each wake of a parent sends one, with the parent's queue."""
    if not store.url.startswith("postgresql"):
        return None
    import psycopg

    conn = psycopg.connect(store.url, autocommit=True)
    conn.execute("LISTEN tenure_runs")
    return conn


def _notified(conn: Any, queue: str) -> int:
    """How many notifications named `queue` arrived since the last call (0 without a
    listener)."""
    if conn is None:
        return 0
    return sum(1 for n in conn.notifies(timeout=0.3) if n.payload == queue)


def test_a_child_redriven_while_its_parent_goes_waiting_for_another_never_holds_it(
    store: Store,
) -> None:
    """The parent goes waiting for its second child only (its first is dead-lettered: not
    going, so the parent waits for every child still going) and stalls between its lock
    and its write; the first is redriven meanwhile. Whichever way they take turns, the
    parent is woken when the second ends, although the first, which it does not wait
    for, is going again."""
    hook = store._before_wait  # type: ignore[attr-defined]
    stalled, resume = threading.Event(), threading.Event()

    def stall() -> None:
        stalled.set()
        assert resume.wait(10)
        hook()

    store._before_wait = stall  # type: ignore[attr-defined]
    try:
        parent = enqueue(store, queue="parents")
        held = store.claim_run(parent, "worker:p", 30)
        assert held is not None
        first, second = (
            store.enqueue(NewRun(new_run_id(), "kids", REQUEST, None, parent_id=parent))[0]
            for _ in range(2)
        )
        dead = Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE, error="x")
        assert store.settle(_claim(store, first, "worker:a"), dead) is not None
        results: dict[str, Any] = {}

        def wait() -> None:
            results["wait"] = store.wait_for_children(held.lease, [second], None)

        def redrive() -> None:
            results["redrive"] = store.redrive(first, False)

        waiting = threading.Thread(target=wait)
        waiting.start()
        assert stalled.wait(10)
        redriving = threading.Thread(target=redrive)
        redriving.start()
        redriving.join(0.5)  # it goes first, or waits for the stalled parent's lock
        resume.set()
        for t in (waiting, redriving):
            t.join(10)
            assert not t.is_alive()
    finally:
        store._before_wait = hook  # type: ignore[attr-defined]
    assert results["wait"] and results["redrive"]
    again = store.get_run(first)
    assert again is not None and again.status is RunStatus.QUEUED
    assert store.settle(_claim(store, second, "worker:b"), completed()) is not None
    run = store.get_run(parent)
    assert run is not None and run.status is RunStatus.QUEUED, run
