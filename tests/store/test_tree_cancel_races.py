"""A tree's cancel against its child's own write at the same moment, on PostgreSQL (SPEC §21).

The cancel of a parent locks the parent's row (its UPDATE), then its trigger writes each
child's `cancelled` event and cancels the children (their rows). A child that settles
locks its own row, then its trigger locks the parent's (to wake it); a child's step locks
its own row only. The cancel is stalled between its two row locks, with the children's
sequences already read, by a test trigger on the events table that waits for an advisory
lock the test holds (the store has no hook inside a trigger); the child's write goes in
meanwhile; then the cancel goes on. Whatever the order, both must end correctly and no
error may surface: the child cancelled, or completed before, with one event per sequence.

SQLite takes one writer at a time: neither interleaving exists there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tenure._types import EventKind, RunStatus
from tenure.store import Claimed, NewRun, Store, open_store

from .helpers import completed, new_run, step

STALL_LOCK = 42_4242
STALL_SQL = f"""
CREATE FUNCTION test_stall_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({STALL_LOCK});
    RETURN NEW;
END;
$$;
CREATE TRIGGER test_stall_cancel BEFORE INSERT ON tenure_events FOR EACH ROW
WHEN (NEW.kind = 'cancelled' AND NEW.payload::jsonb ->> 'by' = 'parent')
EXECUTE FUNCTION test_stall_cancel();
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
            gate.execute("DROP TRIGGER test_stall_cancel ON tenure_events")
            gate.execute("DROP FUNCTION test_stall_cancel()")
            store.close()


def tree(store: Store) -> tuple[str, str, Claimed]:
    """A parent (queued) and its child, claimed by a worker."""
    parent = new_run()
    store.enqueue_many([parent])
    child = _child_of(parent.run_id)
    store.enqueue_many([child])
    claimed = store.claim_run(child.run_id, "worker:c", 30)
    assert claimed is not None
    return parent.run_id, child.run_id, claimed


def _child_of(parent_id: str) -> NewRun:
    made = new_run()
    return NewRun(
        made.run_id,
        made.queue,
        made.request,
        f"{parent_id}:0",
        events=made.events,
        parent_id=parent_id,
        root_id=parent_id,
    )


def waiting_on(gate: psycopg.Connection[Any], locktype: str) -> bool:
    row = gate.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s", (locktype,)
    ).fetchone()
    return bool(row and row[0])


def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.01)


def stalled_cancel(
    store: Store, gate: psycopg.Connection[Any], parent: str
) -> tuple[threading.Thread, dict[str, Any]]:
    """The parent's cancel, started and stalled inside its trigger (parent locked, the
    children's sequences read, the children not yet locked)."""
    gate.execute("SELECT pg_advisory_lock(%s)", (STALL_LOCK,))
    outcome: dict[str, Any] = {}

    def cancel() -> None:
        try:
            outcome["cancelled"] = store.cancel(parent)
        except Exception as exc:  # what the test is about: surfaced below
            outcome["raised"] = exc

    thread = threading.Thread(target=cancel)
    thread.start()
    until(lambda: waiting_on(gate, "advisory"), "stalled in the cancel's trigger")
    return thread, outcome


def sequences_whole(store: Store, run_id: str) -> None:
    events = store.events(run_id)
    assert [e.sequence for e in events] == list(range(len(events)))


def test_a_child_step_inside_a_stalled_tree_cancel(
    pg: tuple[Store, psycopg.Connection[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """The child records a step while the cancel has read its sequence and not yet locked
    it: the cancel's event for the child must not take the step's sequence."""
    store, gate = pg
    parent, child, claimed = tree(store)
    thread, outcome = stalled_cancel(store, gate, parent)
    assert store.record_step(claimed.lease, 30, [step(text="a step")]) is not None
    gate.execute("SELECT pg_advisory_unlock(%s)", (STALL_LOCK,))
    thread.join(30)
    assert "raised" not in outcome, outcome.get("raised")
    assert outcome["cancelled"] is True
    run = store.get_run(child)
    assert run is not None and run.status is RunStatus.CANCELLED
    kinds = [e.kind for e in store.events(child)]
    assert kinds[-2:] == [EventKind.LLM, EventKind.CANCELLED]
    sequences_whole(store, child)
    # The race happened: the cancel's first try lost the child's sequence, and was retried.
    assert "tenure_events_pkey" in caplog.text


def test_a_child_settle_inside_a_stalled_tree_cancel(
    pg: tuple[Store, psycopg.Connection[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """The child settles while the cancel holds the parent: the child's trigger waits for
    the parent, the cancel then waits for the child: a deadlock, which the server breaks
    and the store retries. Both end correctly, and nothing raises."""
    store, gate = pg
    parent, child, claimed = tree(store)
    thread, outcome = stalled_cancel(store, gate, parent)
    settled: dict[str, Any] = {}

    def settle() -> None:
        try:
            settled["sequences"] = store.settle(claimed.lease, completed("child's answer"))
        except Exception as exc:  # surfaced below
            settled["raised"] = exc

    settling = threading.Thread(target=settle)
    settling.start()
    # The child's row is the settle's; its trigger now waits for the parent's.
    until(lambda: waiting_on(gate, "transactionid") or waiting_on(gate, "tuple"), "blocked")
    gate.execute("SELECT pg_advisory_unlock(%s)", (STALL_LOCK,))
    thread.join(30)
    settling.join(30)
    assert "raised" not in outcome, outcome.get("raised")
    assert "raised" not in settled, settled.get("raised")
    assert outcome["cancelled"] is True
    run = store.get_run(child)
    assert run is not None
    if settled["sequences"] is None:  # the cancel came first: the settle found it cancelled
        assert run.status is RunStatus.CANCELLED
    else:
        assert run.status is RunStatus.COMPLETED and run.output == "child's answer"
    top = store.get_run(parent)
    assert top is not None and top.status is RunStatus.CANCELLED
    sequences_whole(store, child)
    sequences_whole(store, parent)
    assert "deadlock detected" in caplog.text  # broken by the server, retried by the store
