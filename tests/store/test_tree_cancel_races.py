"""A tree's cancel against its children's own writes at the same moment, on PostgreSQL
(SPEC §21).

The cancel of a parent locks the parent's row (its UPDATE), then its trigger cancels the
children still going, one statement that locks each child, numbers the child's `cancelled`
event from the row it locked and writes that event, child after child. A child that
settles locks the parent's row first (its trigger wakes the parent), then its own; a
child's step locks its own row only. The cancel is stalled at the first child's `cancelled`
event, by a test trigger on the events table that waits for an advisory lock the test holds
(the store has no hook inside a trigger): the parent is locked, one child is locked and
numbered, the other is not yet (what the cancel knows of it is its statement's snapshot).
Each child's write goes in meanwhile, lands or waits for the cancel; then the cancel goes
on. Whatever the order, every write must end correctly and no error may surface: each child
cancelled after what it wrote, or completed before, with one event per sequence.

SQLite takes one writer at a time: neither interleaving exists there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
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


def tree(store: Store) -> tuple[str, list[Claimed]]:
    """A parent (queued) and its two children, each claimed by a worker."""
    parent = new_run()
    store.enqueue_many([parent])
    children = [_child_of(parent.run_id, i) for i in range(2)]
    store.enqueue_many(children)
    claims = []
    for i, child in enumerate(children):
        claimed = store.claim_run(child.run_id, f"worker:{i}", 30)
        assert claimed is not None
        claims.append(claimed)
    return parent.run_id, claims


def _child_of(parent_id: str, index: int) -> NewRun:
    made = new_run()
    return NewRun(
        made.run_id,
        made.queue,
        made.request,
        f"{parent_id}:{index}",
        events=made.events,
        parent_id=parent_id,
        root_id=parent_id,
    )


def waiting_on(gate: psycopg.Connection[Any], *locktypes: str) -> int:
    """How many sessions of this test's database wait for a lock of these types."""
    row = gate.execute(
        "SELECT count(DISTINCT l.pid) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)"
        " WHERE NOT l.granted AND l.locktype = ANY(%s) AND a.datname = current_database()",
        (list(locktypes),),
    ).fetchone()
    return int(row[0]) if row else 0


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.01)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`fn` started on its own thread; what it returned (`"result"`) or raised."""
    outcome: dict[str, Any] = {}

    def go() -> None:
        try:
            outcome["result"] = fn()
        except Exception as exc:  # what the tests are about: surfaced by them
            outcome["raised"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    return thread, outcome


def stalled_cancel(
    store: Store, gate: psycopg.Connection[Any], parent: str
) -> tuple[threading.Thread, dict[str, Any]]:
    """The parent's cancel, started and stalled inside its trigger, at the first child's
    `cancelled` event."""
    gate.execute("SELECT pg_advisory_lock(%s)", (STALL_LOCK,))
    thread, outcome = in_thread(lambda: store.cancel(parent))
    until(lambda: waiting_on(gate, "advisory") > 0, "stalled in the cancel's trigger")
    return thread, outcome


def finish(gate: psycopg.Connection[Any], *threads: threading.Thread) -> None:
    gate.execute("SELECT pg_advisory_unlock(%s)", (STALL_LOCK,))
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()


def sequences_whole(store: Store, run_id: str) -> None:
    events = store.events(run_id)
    assert [e.sequence for e in events] == list(range(len(events)))


def test_children_steps_inside_a_stalled_tree_cancel(
    pg: tuple[Store, psycopg.Connection[Any]],
) -> None:
    """Each child records a step while the cancel is under way: a child the cancel has not
    locked yet lands its step first, and its `cancelled` event must come after that step
    (numbered from the child as the cancel locked it, not as its snapshot saw it); a child
    it has locked waits, and finds itself cancelled."""
    store, gate = pg
    parent, claims = tree(store)
    cancelling, cancel = stalled_cancel(store, gate, parent)
    steps = [
        in_thread(partial(store.record_step, c.lease, 30, [step(text="a step")])) for c in claims
    ]

    def each_landed_or_waiting() -> bool:  # for a row the cancel holds
        done = sum(bool(outcome) for _, outcome in steps)
        return done + waiting_on(gate, "transactionid", "tuple") == len(steps)

    until(each_landed_or_waiting, "each step landed or waiting")
    finish(gate, cancelling, *(s[0] for s in steps))
    assert "raised" not in cancel, cancel.get("raised")
    assert cancel["result"] is True
    landed = 0
    for claimed, (_, stepped) in zip(claims, steps, strict=True):
        assert "raised" not in stepped, stepped.get("raised")
        child = claimed.lease.run_id
        run = store.get_run(child)
        assert run is not None and run.status is RunStatus.CANCELLED
        kinds = [e.kind for e in store.events(child)]
        if stepped["result"] is None:  # waited for the cancel, then found the lease gone
            assert EventKind.LLM not in kinds and kinds[-1] is EventKind.CANCELLED
        else:
            landed += 1
            assert kinds[-2:] == [EventKind.LLM, EventKind.CANCELLED]
        sequences_whole(store, child)
    # The race happened: a child's step committed inside the cancel.
    assert landed >= 1


def test_children_settles_inside_a_stalled_tree_cancel(
    pg: tuple[Store, psycopg.Connection[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """Each child settles while the cancel holds the parent and one child. A settle locks
    its run's parent before its run (test_tree_lock_order.py), so both wait for the cancel
    without holding anything the cancel still needs (before, the child the cancel had not
    locked yet was taken by its settle, whose trigger then waited for the parent: a
    deadlock, broken by the server after a second and retried by the store). The cancel
    then takes both children, and each settle finds its run cancelled."""
    store, gate = pg
    parent, claims = tree(store)
    cancelling, cancel = stalled_cancel(store, gate, parent)
    settles = [
        in_thread(partial(store.settle, c.lease, completed("child's answer"))) for c in claims
    ]
    until(lambda: waiting_on(gate, "transactionid", "tuple") == len(settles), "both blocked")
    finish(gate, cancelling, *(s[0] for s in settles))
    assert "raised" not in cancel, cancel.get("raised")
    assert cancel["result"] is True
    for claimed, (_, settled) in zip(claims, settles, strict=True):
        assert "raised" not in settled, settled.get("raised")
        child = claimed.lease.run_id
        run = store.get_run(child)
        assert run is not None
        assert settled["result"] is None  # the cancel came first: the settle found it cancelled
        assert run.status is RunStatus.CANCELLED
        sequences_whole(store, child)
    top = store.get_run(parent)
    assert top is not None and top.status is RunStatus.CANCELLED
    sequences_whole(store, parent)
    assert "deadlock detected" not in caplog.text
