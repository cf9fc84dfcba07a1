"""An enqueued run's row holds what its NewRun gave, whichever of its optional values
(idempotency key, concurrency key, parent and root) are None: the SQLite store writes the
None ones into its statement as NULL and binds the others by position."""

from __future__ import annotations

import itertools

import pytest

from tenure._requests import new_run_id
from tenure._types import EventKind
from tenure.store import NewEvent, NewRun, Store

from .helpers import REQUEST, enqueue


@pytest.mark.parametrize(
    ("key", "concurrency_key", "child"), list(itertools.product([False, True], repeat=3))
)
def test_each_optional_value_is_stored_as_given(
    store: Store, key: bool, concurrency_key: bool, child: bool
) -> None:
    parent = enqueue(store) if child else None
    run = NewRun(
        new_run_id(),
        "default",
        REQUEST,
        "key-1" if key else None,
        events=(NewEvent(EventKind.REQUEST, {"prompt": "hi"}),),
        parent_id=parent,
        root_id=parent,
        priority=3,
        concurrency_key="tenant-1" if concurrency_key else None,
    )
    run_id, created = store.enqueue(run)
    assert created and run_id == run.run_id
    got = store.get_run(run_id)
    assert got is not None
    assert got.idempotency_key == run.idempotency_key
    assert got.concurrency_key == run.concurrency_key
    assert (got.parent_id, got.root_id) == (parent, parent or run_id)  # a root is its own
    assert got.priority == 3
    if key:  # the key is taken now: the same key gives back this run
        again, created = store.enqueue(NewRun(new_run_id(), "default", REQUEST, "key-1"))
        assert (again, created) == (run_id, False)
