"""Races won by the guard: real threads and real processes against one database."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason, ToolEffect
from tenure.store import Lease, Settlement, StaleRun, Store, open_store

from .helpers import SHORT_LEASE, claim_one, completed, enqueue, expire, stale_for, step

ROUNDS = 15


def race(*fns: Callable[[], Any]) -> list[Any]:
    """Start every fn at the same instant on its own thread; their results in order."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def go(i: int, fn: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = fn()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_two_claimers_one_winner(store: Store) -> None:
    for _ in range(ROUNDS):
        run_id = enqueue(store)
        won = race(
            lambda r=run_id: store.claim_run(r, "worker:a", 30),
            lambda r=run_id: store.claim_run(r, "worker:b", 30),
        )
        winners = [w for w in won if w is not None]
        assert len(winners) == 1
        run = store.get_run(run_id)
        assert run is not None and run.claimed_by == winners[0].lease.owner
        assert [e.kind for e in store.events(run_id)].count(EventKind.CLAIMED) == 1


def test_many_threads_claiming_a_batch_never_share_a_run(store: Store) -> None:
    ids = {enqueue(store) for _ in range(60)}
    got: list[list[str]] = [[] for _ in range(6)]

    def claimer(i: int) -> None:
        while True:
            batch = store.claim(f"worker:{i}", None, 30, 3)
            if not batch:
                return
            got[i].extend(c.lease.run_id for c in batch)

    race(*[lambda i=i: claimer(i) for i in range(6)])  # type: ignore[misc]
    everything = [r for g in got for r in g]
    assert sorted(everything) == sorted(ids)
    assert len(set(everything)) == len(everything)


def _claim_in_process(url: str, owner: str, out: Any) -> None:
    s = open_store(url)
    mine = []
    while batch := s.claim(owner, None, 30, 2):
        mine.extend(c.lease.run_id for c in batch)
    s.close()
    out.put(mine)


def test_claimers_in_separate_processes_never_share_a_run(store: Store) -> None:
    ids = {enqueue(store) for _ in range(80)}
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_claim_in_process, args=(store.url, f"worker:p{i}", out))
        for i in range(3)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    everything = [r for got in results for r in got]
    assert len(everything) == len(set(everything))
    assert set(everything) == ids


def test_heartbeat_vs_reaper_after_the_lease_expired_the_reaper_wins(store: Store) -> None:
    """Raced at once, after the lease ran out: exactly one wins, and it is the reaper every
    time, since a heartbeat is refused once its lease has expired by the database's clock,
    even though the row still names its owner and token (SPEC §15)."""
    for _ in range(ROUNDS):
        run_id = enqueue(store)
        lease = claim_one(store, lease=SHORT_LEASE).lease
        expire()
        seen = stale_for(store, run_id)
        beat, reaped = race(
            lambda lease=lease: store.record_step(lease, 30, [step()]),
            lambda seen=seen: store.requeue_stale(seen),
        )
        assert beat is None and reaped
        run = store.get_run(run_id)
        assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
        assert store.events(run_id)[-1].payload["cause"] == "stale"
        assert store.cancel(run_id)  # out of the next round's way


def test_a_renewed_run_is_never_reaped(store: Store) -> None:
    """A heartbeat decided while its lease was live, and a reaper whose read predates it (on
    PostgreSQL that heartbeat may commit after the read, which did not see it): the reaper's
    write re-checks staleness and does not apply."""
    run_id = enqueue(store)
    lease = claim_one(store, lease=SHORT_LEASE).lease
    before = StaleRun(run_id, lease.token, None, True, 0)  # what that older read holds
    assert store.record_step(lease, 30, [step()]) is not None  # the slow worker renews in time
    expire()  # the lease it renewed would have run out by now
    assert not store.requeue_stale(before)
    assert not store.dead_letter_stale(before, TerminationReason.NOT_RETRYABLE, "x")
    assert store.stale_runs(100) == []
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING and run.claimed_by == lease.owner


def test_settle_vs_cancel_first_wins_late_one_reports_it(store: Store) -> None:
    winners: Counter[str] = Counter()
    for _ in range(ROUNDS):
        run_id = enqueue(store)
        lease = claim_one(store).lease
        settled, cancelled = race(
            lambda lease=lease: store.settle(lease, completed()) is not None,
            lambda r=run_id: store.cancel(r),
        )
        assert settled != cancelled, "exactly one of settle and cancel wins"
        run = store.get_run(run_id)
        assert run is not None
        expected = RunStatus.COMPLETED if settled else RunStatus.CANCELLED
        assert run.status is expected
        winners["settle" if settled else "cancel"] += 1
        terminal_events = [
            e.kind
            for e in store.events(run_id)
            if e.kind in (EventKind.ASSEMBLED, EventKind.CANCELLED)
        ]
        assert len(terminal_events) == 1
    assert sum(winners.values()) == ROUNDS


def test_concurrent_reapers_act_once(store: Store) -> None:
    run_id = enqueue(store)
    claim_one(store, lease=SHORT_LEASE)
    expire()
    seen = stale_for(store, run_id)
    results = race(*[lambda: store.requeue_stale(seen)] * 4)
    assert results.count(True) == 1
    requeues = [e for e in store.events(run_id) if e.kind is EventKind.REQUEUED]
    assert len(requeues) == 1
    assert store.get_run(run_id).requeue_count == 1  # type: ignore[union-attr]


