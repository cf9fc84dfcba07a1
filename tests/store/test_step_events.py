"""Store conformance: what a step and an enqueue write, event by event (PostgreSQL writes a
step's UPDATE and its events in one statement, and an enqueue's run and its event in
another; SQLite in two). Runs against every backend in BACKENDS."""

from __future__ import annotations

import math
import uuid

from tenure._types import EventKind
from tenure.store import NewEvent, NewRun, Store

from .helpers import as_enqueued, claim_one, enqueue, new_run, step


def test_step_events_carry_the_lease_and_consecutive_sequences(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.record_step(lease, 30, [step(n=1)]) == [2]
    assert store.record_step(lease, 30, [step(n=2), step(EventKind.TOOL, n=3)]) == [3, 4]
    events = store.events(run_id, after=1)
    assert [(e.sequence, e.attempt, e.lease_token) for e in events] == [
        (s, lease.attempt, lease.token) for s in (2, 3, 4)
    ]
    assert [str(e.kind) for e in events] == ["llm", "llm", "tool"]


def test_a_step_without_events_renews_the_lease_and_appends_nothing(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store, lease=1).lease
    before = store.get_run(run_id).lease_expires  # type: ignore[union-attr]
    assert store.record_step(lease, 60, []) == []
    run = store.get_run(run_id)
    assert run is not None and run.lease_expires is not None and before is not None
    assert run.lease_expires > before
    assert [e.sequence for e in store.events(run_id)] == [0, 1]


def test_the_same_step_recorded_twice_is_two_steps(store: Store) -> None:
    """A store that recognises a retry of a step (PostgreSQL: by a nonce drawn for each call)
    must never take a second call with the same events for a retry of the first."""
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.record_step(lease, 30, [step(n=1)]) == [2]
    assert store.record_step(lease, 30, [step(n=1)]) == [3]
    assert store.record_step(lease, 30, []) == []
    assert store.record_step(lease, 30, []) == []
    assert store.record_step(lease, 30, [step(n=1)]) == [4]
    assert [e.sequence for e in store.events(run_id)] == [0, 1, 2, 3, 4]


def test_payloads_with_null_keep_it_and_values_json_cannot_hold_become_text(
    store: Store,
) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    plain = {"a": None, "b": [1.5, None, "x"], "c": {"d": None}}
    odd = {"a": None, "nan": math.nan, "inf": [None, math.inf], "pair": (1, None)}
    assert store.record_step(lease, 30, [step(**plain), step(**odd)]) == [2, 3]
    first, second = (e.payload for e in store.events(run_id, after=1))
    assert first == plain
    assert second == {"a": None, "nan": "nan", "inf": [None, "inf"], "pair": [1, None]}


def test_an_enqueue_writes_its_run_and_events_once(store: Store) -> None:
    run = new_run(key="once")
    run_id, created = store.enqueue(run)
    assert (run_id, created) == (run.run_id, True)
    again = new_run(key="once")
    assert store.enqueue(again) == (run_id, False)
    assert store.get_run(again.run_id) is None
    events = store.events(run_id)
    assert [(e.sequence, str(e.kind), e.attempt, e.lease_token) for e in events] == [
        (i, str(ev.kind), 0, 0) for i, ev in enumerate(run.events)
    ]
    assert [e.payload for e in events] == [dict(ev.payload) for ev in run.events]


def test_the_request_event_of_an_enqueue_holds_the_stored_request(store: Store) -> None:
    request = {"prompt": 'ünïcode "quoted"\nline', "nested": {"b": 1, "a": [None, 2.5]}}
    run = as_enqueued(request, key="verbatim")
    assert store.enqueue(run) == (run.run_id, True)
    assert store.enqueue(as_enqueued(request, key="verbatim")) == (run.run_id, False)
    (event,) = store.events(run.run_id)
    assert (event.sequence, event.kind, event.payload) == (0, EventKind.REQUEST, request)
    stored = store.get_run(run.run_id, with_request=True)
    assert stored is not None and stored.request == request


def test_an_enqueue_whose_events_are_not_just_its_request_stores_each_as_given(
    store: Store,
) -> None:
    run = new_run()  # its request event's payload differs from the stored request
    other = NewRun(
        str(uuid.uuid4()),
        "default",
        run.request,
        None,
        events=(
            NewEvent(EventKind.REQUEST, {"prompt": "own"}, '{"prompt": "own"}'),
            NewEvent(EventKind.REDRIVEN, {"why": "test"}),
        ),
    )
    for made in (run, other):
        assert store.enqueue(made) == (made.run_id, True)
        events = store.events(made.run_id)
        assert [(e.sequence, e.payload) for e in events] == [
            (i, dict(ev.payload)) for i, ev in enumerate(made.events)
        ]


def test_a_settle_stores_values_a_parameter_cannot_hold_as_every_store_does(
    store: Store,
) -> None:
    """SQLite binds a settle's values as parameters; one that a parameter cannot hold as it
    stands (a cost that is not finite, text that is not UTF-8) is stored as the batch's JSON
    stores it, the same run after run: the settle applies, never fails."""
    from tenure._types import RunStatus, TerminationReason, Usage
    from tenure.store import Settlement

    outputs = []
    for output, cost in (("a\udcffb", 0.5), ("ok", math.nan), ("ok", 0.5)):
        run_id = enqueue(store)
        lease = claim_one(store).lease
        usage = Usage(input_tokens=1, output_tokens=2, cost=cost)
        settlement = Settlement(
            RunStatus.COMPLETED, TerminationReason.COMPLETED, output=output, usage=usage
        )
        assert store.settle(lease, settlement) is not None
        run = store.get_run(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
        outputs.append((run.output, run.input_tokens, run.output_tokens))
    assert outputs[1:] == [("ok", 1, 2), ("ok", 1, 2)]
    assert outputs[0][0] is not None and outputs[0][1:] == (1, 2)
