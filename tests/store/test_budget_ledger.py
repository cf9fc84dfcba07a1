"""One budget for a run tree (SPEC §21): the root's ledger in the store, on both stores.

Until runs have parents, several runs are pointed at one ledger here by naming its root
directly: each run reserves under its own lease, as the runs of one tree will.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from typing import Any

from tenure.store import Lease, Store, open_store

from .helpers import SHORT_LEASE, claim_one, enqueue, expire

BUDGET = (100, None)  # max tokens, max cost
HOLD = 60.0


def _runs(store: Store, n: int, lease: float = 30.0) -> list[Lease]:
    """n running runs, each held by its own worker; the first is the tree's root."""
    for _ in range(n):
        enqueue(store)
    return [claim_one(store, f"worker:{i}", lease).lease for i in range(n)]


def test_a_lone_run_is_refused_only_once_it_has_spent_its_budget(store: Store) -> None:
    (root,) = _runs(store, 1)
    # An estimate larger than the whole budget is admitted while nothing is in flight.
    grant = store.reserve_budget(root.run_id, root, BUDGET, 1024, 0.0, HOLD)
    assert grant.reservation is not None
    store.settle_budget(root.run_id, grant.reservation, 99, 0.0)
    again = store.reserve_budget(root.run_id, root, BUDGET, 1024, 0.0, HOLD)
    assert again.reservation is not None
    store.settle_budget(root.run_id, again.reservation, 1, 0.0)
    refused = store.reserve_budget(root.run_id, root, BUDGET, 1, 0.0, HOLD)
    assert refused.reservation is None and refused.spent
    budget = store.budget(root.run_id)
    assert budget is not None
    assert (budget.spent_tokens, budget.reserved_tokens, budget.max_tokens) == (100, 0, 100)


def test_a_cost_limit_is_a_limit_of_its_own(store: Store) -> None:
    (root,) = _runs(store, 1)
    limits = (None, 0.5)
    grant = store.reserve_budget(root.run_id, root, limits, 10, 0.1, HOLD)
    assert grant.reservation is not None
    store.settle_budget(root.run_id, grant.reservation, 10_000, 0.5)
    refused = store.reserve_budget(root.run_id, root, limits, 10, 0.1, HOLD)
    assert refused.reservation is None and refused.spent


def test_calls_in_flight_hold_the_rest_without_spending_it(store: Store) -> None:
    root, other = _runs(store, 2)
    tree = root.run_id
    held = store.reserve_budget(tree, root, BUDGET, 60, 0.0, HOLD)
    second = store.reserve_budget(tree, other, BUDGET, 60, 0.0, HOLD)
    assert held.reservation is not None and second.reservation is not None
    # 0 spent + 120 held: nothing left, but nothing spent either.
    busy = store.reserve_budget(tree, other, BUDGET, 60, 0.0, HOLD)
    assert busy.reservation is None and not busy.spent
    store.settle_budget(tree, held.reservation, 0, 0.0)  # the call failed: given back
    store.settle_budget(tree, second.reservation, 20, 0.0)
    after = store.reserve_budget(tree, other, BUDGET, 60, 0.0, HOLD)
    assert after.reservation is not None
    budget = store.budget(tree)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (20, 60)


def test_a_settlement_counts_once(store: Store) -> None:
    (root,) = _runs(store, 1)
    grant = store.reserve_budget(root.run_id, root, BUDGET, 50, 0.0, HOLD)
    assert grant.reservation is not None
    store.settle_budget(root.run_id, grant.reservation, 30, 0.0)
    store.settle_budget(root.run_id, grant.reservation, 30, 0.0)  # a retried settlement
    budget = store.budget(root.run_id)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (30, 0)


def test_a_reservation_stops_counting_with_its_runs_lease(store: Store) -> None:
    enqueue(store)
    enqueue(store)
    dying = claim_one(store, "worker:dies", SHORT_LEASE).lease
    root = claim_one(store, "worker:root", 30).lease
    tree = root.run_id
    assert store.reserve_budget(tree, dying, BUDGET, 100, 0.0, HOLD).reservation is not None
    assert store.reserve_budget(tree, root, BUDGET, 1, 0.0, HOLD).reservation is None
    expire()  # the worker that reserved all of it died: its call counts no more
    assert store.reserve_budget(tree, root, BUDGET, 1, 0.0, HOLD).reservation is not None
    # ... and a run whose lease has expired reserves nothing.
    late = store.reserve_budget(tree, dying, BUDGET, 1, 0.0, HOLD)
    assert late.reservation is None