def test_zombie_after_requeue_can_write_nothing(store: Store) -> None:
    """A segment whose run was reaped and re-claimed by another: every write is lost."""
    run_id = enqueue(store)
    zombie = claim_one(store, "worker:zombie", lease=SHORT_LEASE).lease
    expire()
    assert store.requeue_stale(stale_for(store, run_id))
    owner = claim_one(store, "worker:alive").lease
    assert owner.token == zombie.token + 1
    before = [(e.sequence, e.kind) for e in store.events(run_id)]

    assert store.record_step(zombie, 30, [step()]) is None
    assert not store.mark_fence(zombie, ToolEffect.NON_IDEMPOTENT_WRITE, 30)
    assert store.clear_fence(zombie, 30, step(EventKind.TOOL)) is None
    assert store.settle(zombie, completed("zombie")) is None
    assert (
        store.settle(zombie, Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE)) is None
    )
    assert not store.requeue(zombie, 0, FailureClass.TIMEOUT, "zombie")
    assert not store.release(zombie)

    assert [(e.sequence, e.kind) for e in store.events(run_id)] == before
    run = store.get_run(run_id)
    assert run is not None
    assert run.status is RunStatus.RUNNING and run.claimed_by == "worker:alive"
    assert run.pending_effect is None
    assert store.settle(owner, completed("alive")) is not None
    assert store.get_run(run_id).output == "alive"  # type: ignore[union-attr]


def test_same_owner_name_with_an_old_token_is_a_zombie_too(store: Store) -> None:
    run_id = enqueue(store)
    first = claim_one(store, "worker:same", lease=SHORT_LEASE).lease
    expire()
    assert store.requeue_stale(stale_for(store, run_id))
    second = claim_one(store, "worker:same").lease
    assert store.record_step(Lease(run_id, "worker:same", first.token, 0), 30, [step()]) is None
    assert store.record_step(second, 30, [step()]) is not None


def test_batched_settle_vs_cancel_each_run_has_one_winner(store: Store) -> None:
    """A worker settling several runs in one transaction races a cancel of each of them."""
    outcomes: Counter[str] = Counter()
    for _ in range(ROUNDS):
        ids = [enqueue(store) for _ in range(3)]
        leases = [c.lease for c in store.claim("worker:a", None, 30, 3)]
        cancels = [lambda r=r: store.cancel(r) for r in ids]
        settles = [(lease, completed()) for lease in leases]
        batch, *cancelled = race(
            lambda settles=settles: store.settle_and_claim(settles, "worker:a", None, 30, 0)[0],
            *cancels,
        )
        by_id = dict(zip([lease.run_id for lease in leases], batch, strict=True))
        for run_id, was_cancelled in zip(ids, cancelled, strict=True):
            settled = by_id[run_id] is not None
            assert settled != was_cancelled, "exactly one of the batch and the cancel wins"
            run = store.get_run(run_id)
            assert run is not None
            assert run.status is (RunStatus.COMPLETED if settled else RunStatus.CANCELLED)
            outcomes["settle" if settled else "cancel"] += 1
    assert sum(outcomes.values()) == 3 * ROUNDS


def test_batched_settle_vs_reaper_the_requeued_run_is_not_settled(store: Store) -> None:
    """A lease that expired before the batch commits: never both win, and since the batch's
    settle is refused by the lease's time alone, the reaper does, every time; the run keeps
    no trace of the late settle."""
    for _ in range(ROUNDS):
        run_id = enqueue(store)
        claimed = store.claim_run(run_id, "worker:a", SHORT_LEASE)
        assert claimed is not None
        lease = claimed.lease
        expire()
        seen = stale_for(store, run_id)
        batch, requeued = race(
            lambda lease=lease: store.settle_and_claim(
                [(lease, completed())], "worker:a", None, 30, 0
            )[0][0],
            lambda seen=seen: store.requeue_stale(seen),
        )
        assert batch is None and requeued
        run = store.get_run(run_id)
        assert run is not None
        assert run.status is (RunStatus.QUEUED if requeued else RunStatus.COMPLETED)
        kinds = [e.kind for e in store.events(run_id)]
        assert (EventKind.ASSEMBLED in kinds) != requeued


def test_batched_claims_of_two_workers_never_share_a_run(store: Store) -> None:
    ids = {enqueue(store) for _ in range(40)}
    got: dict[str, list[str]] = {"worker:a": [], "worker:b": []}

    def work(owner: str) -> None:
        held: list[Lease] = []
        while True:
            _, claimed = store.settle_and_claim(
                [(lease, completed()) for lease in held], owner, None, 30, 3
            )
            if not claimed and not held:
                return
            held = [c.lease for c in claimed]
            got[owner].extend(lease.run_id for lease in held)

    race(lambda: work("worker:a"), lambda: work("worker:b"))
    assert not set(got["worker:a"]) & set(got["worker:b"])
    assert set(got["worker:a"]) | set(got["worker:b"]) == ids
    for run_id in ids:
        run = store.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
