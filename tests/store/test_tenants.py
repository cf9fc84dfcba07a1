"""A queue shared by many tenants (SPEC §22), on both stores: priorities and concurrency keys
enforced by the claim."""

from __future__ import annotations

from tenure._requests import new_run_id
from tenure._types import EventKind, RunStatus
from tenure.store import NewEvent, NewRun, Store
from tests.store.helpers import REQUEST, claim_one


def put(
    store: Store,
    *,
    priority: int = 0,
    key: str | None = None,
    queue: str = "default",
) -> str:
    run = NewRun(
        run_id=new_run_id(),
        queue=queue,
        request=REQUEST,
        idempotency_key=None,
        events=(NewEvent(EventKind.REQUEST, {"prompt": "hi"}),),
        priority=priority,
        concurrency_key=key,
    )
    run_id, created = store.enqueue(run)
    assert created
    return run_id


def test_a_higher_priority_is_claimed_first_then_the_oldest(store: Store) -> None:
    low = put(store, priority=-5)
    first = put(store)
    urgent = put(store, priority=10)
    second = put(store)
    taken = [claim_one(store).lease.run_id for _ in range(4)]
    assert taken == [urgent, first, second, low]


def test_a_key_never_runs_more_than_its_limit(store: Store) -> None:
    assert store.set_concurrency_limit("tenant-a", 2)
    a = [put(store, key="tenant-a") for _ in range(5)]
    b = put(store, key="tenant-b")
    free = put(store)
    taken = {c.lease.run_id for c in store.claim("worker:a", None, 30, 10)}
    assert taken == {a[0], a[1], b, free}
    assert store.claim("worker:a", None, 30, 10) == []
    # Those passed over were not claimed: no attempt, no token, no start.
    waiting = store.get_run(a[2])
    assert waiting is not None
    assert waiting.status is RunStatus.QUEUED
    assert (waiting.lease_token, waiting.attempt, waiting.started_at) == (0, 0, None)
    keys = {k.key: k for k in store.concurrency_keys()}
    assert (keys["tenant-a"].limit, keys["tenant-a"].running, keys["tenant-a"].queued) == (2, 2, 3)
    assert keys["tenant-a"].full and not keys["tenant-b"].full
    assert keys["tenant-b"].limit is None


def test_a_claim_of_one_named_run_keeps_to_the_limit(store: Store) -> None:
    store.set_concurrency_limit("k", 1)
    first, second = put(store, key="k"), put(store, key="k")
    assert store.claim_run(first, "worker:a", 30) is not None
    assert store.claim_run(second, "worker:a", 30) is None
    assert store.set_concurrency_limit("k", None)
    assert not store.set_concurrency_limit("k", None)
    assert store.claim_run(second, "worker:a", 30) is not None


def keyed(store: Store, key: str | None, n: int, priority: int = 0) -> list[str]:
    runs = [
        NewRun(
            run_id=new_run_id(),
            queue="default",
            request=REQUEST,
            idempotency_key=None,
            events=(NewEvent(EventKind.REQUEST, {"prompt": "hi"}),),
            priority=priority,
            concurrency_key=key,
        )
        for _ in range(n)
    ]
    return [run_id for run_id, _ in store.enqueue_many(runs)]


def test_a_key_with_one_run_is_not_starved_by_a_key_with_ten_thousand(store: Store) -> None:
    big = set(keyed(store, "tenant-a", 10_000))
    (small,) = keyed(store, "tenant-b", 1)
    first = [claim_one(store).lease.run_id for _ in range(2)]
    assert small in first
    assert set(first) - {small} <= big


def test_keys_of_equal_priority_take_turns(store: Store) -> None:
    owner = {}
    for key in ("a", "b", "c"):
        owner |= dict.fromkeys(keyed(store, key, 3), key)
    urgent = keyed(store, "c", 1, priority=1)
    taken = [claim_one(store).lease.run_id for _ in range(10)]
    assert taken[0] == urgent[0]
    assert [owner[t] for t in taken[1:]] == ["a", "b", "c"] * 3
