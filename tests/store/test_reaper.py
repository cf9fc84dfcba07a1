"""The reaper (SPEC §7): each branch in order, guards re-checked inside each write."""

from __future__ import annotations

from tenure._reaper import Reaper
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason, ToolEffect
from tenure.store import Store

from .helpers import SHORT_LEASE, claim_one, enqueue, expire, new_run


def reaper(store: Store, max_requeues: int = 3) -> Reaper:
    return Reaper(store, max_requeues)


def test_nothing_stale_nothing_done(store: Store) -> None:
    enqueue(store)
    claim_one(store, lease=30)
    report = reaper(store).run_once()
    assert (report.requeued, report.dead_lettered, report.skipped) == (0, 0, 0)


def test_stale_run_is_requeued_claimable_at_once_and_clears_idempotent_fence(
    store: Store,
) -> None:
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    assert store.mark_fence(lease, ToolEffect.IDEMPOTENT_WRITE, SHORT_LEASE)
    expire()
    report = reaper(store).run_once()
    assert (report.requeued, report.dead_lettered, report.skipped) == (1, 0, 0)
    run = store.get_run(run_id)
    assert run is not None
    assert run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert run.pending_effect is None and run.lease_expires is None
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.REQUEUED and event.payload["cause"] == "stale"
    again = claim_one(store, "worker:b")  # the expired lease was the wait
    assert again.lease.attempt == 1 and again.requeue_count == 1


def test_branch_1_standing_non_idempotent_fence_dead_letters_whatever_the_budget(
    store: Store,
) -> None:
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    assert store.mark_fence(lease, ToolEffect.NON_IDEMPOTENT_WRITE, SHORT_LEASE)
    expire()
    report = reaper(store, max_requeues=10).run_once()
    assert report.dead_lettered == 1 and report.requeued == 0
    run = store.get_run(run_id, with_request=True)
    assert run is not None
    assert run.status is RunStatus.FAILED
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE  # evidence
    assert run.request is not None  # redrivable by a person
    assert run.error_class is FailureClass.TIMEOUT and "non-idempotent" in run.error
    assert store.events(run_id)[-1].kind is EventKind.DEAD_LETTERED


def test_branch_2_interactive_run_without_request_is_dead_lettered(store: Store) -> None:
    run = new_run(request=None)
    store.start(run, "run:host:1", SHORT_LEASE)
    expire()
    report = reaper(store).run_once()
    assert report.dead_lettered == 1
    row = store.get_run(run.run_id)
    assert row is not None and row.termination_reason is TerminationReason.NOT_RETRYABLE
    assert "interactive" in row.error


def test_branch_3_spent_budget_dead_letters_retries_exhausted(store: Store) -> None:
    run_id = enqueue(store)
    for _ in range(2):
        lease = claim_one(store, lease=SHORT_LEASE).lease
        assert store.requeue(lease, 0, FailureClass.SERVER_ERROR, "503")
    claim_one(store, lease=SHORT_LEASE)
    expire()
    report = reaper(store, max_requeues=2).run_once()
    assert report.dead_lettered == 1
    run = store.get_run(run_id)
    assert run is not None and run.termination_reason is TerminationReason.RETRIES_EXHAUSTED


def test_budget_is_shared_between_failure_and_stale_requeues(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    assert store.requeue(lease, 0, FailureClass.SERVER_ERROR, "503")  # 1 (failure)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    assert reaper(store, max_requeues=2).run_once().requeued == 1  # 2 (stale)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    assert reaper(store, max_requeues=2).run_once().dead_lettered == 1
    assert store.get_run(run_id).requeue_count == 2  # type: ignore[union-attr]


def test_reaper_respects_its_limit(store: Store) -> None:
    for _ in range(5):
        enqueue(store)
    store.claim("worker:a", None, SHORT_LEASE, 5)
    expire()
    assert reaper(store).run_once(limit=2).requeued == 2
    assert reaper(store).run_once(limit=50).requeued == 3


def test_stale_write_with_an_outdated_token_is_skipped(store: Store) -> None:
    """The reaper read the run, then it was requeued and re-claimed: the write must miss."""
    run_id = enqueue(store)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    seen = store.stale_runs(10)[0]
    assert store.requeue_stale(run_id, seen.lease_token)
    claim_one(store, "worker:b", lease=SHORT_LEASE)
    expire()
    # Stale again, but under a new token: a write naming the old one applies to nothing.
    assert not store.requeue_stale(run_id, seen.lease_token)
    assert not store.dead_letter_stale(
        run_id, seen.lease_token, TerminationReason.NOT_RETRYABLE, "x"
    )
    assert store.get_run(run_id).status is RunStatus.RUNNING  # type: ignore[union-attr]
