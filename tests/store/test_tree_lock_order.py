"""A child's end and its parent's end lock the two rows in one order, on PostgreSQL (SPEC §21).

A run's end has two triggers' worth of row locks to take besides its own row: its parent's
(to wake it) and its children's (to cancel them). If a child's end took the child's row
first and its parent's second, while the parent's end took the parent's row first and its
children's second, the two would wait for each other: the server breaks that deadlock after
`deadlock_timeout` (a second of both stalled) by aborting one, which the store runs again.
So every statement that ends a run locks the run's parent first: a tree is locked from the
top down, whichever run ends.

SQLite takes one writer at a time: neither interleaving exists there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tenure._types import RunStatus, TerminationReason
from tenure.store import Claimed, Lease, Store, open_store

from .helpers import SHORT_LEASE, completed, expire, new_run, stale_for
from .test_tree_cancel_races import _child_of, in_thread, sequences_whole, until, waiting_on

STALL_LOCK = 42_4243
# A child's own end stalls here once its row is locked (a BEFORE ROW trigger runs on the row
# its statement has locked), before the run-ended trigger locks the parent.
STALL_SQL = f"""
CREATE FUNCTION test_stall_child_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({STALL_LOCK});
    RETURN NEW;
END;
$$;
CREATE TRIGGER test_stall_child_end BEFORE UPDATE OF status ON tenure_runs FOR EACH ROW
WHEN (OLD.parent_id IS NOT NULL AND NEW.status = 'completed')
EXECUTE FUNCTION test_stall_child_end();
"""


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Store, psycopg.Connection[Any]]]:
    store = open_store(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as gate:
        gate.execute(STALL_SQL)
        try:
            yield store, gate
        finally:
            gate.execute("SELECT pg_advisory_unlock_all()")
            store.close()


def family(store: Store) -> tuple[Claimed, Claimed]:
    """A parent and its child, each claimed by a worker of its own."""
    parent = new_run()
    store.enqueue_many([parent])
    child = _child_of(parent.run_id, 0)
    store.enqueue_many([child])
    claims = []
    for i, run in enumerate((parent, child)):
        claimed = store.claim_run(run.run_id, f"worker:{i}", 30)
        assert claimed is not None
        claims.append(claimed)
    return claims[0], claims[1]


PARENT_ENDS: dict[str, Callable[[Store, Claimed], Any]] = {
    "cancel": lambda store, parent: store.cancel(parent.lease.run_id),
    "settle": lambda store, parent: store.settle(parent.lease, completed("parent's answer")),
}


@pytest.mark.parametrize("parent_end", sorted(PARENT_ENDS))
def test_a_childs_settle_stalled_on_its_own_row_and_its_parents_end_never_deadlock(
    pg: tuple[Store, psycopg.Connection[Any]], caplog: pytest.LogCaptureFixture, parent_end: str
) -> None:
    """The child's settle is stalled between its first lock and its second; the parent's
    end starts meanwhile and blocks on a row the settle holds. Then the settle goes on. Had
    they locked in opposite orders, each would now wait for the other."""
    store, gate = pg
    parent, child = family(store)
    gate.execute("SELECT pg_advisory_lock(%s)", (STALL_LOCK,))
    settling, settle = in_thread(lambda: store.settle(child.lease, completed("child's answer")))
    until(lambda: waiting_on(gate, "advisory") == 1, "the child's settle stalled")
    ending, end = in_thread(lambda: PARENT_ENDS[parent_end](store, parent))
    until(lambda: waiting_on(gate, "transactionid", "tuple") == 1, "the parent's end blocked")
    gate.execute("SELECT pg_advisory_unlock(%s)", (STALL_LOCK,))
    for thread in (settling, ending):
        thread.join(30)
        assert not thread.is_alive()
    assert "raised" not in settle, settle.get("raised")
    assert "raised" not in end, end.get("raised")
    assert "deadlock detected" not in caplog.text
    # The settle held the first lock: it came first, and the parent's end found the child
    # ended (a cancel of the tree leaves a completed child as it is).
    assert settle["result"] is not None and end["result"]
    run = store.get_run(child.lease.run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.output == "child's answer"
    top = store.get_run(parent.lease.run_id)
    expected = RunStatus.CANCELLED if parent_end == "cancel" else RunStatus.COMPLETED
    assert top is not None and top.status is expected
    for claimed in (parent, child):
        sequences_whole(store, claimed.lease.run_id)


def _settle(store: Store, child: Claimed) -> bool:
    return store.settle(child.lease, completed("child's answer")) is not None


def _cancel(store: Store, child: Claimed) -> bool:
    return store.cancel(child.lease.run_id)


def _dead_letter(store: Store, child: Claimed) -> bool:
    seen = stale_for(store, child.lease.run_id)
    return store.dead_letter_stale(seen, TerminationReason.RETRIES_EXHAUSTED, "gave up")


def _expire_wait(store: Store, child: Claimed) -> bool:
    return store.expire_waits(10) == 1


CHILD_ENDS: dict[str, Callable[[Store, Claimed], bool]] = {
    "settle": _settle,
    "cancel": _cancel,
    "dead_letter_stale": _dead_letter,
    "expire_waits": _expire_wait,
}


@pytest.mark.parametrize("child_end", sorted(CHILD_ENDS))
def test_every_end_of_a_child_locks_its_parent_before_itself(pg_url: str, child_end: str) -> None:
    """Whatever ends the child (its worker, an operator, the reaper, an expired wait), while
    another transaction holds the parent's row the end waits for it without holding the
    child's row: the child can be locked meanwhile."""
    store = open_store(pg_url)
    try:
        lease = SHORT_LEASE if child_end == "dead_letter_stale" else 30
        parent = new_run()
        store.enqueue_many([parent])
        made = _child_of(parent.run_id, 0)
        store.enqueue_many([made])
        child = store.claim_run(made.run_id, "worker:0", lease)
        assert child is not None
        if child_end == "dead_letter_stale":
            expire()
        elif child_end == "expire_waits":
            waited = store.suspend(
                child.lease, RunStatus.WAITING_FOR_APPROVAL, {"turn": 1}, None, 0.01, ()
            )
            assert waited is not None
            time.sleep(0.05)
        _holding_the_parent(store, pg_url, parent.run_id, child, CHILD_ENDS[child_end])
        run = store.get_run(made.run_id)
        assert run is not None and run.status.is_terminal
        sequences_whole(store, made.run_id)
    finally:
        store.close()


