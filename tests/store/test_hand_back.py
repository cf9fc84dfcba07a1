"""A claimed run given back before its segment started (SPEC §16, issue #13): a run that came
back in doubt goes back with the fence and the call it came with, uncharged, so that a worker
that has the write's tool asks its probe. A hand-back never takes, clears or changes a fence
a write stamped: it applies only while the fence that stands is the one the claim brought."""

from __future__ import annotations

import json

import pytest

from tenure._types import EventKind, FailureClass, RunStatus
from tenure.cli._output import summarize
from tenure.store import Claimed, NewEvent, Store

from .helpers import WRITE, claim_one, enqueue

CALL = {"name": "pay", "args": {"amount": 7}, "idempotency_key": "k", "turn": 2, "index": 0}


def in_doubt(store: Store) -> str:
    """A run whose write's segment failed inside it: back in the queue with its probe-able
    fence standing, charged once."""
    run_id = enqueue(store)
    lease = claim_one(store, "worker:a").lease
    assert store.mark_fence(lease, WRITE, 30, CALL, True)
    assert store.requeue_in_doubt(lease, 0, FailureClass.TIMEOUT, "no answer")
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
    return run_id


def claim_in_doubt(store: Store, owner: str) -> Claimed:
    claimed = claim_one(store, owner)
    assert claimed.fence_call is not None and json.loads(claimed.fence_call) == CALL
    return claimed


@pytest.mark.parametrize("missing", [(), ("tool 'pay'",)], ids=["unstarted", "unserved"])
def test_an_in_doubt_run_goes_back_with_its_fence_and_call_uncharged(
    store: Store, missing: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tenure.store._owner.UNSERVED_BASE_SECONDS", 0.0)
    run_id = in_doubt(store)
    claimed = claim_in_doubt(store, "worker:b")
    assert claimed.lease.attempt == 1
    assert store.hand_back(claimed.lease, "not here", missing, fence_call=claimed.fence_call)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.claimed_by == ""
    assert run.pending_effect is WRITE and run.fence_probe  # still in doubt
    assert run.requeue_count == 1 and run.attempt == 0  # not charged, no attempt counted
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.REQUEUED
    assert event.payload["cause"] == ("unserved" if missing else "unstarted")
    assert event.payload["in_doubt"] is True
    assert "still in doubt" in summarize(event)
    again = claim_in_doubt(store, "worker:c")  # the call its probe is asked about
    assert again.fence_call == claimed.fence_call and again.lease.attempt == 1


def test_a_hand_back_never_takes_a_fence_a_write_stamped(store: Store) -> None:
    """The claim brought no fence, and a write stamped one since: refused, fence kept."""
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.mark_fence(lease, WRITE, 30, CALL, True)
    assert not store.hand_back(lease, "the worker is stopping")
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    assert run.pending_effect is WRITE and run.fence_probe


def test_a_hand_back_applies_only_while_the_claims_fence_stands(store: Store) -> None:
    """The claim brought an in-doubt fence; its probe cleared it and the write stamped a
    fence of its own (another call): neither state is the one the hand-back was decided on."""
    run_id = in_doubt(store)
    claimed = claim_in_doubt(store, "worker:b")
    lease = claimed.lease
    # A hand-back that did not see the fence never applies to it.
    assert not store.hand_back(lease, "the worker is stopping")
    probe = NewEvent(EventKind.PROBE, {"verdict": "not_done"})
    assert store.resolve_fence(lease, 30, [probe]) is not None
    assert not store.hand_back(lease, "the worker is stopping", fence_call=claimed.fence_call)
    other = {**CALL, "index": 1, "idempotency_key": "k2"}
    assert store.mark_fence(lease, WRITE, 30, other, True)
    assert not store.hand_back(lease, "the worker is stopping", fence_call=claimed.fence_call)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING and run.pending_effect is WRITE
    assert run.requeue_count == 1


def test_held_by_names_the_fence_each_held_run_came_with(store: Store) -> None:
    """What a worker hands back after a commit it could not learn the outcome of."""
    doubtful = in_doubt(store)
    plain = enqueue(store)
    claimed = {c.lease.run_id: c for c in store.claim("worker:b", None, 30, 10)}
    assert set(claimed) == {doubtful, plain}
    held = {h.lease.run_id: h for h in store.held_by("worker:b")}
    assert held[doubtful].lease == claimed[doubtful].lease
    assert held[doubtful].fence_call == claimed[doubtful].fence_call is not None
    assert held[plain].fence_call is None
    for h in held.values():
        assert store.hand_back(h.lease, "its claim's commit was lost", fence_call=h.fence_call)
    run = store.get_run(doubtful)
    assert run is not None and run.status is RunStatus.QUEUED and run.pending_effect is WRITE
