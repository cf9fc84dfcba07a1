"""Store conformance: cursor pages over runs and counts by status and reason."""

from __future__ import annotations

from tenure._types import RunStatus, TerminationReason
from tenure.store import Store

from .helpers import claim_one, enqueue, new_run


def test_cursor_pages_cover_every_run_once_in_listing_order(store: Store) -> None:
    # One transaction: on PostgreSQL these share created_at, so the id breaks the tie.
    store.enqueue_many([new_run() for _ in range(4)])
    for _ in range(3):
        enqueue(store)
    expected = [r.id for r in store.runs(limit=100)]
    assert len(expected) == 7

    pages: list[list[str]] = [[r.id for r in store.runs(limit=3)]]
    while True:
        page = [r.id for r in store.runs_after(pages[-1][-1], limit=3)]
        if not page:
            break
        pages.append(page)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [run_id for page in pages for run_id in page] == expected


def test_cursor_pages_keep_their_filters(store: Store) -> None:
    a = [enqueue(store, queue="a") for _ in range(3)]
    enqueue(store, queue="b")
    first = store.runs(queue="a", limit=1)
    rest = store.runs_after(first[0].id, queue="a", limit=10)
    assert sorted([first[0].id, *(r.id for r in rest)]) == sorted(a)
    assert all(r.request is None for r in rest)
    assert store.runs_after(first[0].id, status=RunStatus.RUNNING, limit=10) == []


def test_a_cursor_naming_no_run_gives_an_empty_page(store: Store) -> None:
    enqueue(store)
    assert store.runs_after("no-such-run", limit=10) == []


def test_run_counts_by_status_and_reason(store: Store) -> None:
    assert store.run_counts() == {}
    for _ in range(3):
        enqueue(store)
    claim_one(store)
    cancelled = enqueue(store)
    assert store.cancel(cancelled)
    assert store.run_counts() == {
        (RunStatus.QUEUED, None): 2,
        (RunStatus.RUNNING, None): 1,
        (RunStatus.CANCELLED, TerminationReason.CANCELLED): 1,
    }
