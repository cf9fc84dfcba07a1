"""Worker rows (`tenure_workers`) on both stores: a worker's own heartbeat, beside its leases.
Registered, beaten, stopped, listed and purged; a stopped row is never revived."""

from __future__ import annotations

import time
from datetime import timedelta

from tenure._heartbeat import DEAD_AFTER_BEATS, WorkerState, worker_state
from tenure.store import Store
from tenure.store._base import WorkerInfo, WorkerRow


def info(worker_id: str, *, queues: list[str] | None = None, beat: float = 10.0) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id, host="box-a", pid=4242, queues=queues, slots=4, heartbeat_seconds=beat
    )


def row_of(store: Store, worker_id: str) -> WorkerRow | None:
    return next((w for w in store.workers() if w.id == worker_id), None)


def test_a_registered_worker_is_listed_as_it_said(store: Store) -> None:
    store.register_worker(info("worker:box-a:4242:1", queues=["emails", "reports"]))
    store.register_worker(info("worker:box-a:4242:2"))
    row = row_of(store, "worker:box-a:4242:1")
    assert row is not None
    assert (row.host, row.pid, row.queues, row.slots) == ("box-a", 4242, ["emails", "reports"], 4)
    assert (row.slots_in_use, row.heartbeat_seconds, row.state) == (0, 10.0, "running")
    assert row.started_at == row.last_seen and row.stopped_at is None
    assert abs((store.now() - row.last_seen).total_seconds()) < 5
    every = row_of(store, "worker:box-a:4242:2")
    assert every is not None and every.queues is None  # every queue


def test_a_heartbeat_moves_last_seen_and_the_slots_in_use(store: Store) -> None:
    store.register_worker(info("worker:box-a:1:1"))
    first = row_of(store, "worker:box-a:1:1")
    time.sleep(0.05)
    assert store.beat_worker("worker:box-a:1:1", 3)
    later = row_of(store, "worker:box-a:1:1")
    assert first is not None and later is not None
    assert later.last_seen > first.last_seen and later.started_at == first.started_at
    assert later.slots_in_use == 3 and later.state == "running"
    assert store.beat_worker("worker:box-a:1:1", 1, stopping=True)
    draining = row_of(store, "worker:box-a:1:1")
    assert draining is not None and draining.state == "stopping"
    assert not store.beat_worker("worker:nobody:1:1", 0), "a beat without a row applied"


def test_a_stopped_worker_stays_stopped(store: Store) -> None:
    store.register_worker(info("worker:box-a:2:1"))
    assert store.beat_worker("worker:box-a:2:1", 2)
    assert store.stop_worker("worker:box-a:2:1")
    assert not store.stop_worker("worker:box-a:2:1"), "stopped twice"
    stopped = row_of(store, "worker:box-a:2:1")
    assert stopped is not None and stopped.state == "stopped"
    assert stopped.stopped_at == stopped.last_seen and stopped.slots_in_use == 0
    # A late beat from a stopping thread, or a second registration, must not revive it.
    assert not store.beat_worker("worker:box-a:2:1", 1)
    store.register_worker(info("worker:box-a:2:1"))
    assert row_of(store, "worker:box-a:2:1") == stopped


def test_the_listing_shows_the_most_recently_seen_first(store: Store) -> None:
    for n in (1, 2, 3):
        store.register_worker(info(f"worker:box-a:3:{n}"))
        time.sleep(0.01)
    assert store.beat_worker("worker:box-a:3:1", 0)
    assert [w.id for w in store.workers()] == [f"worker:box-a:3:{n}" for n in (1, 3, 2)]
    assert [w.id for w in store.workers(limit=1)] == ["worker:box-a:3:1"]


def test_purge_removes_stopped_and_dead_workers_and_keeps_live_ones(store: Store) -> None:
    store.register_worker(info("worker:box-a:5:1"))  # stopped below
    store.register_worker(info("worker:box-a:5:2", beat=0.01))  # dies: never beats again
    store.register_worker(info("worker:box-a:5:3"))  # alive
    assert store.stop_worker("worker:box-a:5:1")
    time.sleep(0.2)
    assert store.beat_worker("worker:box-a:5:3", 0)
    time.sleep(0.05)
    # Older than a day: nothing is that old.
    store.purge(86_400)
    assert {w.id for w in store.workers()} == {f"worker:box-a:5:{n}" for n in (1, 2, 3)}
    # Older than nothing: the stopped and the dead go; the live one stays, whatever the cutoff.
    store.purge(0)
    assert [w.id for w in store.workers()] == ["worker:box-a:5:3"]


def test_a_purged_worker_that_beats_again_is_written_back(store: Store) -> None:
    """The heartbeat re-registers a row that is gone (it was purged as dead while its
    worker was cut off from the database)."""
    from tenure._heartbeat import Heartbeat

    worker = info("worker:box-a:6:1", beat=0.01)
    heartbeat = Heartbeat(lambda: store, worker, slots_in_use=lambda: 2, stopping=lambda: False)
    store.register_worker(worker)
    time.sleep(0.1)
    store.purge(0)
    assert row_of(store, worker.id) is None
    heartbeat.run_once()
    back = row_of(store, worker.id)
    assert back is not None and back.state == "running"
    heartbeat.run_once()
    again = row_of(store, worker.id)
    assert again is not None and again.slots_in_use == 2


def test_worker_state_reads_an_overdue_heartbeat_as_dead(store: Store) -> None:
    store.register_worker(info("worker:box-a:7:1", beat=1.0))
    row = row_of(store, "worker:box-a:7:1")
    assert row is not None
    seen = row.last_seen
    assert worker_state(row, seen + timedelta(seconds=DEAD_AFTER_BEATS - 0.1)) is (
        WorkerState.RUNNING
    )
    assert worker_state(row, seen + timedelta(seconds=DEAD_AFTER_BEATS + 0.1)) is WorkerState.DEAD
    assert store.stop_worker("worker:box-a:7:1")
    stopped = row_of(store, "worker:box-a:7:1")
    assert stopped is not None
    # A stopped worker is stopped, not dead, however long ago it stopped.
    assert worker_state(stopped, seen + timedelta(days=3)) is WorkerState.STOPPED
