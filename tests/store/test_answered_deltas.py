"""A run's deltas go in the transaction that records its call's `llm` event (SPEC §18), by
the SQLite store's own statements since schema 25 (no trigger on tenure_events): the run
goes on running, its deltas are gone, and another run's stay."""

from __future__ import annotations

from tenure._types import EventKind
from tenure.store import Lease, NewEvent
from tenure.store._deltas import DeltaPiece
from tenure.store.sqlite import SQLiteStore

from .helpers import new_run, step


def _claim(store: SQLiteStore, run_id: str) -> Lease:
    claimed = store.claim_run(run_id, "worker:a", 30.0)
    assert claimed is not None
    return claimed.lease


def _deltas(store: SQLiteStore, run_id: str) -> int:
    rows = store._read("SELECT COUNT(*) FROM tenure_deltas WHERE run_id = :id", {"id": run_id})
    return int(rows[0][0])


def _publish(store: SQLiteStore, lease: Lease, text: str) -> None:
    last = store.last_event(lease.run_id)
    assert last is not None
    store.publish_deltas([DeltaPiece(lease, last.sequence + 1, 0, text)])


def test_an_llm_event_clears_its_runs_deltas_and_no_others(sqlite_store: SQLiteStore) -> None:
    store = sqlite_store
    answered, streaming = new_run(), new_run()
    store.enqueue_many([answered, streaming])
    first, second = _claim(store, answered.run_id), _claim(store, streaming.run_id)
    _publish(store, first, "the answer")
    _publish(store, second, "another answer")
    assert (_deltas(store, answered.run_id), _deltas(store, streaming.run_id)) == (1, 1)

    # A tool step's event is no answer: the deltas stay.
    assert store.record_step(first, 30.0, [step(EventKind.TOOL, name="t")]) is not None
    assert _deltas(store, answered.run_id) == 1
    # The call's `llm` event, the run still running: its deltas go, the other run's stay.
    _publish(store, first, "the answer")
    assert store.record_step(first, 30.0, [step(content="the answer")]) is not None
    assert (_deltas(store, answered.run_id), _deltas(store, streaming.run_id)) == (0, 1)


def test_an_llm_event_with_no_deltas_anywhere_writes_as_before(
    sqlite_store: SQLiteStore,
) -> None:
    store = sqlite_store
    run = new_run()
    store.enqueue_many([run])
    lease = _claim(store, run.run_id)
    events = [step(content="a"), NewEvent(EventKind.TOOL, {"name": "t"})]
    sequences = store.record_step(lease, 30.0, events)
    assert sequences is not None and len(sequences) == 2
    assert [e.kind for e in store.events(run.run_id)][-2:] == [EventKind.LLM, EventKind.TOOL]


def test_the_trigger_is_gone(sqlite_store: SQLiteStore) -> None:
    rows = sqlite_store._read(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :t",
        {"t": "tenure_events"},
    )
    assert rows == []
