"""Store conformance for provider capacity (SPEC §17), on every backend: the buckets, the
calls in flight, the circuit and parking."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from tenure import Limits
from tenure._types import EventKind, RunStatus
from tenure.store import Lease, Store

from .helpers import SHORT_LEASE, claim_one, completed, enqueue, expire

HOLD = 60.0


def running(store: Store, lease: float = 30.0) -> Lease:
    enqueue(store)
    return claim_one(store, lease=lease).lease


def test_an_unregistered_model_has_no_row(store: Store) -> None:
    assert store.reserve_capacity("nobody", running(store), 10, HOLD) is None
    assert store.models() == []


def test_requests_come_a_tenth_of_the_minute_at_once_then_evenly(store: Store) -> None:
    store.set_model_limits("m", Limits(requests_per_minute=60))
    lease = running(store)
    grants = [store.reserve_capacity("m", lease, 1, HOLD) for _ in range(7)]
    assert all(g is not None and g.reservation for g in grants[:6])
    refused = grants[6]
    assert refused is not None and refused.reservation is None and not refused.circuit_open
    assert 0.5 < refused.wait <= 1.0  # one a second at 60 a minute


def test_tokens_are_reserved_then_settled_to_the_actual_use(store: Store) -> None:
    store.set_model_limits("m", Limits(tokens_per_minute=6000))  # a bucket of 600
    lease = running(store)
    first = store.reserve_capacity("m", lease, 500, HOLD)
    assert first is not None and first.reservation
    refused = store.reserve_capacity("m", lease, 500, HOLD)
    assert refused is not None and refused.reservation is None
    assert 3.0 < refused.wait <= 4.0  # 400 more tokens at 100 a second
    store.settle_capacity("m", first.reservation, 500 - 100)  # it used only 100
    (state,) = store.models("m")
    assert state.tokens is not None and 500 <= state.tokens <= 520
    again = store.reserve_capacity("m", lease, 500, HOLD)
    assert again is not None and again.reservation


def test_a_call_larger_than_the_bucket_waits_for_a_full_one_and_then_owes(store: Store) -> None:
    store.set_model_limits("m", Limits(tokens_per_minute=600))  # a bucket of 60
    lease = running(store)
    big = store.reserve_capacity("m", lease, 1000, HOLD)
    assert big is not None and big.reservation  # a full bucket pays a call of any size
    (state,) = store.models("m")
    assert state.tokens is not None and state.tokens < -900
    refused = store.reserve_capacity("m", lease, 1, HOLD)
    assert refused is not None and refused.reservation is None and refused.wait > 90


def test_concurrency_counts_calls_in_flight_until_settled(store: Store) -> None:
    store.set_model_limits("m", Limits(concurrency=2))
    lease = running(store)
    a = store.reserve_capacity("m", lease, 1, HOLD)
    b = store.reserve_capacity("m", lease, 1, HOLD)
    assert a is not None and a.reservation and b is not None and b.reservation
    refused = store.reserve_capacity("m", lease, 1, HOLD)
    assert refused is not None and refused.reservation is None and refused.wait > 0
    assert store.models("m")[0].in_use == 2
    store.settle_capacity("m", a.reservation, 1)  # a failed call releases all it reserved
    assert store.models("m")[0].in_use == 1
    c = store.reserve_capacity("m", lease, 1, HOLD)
    assert c is not None and c.reservation


def test_a_dead_workers_call_holds_nothing_past_its_lease(store: Store) -> None:
    store.set_model_limits("m", Limits(concurrency=1))
    dead = running(store, lease=SHORT_LEASE)
    held = store.reserve_capacity("m", dead, 1, HOLD)
    assert held is not None and held.reservation
    alive = running(store)
    assert store.reserve_capacity("m", alive, 1, HOLD).reservation is None  # type: ignore[union-attr]
    expire()  # the worker died: nobody renews its lease
    assert store.models("m")[0].in_use == 0
    granted = store.reserve_capacity("m", alive, 1, HOLD)
    assert granted is not None and granted.reservation


def test_a_finished_run_holds_nothing_and_a_hold_expires(store: Store) -> None:
    store.set_model_limits("m", Limits(concurrency=1))
    lease = running(store)
    assert store.reserve_capacity("m", lease, 1, HOLD).reservation  # type: ignore[union-attr]
    assert store.settle(lease, completed()) is not None  # settled without settling its call
    other = running(store)
    short = store.reserve_capacity("m", other, 1, 0.2)
    assert short is not None and short.reservation
    expire(0.2)  # its hold ran out although its run is still running
    assert store.reserve_capacity("m", other, 1, HOLD).reservation  # type: ignore[union-attr]


def test_concurrent_reservations_never_exceed_the_limits(store: Store) -> None:
    store.set_model_limits("m", Limits(requests_per_minute=60, concurrency=4))  # 6 at once
    lease = running(store)
    granted: list[str] = []
    lock = threading.Lock()

    def reserve() -> None:
        for _ in range(5):
            grant = store.reserve_capacity("m", lease, 1, HOLD)
            if grant is not None and grant.reservation:
                with lock:
                    granted.append(grant.reservation)

    threads = [threading.Thread(target=reserve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 4  # concurrency binds first; the bucket would have allowed 6
    assert store.models("m")[0].in_use == 4


def test_an_open_circuit_refuses_everybody_until_it_closes(store: Store) -> None:
    store.set_model_limits("m", Limits())
    lease = running(store)
    store.open_circuit("m", 30)
    store.open_circuit("m", 1)  # never shortened
    refused = store.reserve_capacity("m", lease, 1, HOLD)
    assert refused is not None and refused.reservation is None and refused.circuit_open
    assert 25 < refused.wait <= 30
    (state,) = store.models("m")
    assert state.circuit_open_until is not None
    assert timedelta(seconds=25) < state.circuit_open_until - state.now <= timedelta(seconds=30)


def test_a_closed_circuit_is_shown_as_none(store: Store) -> None:
    store.set_model_limits("m", Limits())
    store.open_circuit("m", 0.2)
    expire(0.2)
    assert store.models("m")[0].circuit_open_until is None
    assert store.reserve_capacity("m", running(store), 1, HOLD).reservation  # type: ignore[union-attr]


def test_changed_limits_keep_the_levels_up_to_the_new_capacity(store: Store) -> None:
    store.set_model_limits("m", Limits(requests_per_minute=120))  # a bucket of 12
    lease = running(store)
    for _ in range(10):
        assert store.reserve_capacity("m", lease, 1, HOLD).reservation  # type: ignore[union-attr]
    store.set_model_limits("m", Limits(requests_per_minute=60, tokens_per_minute=1000))
    (state,) = store.models("m")
    assert state.limits == Limits(requests_per_minute=60, tokens_per_minute=1000)
    # About 2 were left (plus a second or two of refill), not a new full bucket of 6.
    assert state.requests is not None and 2 <= state.requests < 5.5
    assert state.tokens == pytest.approx(100)  # a new limit starts full


def test_park_requeues_without_charging_and_records_throttled(store: Store) -> None:
    lease = running(store)
    assert store.park(lease, 30.0, {"model": "m", "why": "capacity", "delay": 30.0})
    run = store.get_run(lease.run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.requeue_count == 0 and run.lease_expires is None and run.claimed_by == ""
    assert timedelta(seconds=28) < run.available_at - store.now() <= timedelta(seconds=30)
    last = store.events(lease.run_id)[-1]
    assert last.kind is EventKind.THROTTLED and last.payload["why"] == "capacity"
    assert last.lease_token == lease.token
    assert not store.park(lease, 1.0, {})  # no longer ours
    assert store.claim("worker:b", None, 30, 1) == []  # not claimable before its time
