"""Tokens and cost per queue (`Store.queue_totals`): the runs that ended within the window
and the runs not yet ended, on both stores; a run that ended before the window is left out,
and a redriven run is counted once."""

from __future__ import annotations

from tenure._types import RunStatus, TerminationReason, Usage
from tenure.store import Lease, Settlement, Store

from .._raw import raw_execute
from .helpers import claim_one, completed, enqueue, step

DAY = 86_400.0


def _backdate_finish(db_url: str, run_id: str, seconds: float) -> None:
    if db_url.startswith("sqlite:///"):
        sql = "UPDATE tenure_runs SET finished_at = finished_at - ? WHERE id = ?"
    else:
        sql = (
            "UPDATE tenure_runs SET finished_at = finished_at - make_interval(secs => ?) "
            "WHERE id = ?"
        )
    assert raw_execute(db_url, sql, seconds, run_id) == 1


def _spend(store: Store, queue: str, usage: Usage) -> Lease:
    """A run of `queue`, claimed, that has spent `usage` in one model step."""
    run_id = enqueue(store, queue=queue)
    lease = claim_one(store).lease
    assert lease.run_id == run_id
    assert store.record_step(lease, 30, [step(n=1)], usage) is not None
    return lease


def test_totals_count_ended_runs_in_the_window_and_runs_not_yet_ended(
    store: Store, db_url: str
) -> None:
    _spend(store, "mail", Usage(10, 1, 0.25))  # still running
    ended = _spend(store, "mail", Usage(100, 20, 1.0))
    old = _spend(store, "mail", Usage(1000, 300, 7.0))
    other = _spend(store, "chat", Usage(5, 5, 0.5))
    for lease in (ended, old, other):
        assert store.settle(lease, completed()) is not None
    _backdate_finish(db_url, old.run_id, 2 * DAY)
    enqueue(store, queue="idle")  # queued, nothing spent yet

    assert store.queue_totals(DAY) == {
        "mail": Usage(110, 21, 1.25),
        "chat": Usage(5, 5, 0.5),
        "idle": Usage(0, 0, 0.0),
    }
    # A wider window reaches the run that ended two days ago.
    assert store.queue_totals(3 * DAY)["mail"] == Usage(1110, 321, 8.25)


def test_a_redriven_run_is_counted_once(store: Store) -> None:
    lease = _spend(store, "mail", Usage(7, 3, 0.5))
    dead = Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE, error="boom")
    assert store.settle(lease, dead) is not None
    assert store.queue_totals(DAY) == {"mail": Usage(7, 3, 0.5)}
    assert store.redrive(lease.run_id, False)
    assert store.run_status(lease.run_id) is RunStatus.QUEUED
    assert store.queue_totals(DAY) == {"mail": Usage(7, 3, 0.5)}