def test_reserve_stalled_after_its_read_vs_settle_and_another_reserve(store: Store) -> None:
    """A reservation stalls between the ledger's lock and its compare-and-set; a settlement
    and another reservation of the tree meanwhile wait for it, then see what it wrote."""
    root, first, second = _runs(store, 3)
    tree = root.run_id
    flying = store.reserve_budget(tree, first, BUDGET, 60, 0.0, HOLD)
    assert flying.reservation is not None
    stalled, resume = threading.Event(), threading.Event()
    stalling = threading.get_ident()
    hook = store._before_reserve  # type: ignore[attr-defined]

    def stall() -> None:
        if threading.get_ident() == stalling:
            stalled.set()
            assert resume.wait(10)
        hook()

    store._before_reserve = stall  # type: ignore[attr-defined]
    results: dict[str, Any] = {}

    def reserve_stalled() -> None:
        nonlocal stalling
        stalling = threading.get_ident()
        results["stalled"] = store.reserve_budget(tree, root, BUDGET, 60, 0.0, HOLD)

    def settle() -> None:
        assert flying.reservation is not None
        store.settle_budget(tree, flying.reservation, 50, 0.0)

    def reserve_other() -> None:
        results["other"] = store.reserve_budget(tree, second, BUDGET, 60, 0.0, HOLD)

    t0 = threading.Thread(target=reserve_stalled)
    t0.start()
    assert stalled.wait(10)
    others = [threading.Thread(target=settle), threading.Thread(target=reserve_other)]
    for t in others:
        t.start()
    for t in others:
        t.join(0.3)
    assert all(t.is_alive() for t in others), "the ledger was written under a reservation"
    resume.set()
    for t in [t0, *others]:
        t.join(10)
        assert not t.is_alive()
    # The stalled one read 0 spent + 60 held: granted. Then whichever order the two others
    # took, the second reservation found nothing left, and nothing of it spent.
    assert results["stalled"].reservation is not None
    assert results["other"].reservation is None and not results["other"].spent
    budget = store.budget(tree)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (50, 60)


ESTIMATE = 30
TREE_BUDGET = 2000


def _spend_in_process(url: str, tree: str, lease: Lease, start: Any, out: Any) -> None:
    """One worker's calls on the tree's ledger: reserve, 'call', settle what it used, until
    the budget is spent."""
    store = open_store(url)
    rng = random.Random(lease.owner)
    used, calls = 0, 0
    start.wait(60)  # every worker at once
    while True:
        grant = store.reserve_budget(tree, lease, (TREE_BUDGET, None), ESTIMATE, 0.0, HOLD)
        if grant.reservation is None:
            if grant.spent:
                break
            time.sleep(0.002)  # the others' calls in flight hold the rest: they settle soon
            continue
        time.sleep(0.005)  # the call in flight, while the other workers reserve theirs
        actual = rng.randint(1, ESTIMATE)
        store.settle_budget(tree, grant.reservation, actual, 0.0)
        used += actual
        calls += 1
    store.close()
    out.put((used, calls))


def test_workers_in_separate_processes_never_overspend_a_tree(store: Store) -> None:
    leases = _runs(store, 3)
    tree = leases[0].run_id
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(len(leases)), ctx.Queue()
    procs = [
        ctx.Process(target=_spend_in_process, args=(store.url, tree, lease, start, out))
        for lease in leases
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=90) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    spent = sum(used for used, _ in results)
    budget = store.budget(tree)
    assert budget is not None
    assert budget.spent_tokens == spent  # every call settled, each once
    assert budget.reserved_tokens == 0
    # Each call was admitted while spent + held < budget, its use at most its estimate: the
    # tree overspends by less than one call's estimate.
    assert TREE_BUDGET <= spent < TREE_BUDGET + ESTIMATE
    assert all(calls > 0 for _, calls in results), results
