"""One status trigger on SQLite (schema 24, issue 31): a status change sets up one trigger
program, not four, and only a run with a parent, a child or a stream runs its body; a run
that streamed still has its deltas cleared by every statement that takes it out of
`running`; and a database written before the schema keeps its parents and children
working, on both stores."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason
from tenure.store import Lease, NewRun, Store, open_store
from tenure.store._deltas import DeltaPiece
from tenure.store.sqlite import SQLiteStore

from ._old_schema import database_before
from .helpers import REQUEST, completed, expire, new_run, stale_for

BEFORE = 24  # the first schema with the one status trigger


def _child_of(parent_id: str, position: int) -> NewRun:
    return dataclasses.replace(
        new_run(request=REQUEST),
        parent_id=parent_id,
        root_id=parent_id,
        idempotency_key=f"{parent_id}:{position}",
    )


def _claim(store: Store, run_id: str, lease_seconds: float = 30) -> Lease:
    claimed = store.claim_run(run_id, f"worker:{run_id[:8]}", lease_seconds)
    assert claimed is not None
    return claimed.lease


def _traced(store: SQLiteStore, write: Callable[[], object]) -> int:
    """How many times SQLite traced an `UPDATE tenure_runs` during `write`: once per
    execution of the statement, once more for each trigger program it set up (traced as it
    starts, before the trigger's WHEN), and once for each statement of a trigger's body
    that ran."""
    conn = store._writer_conn
    assert conn is not None
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    try:
        write()
    finally:
        conn.set_trace_callback(None)
    return sum(1 for sql in traced if "UPDATE tenure_runs" in sql)


def test_a_status_change_of_a_run_with_no_parent_child_or_stream_runs_no_trigger_body(
    sqlite_store: SQLiteStore,
) -> None:
    # SQLite sets up the program of every `AFTER UPDATE OF status` trigger at each status
    # change, its WHEN false or not (the WHEN is evaluated inside it): one trigger now, and
    # for a trivial run nothing of its body runs. A child and its parent run the body.
    store = sqlite_store
    plain, parent = new_run(), new_run()
    store.enqueue_many([plain, parent])
    child = _child_of(parent.run_id, 0)
    store.enqueue_many([child])
    leases: dict[str, Lease] = {}

    def claim(run_id: str) -> Callable[[], object]:
        return lambda: leases.__setitem__(run_id, _claim(store, run_id))

    def settle(run_id: str) -> Callable[[], object]:
        return lambda: store.settle(leases[run_id], completed())

    # The claim's or the settle's own UPDATE, and the one trigger's program.
    assert _traced(store, claim(plain.run_id)) == 2
    assert _traced(store, settle(plain.run_id)) == 2
    for run_id in (child.run_id, parent.run_id):
        assert _traced(store, claim(run_id)) > 2
        assert _traced(store, settle(run_id)) > 2


def _deltas(store: SQLiteStore, run_id: str) -> int:
    rows = store._read("SELECT COUNT(*) FROM tenure_deltas WHERE run_id = :id", {"id": run_id})
    return int(rows[0][0])


def _publish(store: SQLiteStore, lease: Lease) -> None:
    last = store.last_event(lease.run_id)
    assert last is not None
    store.publish_deltas([DeltaPiece(lease, last.sequence + 1, 0, "partial answer")])
    assert _deltas(store, lease.run_id) == 1


WAYS_OUT: dict[str, Callable[[SQLiteStore, Lease], object]] = {
    "settle": lambda s, lease: s.settle(lease, completed()) is not None,
    "cancel": lambda s, lease: s.cancel(lease.run_id),
    "requeue": lambda s, lease: s.requeue(lease, 0.0, FailureClass.TIMEOUT, "slow"),
    "release": lambda s, lease: s.release(lease),
    "hand back": lambda s, lease: s.hand_back(lease, "no tool here", ["mail"]),
    "wait for approval": lambda s, lease: (
        s.suspend(lease, RunStatus.WAITING_FOR_APPROVAL, {"kind": "approval"}, None, None, [])
        is not None
    ),
    "reaper requeue": lambda s, lease: s.requeue_stale(stale_for(s, lease.run_id)),
    "reaper dead-letter": lambda s, lease: s.dead_letter_stale(
        stale_for(s, lease.run_id), TerminationReason.RETRIES_EXHAUSTED, "lost"
    ),
}


@pytest.mark.parametrize("way", list(WAYS_OUT))
def test_a_streamed_run_leaving_running_loses_its_deltas_whatever_takes_it_out(
    sqlite_store: SQLiteStore, way: str
) -> None:
    store = sqlite_store
    run = new_run()
    store.enqueue(run)
    stale = way.startswith("reaper")
    lease = _claim(store, run.run_id, 0.2 if stale else 30)
    _publish(store, lease)
    if stale:
        expire()
    assert WAYS_OUT[way](store, lease)
    assert store.run_status(run.run_id) is not RunStatus.RUNNING
    assert _deltas(store, run.run_id) == 0


def test_a_run_streaming_again_in_a_later_attempt_still_loses_its_deltas(
    sqlite_store: SQLiteStore,
) -> None:
    # The store marks a run `streamed` at its first publication only; the mark outlives the
    # attempt that made it.
    store = sqlite_store
    run = new_run()
    store.enqueue(run)
    first = _claim(store, run.run_id)
    _publish(store, first)
    assert store.requeue(first, 0.0, FailureClass.TIMEOUT, "slow")
    assert _deltas(store, run.run_id) == 0
    second = _claim(store, run.run_id)
    _publish(store, second)
    assert store.settle(second, completed()) is not None
    assert _deltas(store, run.run_id) == 0


def test_a_child_that_streamed_and_waits_for_its_own_children_loses_its_deltas(
    sqlite_store: SQLiteStore,
) -> None:
    store = sqlite_store
    parent = new_run()
    store.enqueue(parent)
    lease = _claim(store, parent.run_id)
    child = _child_of(parent.run_id, 0)
    store.enqueue_many([child])
    _publish(store, lease)
    assert store.wait_for_children(lease, [child.run_id], None)
    assert _deltas(store, parent.run_id) == 0


@pytest.fixture
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each store, migrated up to the schema before 23."""
    yield from database_before(request, tmp_path, BEFORE)


@pytest.mark.parametrize("old_url", ["sqlite", "postgres"], indirect=True)
def test_a_parent_waiting_from_before_the_gate_is_woken_and_still_ends_its_children(
    old_url: str,
) -> None:
    store = open_store(old_url)
    try:
        parent = new_run()
        store.enqueue_many([parent])
        lease = _claim(store, parent.run_id)
        awaited, other = _child_of(parent.run_id, 0), _child_of(parent.run_id, 1)
        store.enqueue_many([awaited, other])
        assert store.wait_for_children(lease, [awaited.run_id], None)
        assert store.schema_version() < BEFORE
        store.migrate()
        assert store.schema_version() >= BEFORE

        assert store.settle(_claim(store, awaited.run_id), completed()) is not None
        assert store.run_status(parent.run_id) is RunStatus.QUEUED  # woken by its child

        assert store.settle(_claim(store, parent.run_id), completed()) is not None
        ended = store.get_run(other.run_id)
        assert ended is not None and ended.status is RunStatus.CANCELLED
        events = [e for e in store.events(other.run_id) if e.kind is EventKind.CANCELLED]
        assert [e.payload for e in events] == [{"by": "parent", "parent_id": parent.run_id}]
    finally:
        store.close()
