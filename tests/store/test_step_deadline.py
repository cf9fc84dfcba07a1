"""A step past its deadline (SPEC §15): the worker that gives the step up marks its run under
its lease, and the reaper records that cause instead of "the worker stopped renewing it".

The mark is a decision made in the worker's process (this step, this fence, still ours) and
written later: each race below stalls between the decision and the write, and the write
must then refuse, leaving the row exactly as the winner left it.
"""

from __future__ import annotations

import dataclasses
import json

from tenure._reaper import Reaper
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason
from tenure.store import Store

from .helpers import SHORT_LEASE, WRITE, claim_one, enqueue, expire, stale_for, step

WHY = "step 2 (tool slow) ran past its deadline of 0.4 s"
STALE_ERROR = "lease expired: the worker stopped renewing it"


def reaper(store: Store) -> Reaper:
    return Reaper(store, 3)


def test_a_marked_run_is_requeued_with_the_deadline_as_its_cause(store: Store) -> None:
    run_id = enqueue(store)
    claimed = claim_one(store, lease=SHORT_LEASE)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    assert (run.error_class, run.error) == (FailureClass.TIMEOUT, WHY)  # seen at once

    expire()
    assert reaper(store).run_once().requeued == 1
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert (run.error_class, run.error) == (FailureClass.TIMEOUT, WHY)
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.REQUEUED
    assert event.payload == {"cause": "step_deadline", "why": WHY, "lease_token": 1}


def test_the_mark_explains_only_the_lease_it_was_made_under(store: Store) -> None:
    """The next segment of the run dies plainly: its expiry is a stale lease again."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=SHORT_LEASE)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    expire()
    assert reaper(store).run_once().requeued == 1
    claim_one(store, "worker:b", lease=SHORT_LEASE)
    expire()
    assert reaper(store).run_once().requeued == 1
    run = store.get_run(run_id)
    assert run is not None and run.error == STALE_ERROR
    assert store.events(run_id)[-1].payload["cause"] == "stale"


def test_the_mark_loses_to_a_reaper_that_requeued_the_run_first(store: Store) -> None:
    """The worker decides the step is past its deadline and stalls; meanwhile the lease
    expires and the reaper requeues the run as stale. The late mark changes nothing."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=SHORT_LEASE)
    decided = (claimed.lease, claimed.last_sequence)  # the worker's decision, then a stall
    expire()
    assert reaper(store).run_once().requeued == 1
    before = store.get_run(run_id), store.events(run_id)

    assert not store.mark_step_deadline(*decided, None, WHY)
    assert (store.get_run(run_id), store.events(run_id)) == before
    assert before[0] is not None and before[0].error == STALE_ERROR
    assert before[1][-1].payload["cause"] == "stale"


def test_the_mark_is_refused_once_the_lease_expired_before_any_reaper(store: Store) -> None:
    """No reaper yet, but the lease is past its time: a reaper may be reading the run as
    stale right now, so the mark must not land under it."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=SHORT_LEASE)
    expire()
    assert not store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    assert reaper(store).run_once().requeued == 1
    run = store.get_run(run_id)
    assert run is not None and run.error == STALE_ERROR
    assert store.events(run_id)[-1].payload["cause"] == "stale"


def test_the_mark_is_refused_once_the_step_it_decided_on_was_recorded(store: Store) -> None:
    """The step returned and recorded its event between the decision and the mark: the step
    the mark would name is no longer the one in flight."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=30)
    assert store.record_step(claimed.lease, 30, [step()]) is not None
    assert not store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    run = store.get_run(run_id)
    assert run is not None and run.error == ""


def test_the_mark_is_refused_once_the_fence_it_decided_on_changed(store: Store) -> None:
    """Decided with no fence standing; a write stamped its fence since."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=30)
    assert store.mark_fence(claimed.lease, WRITE, 30)
    assert not store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, WRITE, WHY)
    run = store.get_run(run_id)
    assert run is not None and run.error == WHY


def test_the_mark_is_refused_under_another_lease(store: Store) -> None:
    run_id = enqueue(store)
    claimed = claim_one(store, lease=30)
    other = dataclasses.replace(claimed.lease, token=claimed.lease.token + 1)
    assert not store.mark_step_deadline(other, claimed.last_sequence, None, WHY)
    mine = dataclasses.replace(claimed.lease, owner="worker:b")
    assert not store.mark_step_deadline(mine, claimed.last_sequence, None, WHY)
    run = store.get_run(run_id)
    assert run is not None and run.error == ""


def test_the_reapers_write_re_checks_the_mark_it_read(store: Store) -> None:
    """A reaper's decision read with no mark must not apply to a marked row, nor the other
    way round: the cause it writes is the one it read."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=SHORT_LEASE)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, WHY)
    expire()
    seen = stale_for(store, run_id)
    assert seen.step_deadline == WHY
    unmarked = dataclasses.replace(seen, step_deadline=None)
    assert not store.requeue_stale(unmarked)
    assert not store.dead_letter_stale(unmarked, TerminationReason.RETRIES_EXHAUSTED, "x")
    assert not store.requeue_in_doubt_stale(unmarked, "x")
    assert store.requeue_stale(seen)


def test_a_write_past_its_deadline_is_dead_lettered_with_its_cause(store: Store) -> None:
    """A non-idempotent write past its deadline may still be running: its fence stands and
    the run is dead-lettered as always; the reason says which step and why."""
    run_id = enqueue(store)
    claimed = claim_one(store, lease=30)
    assert store.mark_fence(claimed.lease, WRITE, SHORT_LEASE)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, WRITE, WHY)
    expire()
    assert reaper(store).run_once().dead_lettered == 1
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is WRITE  # the write may have happened: evidence kept
    assert run.error == f"{WHY}, during a non-idempotent write; it may have happened"
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.DEAD_LETTERED
    assert (event.payload["cause"], event.payload["error"]) == ("step_deadline", run.error)


def test_a_probed_write_past_its_deadline_goes_back_in_doubt_saying_why(store: Store) -> None:
    run_id = enqueue(store)
    claimed = claim_one(store, lease=30)
    call = {"name": "pay", "args": {}, "idempotency_key": f"{run_id}:2", "turn": 2, "index": 0}
    assert store.mark_fence(claimed.lease, WRITE, SHORT_LEASE, call, probe=True)
    assert store.mark_step_deadline(claimed.lease, claimed.last_sequence, WRITE, WHY)
    expire()
    assert reaper(store).run_once().requeued == 1
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.pending_effect is WRITE and run.fence_probe  # the probe will tell
    assert run.error == f"{WHY}, during a non-idempotent write; its tool's probe will tell"
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.REQUEUED
    assert event.payload["cause"] == "in_doubt" and event.payload["step_deadline"] is True
    assert event.payload["why"] == run.error
    again = claim_one(store, "worker:b")
    assert again.fence_call is not None and json.loads(again.fence_call)["name"] == "pay"
