"""SPEC §21 races on the store, both dialects: a parent's write that sets it waiting for
its children against the transaction that settles its last child, started at the same
instant, round after round. Whichever commits first, the parent never ends up waiting for
children that have all ended (nothing would wake it)."""

from __future__ import annotations

import dataclasses

from tenure._types import RunStatus
from tenure.store import Lease, Store

from .helpers import completed, new_run
from .test_races import ROUNDS, race


def _claim(store: Store, run_id: str, owner: str) -> Lease:
    claimed = store.claim_run(run_id, owner, 30)
    assert claimed is not None
    return claimed.lease


def test_the_last_child_settling_as_the_parent_goes_waiting_always_wakes_it(
    store: Store,
) -> None:
    for i in range(ROUNDS):
        parent = new_run()
        store.enqueue(parent)
        parent_lease = _claim(store, parent.run_id, f"worker:p{i}")
        children = [
            dataclasses.replace(
                new_run(),
                parent_id=parent.run_id,
                root_id=parent.run_id,
                idempotency_key=f"{parent.run_id}:{n}",
            )
            for n in range(2)
        ]
        store.enqueue_many(children)
        first, last = (_claim(store, c.run_id, f"worker:c{i}") for c in children)
        assert store.settle(first, completed()) is not None
        ids = [c.run_id for c in children]
        waited, settled = race(
            lambda lease=parent_lease, ids=ids: store.wait_for_children(lease, ids, None),
            lambda lease=last: store.settle(lease, completed()),
        )
        assert settled is not None
        run = store.get_run(parent.run_id)
        assert run is not None
        # Waiting with both children ended would strand it: never.
        assert run.status is not RunStatus.WAITING_FOR_CHILDREN, (waited, run)
        if waited is False:  # the child settled first: the parent goes on, still running
            assert run.status is RunStatus.RUNNING and run.claimed_by == f"worker:p{i}"
        else:  # the parent waited first: the child's settle woke it
            assert waited and run.status is RunStatus.QUEUED and run.waiting is None