def _holding_the_parent(
    store: Store, pg_url: str, parent_id: str, child: Claimed, end: Callable[[Store, Claimed], bool]
) -> None:
    with (
        psycopg.connect(pg_url) as holder,
        psycopg.connect(pg_url, autocommit=True) as gate,
        psycopg.connect(pg_url) as prober,
    ):
        holder.execute("SELECT 1 FROM tenure_runs WHERE id = %s FOR UPDATE", (parent_id,))
        ending, outcome = in_thread(lambda: end(store, child))
        until(lambda: waiting_on(gate, "transactionid", "tuple") == 1, "the end waited")
        locked = prober.execute(
            "SELECT id FROM tenure_runs WHERE id = %s FOR UPDATE NOWAIT", (child.lease.run_id,)
        ).fetchall()
        assert locked == [(child.lease.run_id,)]
        prober.rollback()
        holder.rollback()
        ending.join(30)
        assert not ending.is_alive()
    assert "raised" not in outcome, outcome.get("raised")
    assert outcome["result"] is True


def test_a_claim_tells_whether_the_run_has_a_parent(store: Store) -> None:
    """A batch of runs without parents settles without locking any (`settle_batch`): the
    claim says which runs have none. A lease built elsewhere does not know, and is taken as
    having one (`settle_batch_parents_first`, the safe order)."""
    lone = new_run()
    store.enqueue_many([lone])
    child = _child_of(lone.run_id, 0)
    store.enqueue_many([child])
    claimed = {c.lease.run_id: c.lease for c in store.claim("worker:0", None, 30, 5)}
    assert set(claimed) == {lone.run_id, child.run_id}
    assert claimed[lone.run_id].has_parent is False
    assert claimed[child.run_id].has_parent is True
    # Not part of the lease's identity: the same lease, however it was built.
    rebuilt = Lease(
        lone.run_id, "worker:0", claimed[lone.run_id].token, claimed[lone.run_id].attempt
    )
    assert rebuilt.has_parent is True and rebuilt == claimed[lone.run_id]
    # Both settle under their leases, each by its own statement (the child's locks its
    # parent first).
    assert store.settle(claimed[child.run_id], completed("child's answer")) is not None
    assert store.settle(claimed[lone.run_id], completed("parent's answer")) is not None
