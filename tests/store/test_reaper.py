"""The reaper (SPEC §7): each branch in order, guards re-checked inside each write."""

from __future__ import annotations

from tenure._reaper import Reaper
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason, ToolEffect
from tenure.store import Store
from tenure.store._base import StaleRun

from .helpers import SHORT_LEASE, WRITE, claim_one, enqueue, expire, new_run, stale_for, step


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


def test_a_pass_takes_pages_until_one_comes_back_short(store: Store) -> None:
    """A worker that held 500 runs dies: one pass settles every one of them (SPEC §13.3 holds
    however many runs the dead worker held), reading them `limit` at a time."""
    ids = [enqueue(store) for _ in range(500)]
    assert len(store.claim("worker:many", None, SHORT_LEASE, 500)) == 500
    expire()
    reads: list[int] = []

    class Counting:
        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def stale_runs(self, limit: int) -> list[StaleRun]:
            page = self.inner.stale_runs(limit)
            reads.append(len(page))
            return page

    report = Reaper(Counting(store), 3).run_once(limit=50)  # type: ignore[arg-type]
    assert report.requeued == 500 and report.skipped == 0
    assert reads == [50] * 10 + [0]
    assert all(store.run_status(i) is RunStatus.QUEUED for i in ids)


def test_a_pass_stops_taking_pages_at_its_time_budget(store: Store) -> None:
    for _ in range(5):
        enqueue(store)
    store.claim("worker:a", None, SHORT_LEASE, 5)
    expire()
    ticks = iter(range(100))  # an injected clock: each reading is one second later
    bounded = Reaper(store, 3, pass_seconds=0.5, clock=lambda: float(next(ticks)))
    assert bounded.run_once(limit=2).requeued == 2  # the first page, then the budget is spent
    assert reaper(store).run_once(limit=2).requeued == 3


class OlderRead:
    """The real store, whose reaper reads `seen`: the run as it was before the segment's last
    write. A segment writes only under a live lease, so its write and a reaper's read of its
    expired lease interleave only this way: on PostgreSQL a write decided while its lease was
    live may commit after the reaper's read (which did not see it), and the write then
    outlives the lease it set before the reaper writes."""

    def __init__(self, inner: Store, seen: StaleRun) -> None:
        self.inner = inner
        self.seen: list[StaleRun] = [seen]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def stale_runs(self, limit: int) -> list[StaleRun]:
        page, self.seen = self.seen, []
        return page


def test_a_fence_stamped_after_the_reapers_read_is_never_cleared(store: Store) -> None:
    """The double write: the reaper reads the run with no fence; the segment stamps its
    non-idempotent fence and starts the write, which outlives its fence lease; the reaper's
    requeue, decided on "no fence", must not apply (it would clear the fence and a new
    segment would run the write again). The next pass dead-letters the run."""
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    before = StaleRun(run_id, lease.token, None, True, 0)
    assert store.mark_fence(lease, WRITE, SHORT_LEASE)
    expire()  # the write outlives the lease its fence was stamped with

    report = Reaper(OlderRead(store, before), 3).run_once()  # type: ignore[arg-type]
    assert (report.requeued, report.dead_lettered, report.skipped) == (0, 0, 1)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING and run.pending_effect is WRITE
    assert claim_one_or_none(store) is None  # nobody can take the run and repeat the write

    report = reaper(store).run_once()
    assert report.dead_lettered == 1
    run = store.get_run(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.pending_effect is WRITE


def test_a_fence_cleared_after_the_reapers_read_is_no_reason_to_dead_letter(
    store: Store,
) -> None:
    """The mirror case: the reaper reads the fence standing; the write returns and its event
    clears the fence (with a lease that expires again before the reaper writes). The
    dead-letter decided on the fence must not apply; the run is requeued."""
    run_id = enqueue(store)
    lease = claim_one(store, lease=30).lease
    assert store.mark_fence(lease, WRITE, 30)
    before = StaleRun(run_id, lease.token, WRITE, True, 0)
    assert store.clear_fence(lease, SHORT_LEASE, step(EventKind.TOOL)) is not None
    expire()

    report = Reaper(OlderRead(store, before), 3).run_once()  # type: ignore[arg-type]
    assert (report.requeued, report.dead_lettered, report.skipped) == (0, 0, 1)
    assert reaper(store).run_once().requeued == 1  # read afresh: no fence, a plain requeue
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.pending_effect is None


def test_a_write_after_the_lease_expired_cannot_change_what_the_reaper_read(
    store: Store,
) -> None:
    """The interleaving the tests above stand for cannot happen through a write made after
    the lease ran out: the segment's stamp is refused, and the reaper's read stays true."""
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    expire()
    seen = stale_for(store, run_id)
    assert not store.mark_fence(lease, WRITE, SHORT_LEASE)
    assert store.clear_fence(lease, SHORT_LEASE, step(EventKind.TOOL)) is None
    assert store.requeue_stale(seen)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.pending_effect is None


def test_a_budget_charged_after_the_reapers_read_is_re_read(store: Store) -> None:
    """Each guard column on its own: the write names the requeue count it read."""
    run_id = enqueue(store)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    seen = stale_for(store, run_id)
    stale = StaleRun(seen.run_id, seen.lease_token, None, True, seen.requeue_count + 1)
    assert not store.requeue_stale(stale)
    assert not store.dead_letter_stale(stale, TerminationReason.RETRIES_EXHAUSTED, "x")
    fenced = StaleRun(seen.run_id, seen.lease_token, WRITE, True, seen.requeue_count)
    assert not store.dead_letter_stale(fenced, TerminationReason.NOT_RETRYABLE, "x")
    no_request = StaleRun(seen.run_id, seen.lease_token, None, False, seen.requeue_count)
    assert not store.dead_letter_stale(no_request, TerminationReason.NOT_RETRYABLE, "x")
    assert store.requeue_stale(seen)


def claim_one_or_none(store: Store) -> object:
    claimed = store.claim("worker:other", None, 30, 1)
    return claimed[0] if claimed else None


def test_stale_write_with_an_outdated_token_is_skipped(store: Store) -> None:
    """The reaper read the run, then it was requeued and re-claimed: the write must miss."""
    run_id = enqueue(store)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    seen = store.stale_runs(10)[0]
    assert store.requeue_stale(seen)
    claim_one(store, "worker:b", lease=SHORT_LEASE)
    expire()
    # Stale again, but under a new token: a write naming the old one applies to nothing.
    assert not store.requeue_stale(seen)
    assert not store.dead_letter_stale(seen, TerminationReason.NOT_RETRYABLE, "x")
    assert store.get_run(run_id).status is RunStatus.RUNNING  # type: ignore[union-attr]
