"""Bulk cancel and bulk redrive (`tenure._bulk`): the runs a filter matched are counted, then
each is acted on by its own guarded transition, guarded by what the listing read. A run that
moved on between the count and the action (the stall between read and write) is reported as
changed and left alone. Both stores."""

from __future__ import annotations

import pytest

from tenure import _bulk
from tenure._errors import InvalidRequest
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason, ToolEffect
from tenure.store import Settlement, Store

from .helpers import claim_one, enqueue, new_run, step


def dead_letter(store: Store, queue: str = "default", fence: bool = False) -> str:
    run_id = store.enqueue(new_run(queue))[0]
    [claimed] = store.claim("worker:a", [queue], 30, 1)
    if fence:
        assert store.mark_fence(claimed.lease, ToolEffect.NON_IDEMPOTENT_WRITE, 30)
    settlement = Settlement(
        RunStatus.FAILED,
        TerminationReason.NOT_RETRYABLE,
        error_class=FailureClass.AUTH,
        error="401",
        events=(step(EventKind.DEAD_LETTERED, reason="not_retryable"),),
    )
    assert store.settle(claimed.lease, settlement) is not None
    return run_id


def test_a_bulk_cancel_of_queued_runs_spares_one_claimed_since_the_count(store: Store) -> None:
    queued = [store.enqueue(new_run("q"))[0] for _ in range(3)]
    other = store.enqueue(new_run("other"))[0]
    chosen = _bulk.select(store, "cancel", _bulk.Filter(RunStatus.QUEUED, None, "q"))
    assert sorted(r.id for r in chosen.runs) == sorted(queued)

    # Between the count and the action, a worker claims one of them.
    [claimed] = store.claim("worker:a", ["q"], 30, 1)
    outcome = _bulk.cancel_each(store, chosen)
    assert outcome.changed == [claimed.lease.run_id]
    assert sorted(outcome.done) == sorted(set(queued) - {claimed.lease.run_id})
    assert store.run_status(claimed.lease.run_id) is RunStatus.RUNNING
    assert store.record_step(claimed.lease, 30, []) is not None  # still its owner's
    assert store.run_status(other) is RunStatus.QUEUED


def test_a_bulk_cancel_without_a_status_takes_every_run_not_ended(store: Store) -> None:
    queued = enqueue(store)
    running = enqueue(store)
    store.claim_run(running, "worker:a", 30)
    done = enqueue(store)
    lease = store.claim_run(done, "worker:b", 30)
    assert lease is not None
    assert store.settle(lease.lease, _settled()) is not None
    chosen = _bulk.select(store, "cancel", _bulk.Filter(queue="default"))
    assert sorted(r.id for r in chosen.runs) == sorted([queued, running])
    assert sorted(_bulk.cancel_each(store, chosen).done) == sorted([queued, running])
    assert store.run_status(done) is RunStatus.COMPLETED


def test_a_bulk_cancel_stops_at_its_limit(store: Store) -> None:
    for _ in range(5):
        enqueue(store)
    chosen = _bulk.select(store, "cancel", _bulk.Filter(RunStatus.QUEUED), limit=3)
    assert (len(chosen.runs), chosen.more) == (3, True)


def test_a_bulk_redrive_skips_a_standing_fence_and_one_redriven_since(store: Store) -> None:
    plain = [dead_letter(store, "q") for _ in range(2)]
    fenced = dead_letter(store, "q", fence=True)
    elsewhere = dead_letter(store, "other")
    chosen = _bulk.select(
        store, "redrive", _bulk.Filter(None, TerminationReason.NOT_RETRYABLE, "q")
    )
    assert sorted(r.id for r in chosen.runs) == sorted(plain)
    assert [r.id for r in chosen.skipped] == [fenced]

    assert store.redrive(plain[0], False)  # someone else redrove it meanwhile
    outcome = _bulk.redrive_each(store, chosen)
    assert (outcome.done, outcome.changed) == ([plain[1]], [plain[0]])
    assert store.run_status(fenced) is RunStatus.FAILED
    assert store.run_status(elsewhere) is RunStatus.FAILED


@pytest.mark.parametrize(
    ("action", "f", "message"),
    [
        ("cancel", _bulk.Filter(RunStatus.COMPLETED), "have ended"),
        ("cancel", _bulk.Filter(reason=TerminationReason.CANCELLED), "ended runs cannot"),
        ("redrive", _bulk.Filter(RunStatus.QUEUED), "only dead-lettered"),
        ("redrive", _bulk.Filter(reason=TerminationReason.COMPLETED), "not a dead-letter"),
        ("purge", _bulk.Filter(), "unknown bulk action"),
    ],
)
def test_what_an_action_cannot_act_on_is_refused(
    store: Store, action: str, f: _bulk.Filter, message: str
) -> None:
    enqueue(store)
    with pytest.raises(InvalidRequest, match=message):
        _bulk.select(store, action, f)
    assert store.run_status(claim_one(store).lease.run_id) is RunStatus.RUNNING


def _settled() -> Settlement:
    return Settlement(
        RunStatus.COMPLETED,
        TerminationReason.COMPLETED,
        output="ok",
        events=(step(EventKind.ASSEMBLED),),
    )
