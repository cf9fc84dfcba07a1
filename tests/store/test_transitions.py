"""Store conformance: every transition of SPEC §5 is one guarded statement that reports
whether it applied. Runs against every backend in BACKENDS."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tenure._errors import StoreError
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason, ToolEffect
from tenure.store import Lease, NewEvent, Settlement, Store

from .helpers import (
    SHORT_LEASE,
    claim_one,
    completed,
    enqueue,
    expire,
    new_run,
    stale_for,
    step,
)


def kinds(store: Store, run_id: str) -> list[str]:
    return [str(e.kind) for e in store.events(run_id)]


def sequences(store: Store, run_id: str) -> list[int]:
    return [e.sequence for e in store.events(run_id)]


def test_schema_is_versioned_and_migrating_twice_changes_nothing(store: Store) -> None:
    version = store.schema_version()
    assert version >= 1
    store.migrate()
    assert store.schema_version() == version


def test_database_clock_is_utc_and_current(store: Store) -> None:
    now = store.now()
    assert now.tzinfo is not None
    assert abs(now - datetime.now(UTC)) < timedelta(seconds=5)


def test_enqueue_creates_a_queued_run_with_its_request_event(store: Store) -> None:
    run_id = enqueue(store)
    run = store.get_run(run_id, with_request=True)
    assert run is not None
    assert run.status is RunStatus.QUEUED
    assert run.termination_reason is None
    assert run.lease_token == 0 and run.requeue_count == 0 and run.attempt == 0
    assert run.lease_expires is None and run.claimed_by == ""
    assert run.request == {"prompt": "hi", "script": [{"say": "ok"}]}
    assert kinds(store, run_id) == ["request"]
    assert store.get_run(run_id) is not None
    assert store.get_run(run_id).request is None  # type: ignore[union-attr]


def test_enqueue_with_a_taken_idempotency_key_returns_the_existing_run(store: Store) -> None:
    first, created = store.enqueue(new_run(key="order-7"))
    second, created_again = store.enqueue(new_run(key="order-7"))
    assert created and not created_again
    assert second == first
    assert len(store.runs()) == 1


def test_a_batch_enqueue_tells_each_taken_key_by_what_it_inserted(store: Store) -> None:
    """Several runs in one transaction (not the one-run path): a key taken before the batch,
    or earlier in it, inserts nothing and answers with the run that holds it."""
    ((held, _),) = store.enqueue_many([new_run(key="order-1")])
    out = store.enqueue_many(
        [new_run(key="order-1"), new_run(key="order-2"), new_run(key="order-2"), new_run()]
    )
    assert [created for _, created in out] == [False, True, False, True]
    assert out[0][0] == held and out[2][0] == out[1][0]
    assert len(store.runs()) == 3


def test_enqueue_with_delay_is_not_claimable_before_its_time(store: Store) -> None:
    run_id = enqueue(store, delay=SHORT_LEASE)
    assert store.claim("worker:a", None, 30, 10) == []
    assert store.claim_run(run_id, "worker:a", 30) is None
    expire()
    assert [c.lease.run_id for c in store.claim("worker:a", None, 30, 10)] == [run_id]


def test_claim_sets_lease_token_attempt_and_appends_claimed(store: Store) -> None:
    run_id = enqueue(store)
    claimed = claim_one(store, "worker:h:1:1", lease=30)
    assert claimed.lease == Lease(run_id, "worker:h:1:1", 1, 0)
    assert claimed.requeue_count == 0
    run = store.get_run(run_id)
    assert run is not None
    assert run.status is RunStatus.RUNNING and run.claimed_by == "worker:h:1:1"
    assert run.lease_expires is not None and run.started_at is not None
    assert timedelta(seconds=25) < run.lease_expires - store.now() <= timedelta(seconds=30)
    assert kinds(store, run_id) == ["request", "claimed"]
    assert store.events(run_id)[-1].payload["lease_token"] == 1


def test_claim_respects_queues_limit_and_order(store: Store) -> None:
    a = enqueue(store, queue="mail")
    b = enqueue(store, queue="default")
    c = enqueue(store, queue="mail")
    got = store.claim("worker:a", ["mail"], 30, 1)
    assert [x.lease.run_id for x in got] == [a]
    got = store.claim("worker:a", ["mail", "other"], 30, 5)
    assert [x.lease.run_id for x in got] == [c]
    got = store.claim("worker:a", None, 30, 5)
    assert [x.lease.run_id for x in got] == [b]


def test_claim_of_a_running_or_terminal_run_does_not_win(store: Store) -> None:
    run_id = enqueue(store)
    claimed = claim_one(store)
    assert store.claim_run(run_id, "worker:b", 30) is None
    assert store.settle(claimed.lease, completed()) is not None
    assert store.claim_run(run_id, "worker:b", 30) is None
    assert store.claim("worker:b", None, 30, 10) == []


def test_start_creates_a_running_interactive_run_with_token_1(store: Store) -> None:
    run = new_run(request=None)
    lease = store.start(run, "run:h:1", 30)
    assert lease == Lease(run.run_id, "run:h:1", 1, 0)
    row = store.get_run(run.run_id, with_request=True)
    assert row is not None and row.status is RunStatus.RUNNING and row.request is None


def test_record_step_renews_lease_appends_in_order_and_counts_usage(store: Store) -> None:
    from tenure._types import Usage

    run_id = enqueue(store)
    lease = claim_one(store, lease=1).lease
    before = store.get_run(run_id).lease_expires  # type: ignore[union-attr]
    seqs = store.record_step(lease, 60, [step(n=1), step(EventKind.TOOL, n=2)], Usage(3, 4, 0.5))
    assert seqs == [2, 3]
    run = store.get_run(run_id)
    assert run is not None and before is not None and run.lease_expires is not None
    assert run.lease_expires - before > timedelta(seconds=50)
    assert (run.input_tokens, run.output_tokens, run.cost) == (3, 4, 0.5)
    assert sequences(store, run_id) == [0, 1, 2, 3]
    assert [e.payload.get("n") for e in store.events(run_id, after=1)] == [1, 2]


def test_record_step_with_a_wrong_token_or_owner_is_lost_and_writes_nothing(
    store: Store,
) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    wrong_token = Lease(run_id, lease.owner, lease.token + 1, 0)
    wrong_owner = Lease(run_id, "worker:other", lease.token, 0)
    assert store.record_step(wrong_token, 30, [step()]) is None
    assert store.record_step(wrong_owner, 30, [step()]) is None
    assert kinds(store, run_id) == ["request", "claimed"]


def test_mark_and_clear_fence(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store, lease=1).lease
    assert store.mark_fence(lease, ToolEffect.NON_IDEMPOTENT_WRITE, 120)
    run = store.get_run(run_id)
    assert run is not None and run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert run.lease_expires is not None
    assert run.lease_expires - store.now() > timedelta(seconds=100)  # covers the tool
    seq = store.clear_fence(lease, 30, step(EventKind.TOOL, name="send"))
    assert seq == 2
    run = store.get_run(run_id)
    assert run is not None and run.pending_effect is None
    assert kinds(store, run_id)[-1] == "tool"


def test_fence_writes_under_a_lost_lease_do_not_apply(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    stranger = Lease(run_id, lease.owner, lease.token + 5, 0)
    assert not store.mark_fence(stranger, ToolEffect.IDEMPOTENT_WRITE, 30)
    assert store.clear_fence(stranger, 30, step(EventKind.TOOL)) is None
    run = store.get_run(run_id)
    assert run is not None and run.pending_effect is None
    assert kinds(store, run_id) == ["request", "claimed"]


def test_requeue_charges_budget_sets_backoff_and_clears_lease_and_fence(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.mark_fence(lease, ToolEffect.IDEMPOTENT_WRITE, 30)
    assert store.requeue(lease, 60, FailureClass.RATE_LIMIT, "429")
    run = store.get_run(run_id)
    assert run is not None
    assert run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert run.lease_expires is None and run.claimed_by == "" and run.pending_effect is None
    assert run.error_class is FailureClass.RATE_LIMIT and run.error == "429"
    assert run.available_at - store.now() > timedelta(seconds=55)
    assert store.claim("worker:b", None, 30, 10) == []  # backing off
    event = store.events(run_id)[-1]
    assert event.kind is EventKind.REQUEUED and event.payload["cause"] == "failure"
    assert not store.requeue(lease, 0, FailureClass.RATE_LIMIT, "again")  # no longer ours


def test_release_hands_back_without_charging_and_refuses_a_standing_write(
    store: Store,
) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.release(lease)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    again = claim_one(store, "worker:b")
    assert again.lease.attempt == 1 and again.lease.token == 2
    assert store.mark_fence(again.lease, ToolEffect.NON_IDEMPOTENT_WRITE, 30)
    assert not store.release(again.lease)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING


def test_settle_completed_clears_request_lease_and_fence(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.settle(lease, completed("42")) is not None
    run = store.get_run(run_id, with_request=True)
    assert run is not None
    assert run.status is RunStatus.COMPLETED
    assert run.termination_reason is TerminationReason.COMPLETED
    assert run.output == "42" and run.request is None and run.lease_expires is None
    assert run.finished_at is not None
    assert kinds(store, run_id)[-1] == "assembled"


def test_dead_letter_keeps_request_and_fence_as_evidence(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.mark_fence(lease, ToolEffect.NON_IDEMPOTENT_WRITE, 30)
    settlement = Settlement(
        RunStatus.FAILED,
        TerminationReason.NOT_RETRYABLE,
        error_class=FailureClass.AUTH,
        error="401",
        events=(step(EventKind.DEAD_LETTERED, reason="not_retryable"),),
    )
    assert store.settle(lease, settlement) is not None
    run = store.get_run(run_id, with_request=True)
    assert run is not None and run.is_dead_letter
    assert run.request is not None
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert run.error_class is FailureClass.AUTH


def test_terminal_is_terminal(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.settle(lease, completed()) is not None
    assert store.settle(lease, completed("twice")) is None
    assert not store.cancel(run_id)
    assert store.record_step(lease, 30, [step()]) is None
    assert not store.mark_fence(lease, ToolEffect.IDEMPOTENT_WRITE, 30)
    assert not store.requeue(lease, 0, FailureClass.TIMEOUT, "x")
    assert not store.release(lease)
    assert not store.redrive(run_id, force=True)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.output == "done"


def test_cancel_any_non_terminal_run(store: Store) -> None:
    queued = enqueue(store)
    running = enqueue(store)
    lease = store.claim_run(running, "worker:a", 30)
    assert lease is not None
    assert store.cancel(queued) and store.cancel(running)
    for run_id in (queued, running):
        run = store.get_run(run_id, with_request=True)
        assert run is not None
        assert run.status is RunStatus.CANCELLED
        assert run.termination_reason is TerminationReason.CANCELLED
        assert run.request is None and run.lease_expires is None
        assert kinds(store, run_id)[-1] == "cancelled"
    assert not store.cancel(queued)
    assert store.record_step(lease.lease, 30, [step()]) is None
    assert not store.cancel("no-such-run")


def test_cancel_numbers_each_descendants_event_where_its_row_stands(store: Store) -> None:
    """A cancel takes the run's tree with it (SPEC §21): each child and grandchild still
    going gets one `cancelled` event naming its own parent, after the steps it recorded and
    at the sequence its row now holds (what the next event of that run would follow)."""
    root = new_run()
    store.enqueue(root)

    def child_of(parent_id: str, n: int) -> str:
        made = dataclasses.replace(
            new_run(), parent_id=parent_id, root_id=root.run_id, idempotency_key=f"{parent_id}:{n}"
        )
        store.enqueue(made)
        return made.run_id

    middle, done = child_of(root.run_id, 0), child_of(root.run_id, 1)
    leaf = child_of(middle, 0)
    leases = {}
    for run_id, steps in ((middle, 2), (leaf, 1), (done, 0)):
        claimed = store.claim_run(run_id, "worker:a", 30)
        assert claimed is not None
        leases[run_id] = claimed.lease
        for _ in range(steps):
            assert store.record_step(claimed.lease, 30, [step()]) is not None
    assert store.settle(leases[done], completed()) is not None
    assert store.cancel(root.run_id)
    for run_id, parent_id, steps in ((middle, root.run_id, 2), (leaf, middle, 1)):
        run = store.get_run(run_id)
        assert run is not None and run.status is RunStatus.CANCELLED
        events = store.events(run_id)
        assert [e.sequence for e in events] == list(range(len(events)))
        assert [str(e.kind) for e in events[-steps - 1 :]] == ["llm"] * steps + ["cancelled"]
        assert events[-1].payload == {"by": "parent", "parent_id": parent_id}
        state = store.fork_state(run_id)
        assert state is not None and state.last_sequence == events[-1].sequence
        assert store.record_step(leases[run_id], 30, [step()]) is None
    finished = store.get_run(done)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    assert "cancelled" not in kinds(store, done)


def test_redrive_requeues_a_dead_letter_with_a_fresh_budget(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.requeue(lease, 0, FailureClass.TIMEOUT, "t")
    lease = claim_one(store).lease
    dead = Settlement(
        RunStatus.FAILED,
        TerminationReason.RETRIES_EXHAUSTED,
        error_class=FailureClass.TIMEOUT,
        error="t",
    )
    assert store.settle(lease, dead) is not None
    assert store.redrive(run_id, force=False)
    run = store.get_run(run_id, with_request=True)
    assert run is not None
    assert run.status is RunStatus.QUEUED and run.requeue_count == 0
    assert run.termination_reason is None and run.finished_at is None
    assert run.request is not None
    assert kinds(store, run_id)[-1] == "redriven"
    again = claim_one(store)
    assert again.lease.attempt == 2 and again.requeue_count == 0


def test_redrive_refuses_a_standing_non_idempotent_fence_unless_forced(store: Store) -> None:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    assert store.mark_fence(lease, ToolEffect.NON_IDEMPOTENT_WRITE, 30)
    dead = Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE, error="x")
    assert store.settle(lease, dead) is not None
    assert not store.redrive(run_id, force=False)
    assert store.get_run(run_id).status is RunStatus.FAILED  # type: ignore[union-attr]
    assert store.redrive(run_id, force=True)
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.pending_effect is None
    assert store.events(run_id)[-1].payload == {
        "force": True,
        "pending_effect": "non_idempotent_write",
        "fence_probe": False,
    }


def test_redrive_refuses_what_is_not_a_dead_letter(store: Store) -> None:
    queued = enqueue(store)
    assert not store.redrive(queued, force=True)
    other = enqueue(store)
    lease = store.claim_run(other, "w", 30)
    assert lease is not None
    assert (
        store.settle(lease.lease, Settlement(RunStatus.FAILED, TerminationReason.MAX_ITERATIONS))
        is not None
    )
    assert not store.redrive(other, force=True)
    interactive = new_run(request=None)
    ilease = store.start(interactive, "run:h:1", 30)
    assert (
        store.settle(ilease, Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE))
        is not None
    )
    assert not store.redrive(interactive.run_id, force=True)  # nothing to re-execute
    assert not store.redrive("no-such-run", force=True)


def test_purge_deletes_old_terminal_runs_and_their_events_only(store: Store) -> None:
    done = enqueue(store)
    lease = store.claim_run(done, "w", 30)
    assert lease is not None and store.settle(lease.lease, completed()) is not None
    waiting = enqueue(store)
    assert store.purge(3600) == 0
    expire(0.1)
    assert store.purge(0.05) == 1
    assert store.get_run(done) is None and store.events(done) == []
    assert store.get_run(waiting) is not None and store.events(waiting) != []


def test_runs_filters_and_limits(store: Store) -> None:
    a = enqueue(store, queue="q1")
    enqueue(store, queue="q2")
    lease = store.claim_run(a, "w", 30)
    assert lease is not None
    assert (
        store.settle(lease.lease, Settlement(RunStatus.FAILED, TerminationReason.NOT_RETRYABLE))
        is not None
    )
    assert [r.id for r in store.runs(status=RunStatus.FAILED)] == [a]
    assert [r.id for r in store.runs(reason=TerminationReason.NOT_RETRYABLE)] == [a]
    assert len(store.runs(queue="q2")) == 1
    assert len(store.runs(limit=1)) == 1
    assert all(r.request is None for r in store.runs())


def test_unknown_run_reads(store: Store) -> None:
    assert store.get_run("nope") is None
    assert store.run_status("nope") is None
    assert store.events("nope") == []


@pytest.mark.parametrize("after", [-1, 0, 1])
def test_events_after(store: Store, after: int) -> None:
    run_id = enqueue(store)
    claim_one(store)
    assert [e.sequence for e in store.events(run_id, after)] == list(range(after + 1, 2))


def test_stale_runs_lists_only_expired_running_leases(store: Store) -> None:
    fresh = enqueue(store)
    stale = enqueue(store)
    store.claim_run(fresh, "w", 30)
    claimed = store.claim_run(stale, "w", SHORT_LEASE)
    assert claimed is not None
    expire()
    found = store.stale_runs(10)
    assert [s.run_id for s in found] == [stale]
    assert found[0].lease_token == claimed.lease.token and found[0].has_request
    assert stale_for(store, stale).requeue_count == 0


def test_events_record_the_token_they_were_written_under(store: Store) -> None:
    run_id = enqueue(store)
    first = claim_one(store, lease=SHORT_LEASE).lease
    store.record_step(first, SHORT_LEASE, [step()])
    expire()
    assert store.requeue_stale(stale_for(store, run_id))
    second = claim_one(store).lease
    store.record_step(second, 30, [step()])
    assert store.settle(second, completed()) is not None
    tokens = [(str(e.kind), e.lease_token) for e in store.events(run_id)]
    assert tokens == [
        ("request", 0),
        ("claimed", 1),
        ("llm", 1),
        ("requeued", 1),
        ("claimed", 2),
        ("llm", 2),
        ("assembled", 2),
    ]


def test_settle_and_claim_settles_each_run_under_its_own_guard_then_claims(
    store: Store,
) -> None:
    mine, stolen, cancelled = (enqueue(store) for _ in range(3))
    leases = {c.lease.run_id: c.lease for c in store.claim("worker:a", None, 30, 3)}
    assert set(leases) == {mine, stolen, cancelled}
    # `stolen` changed hands (its lease expired and another worker took it); `cancelled`
    # was cancelled. Neither settle may apply; the first must.
    expired_lease = Lease(stolen, "worker:a", leases[stolen].token + 1, 1)
    assert store.cancel(cancelled)
    waiting = [enqueue(store) for _ in range(3)]
    results, claimed = store.settle_and_claim(
        [
            (leases[mine], completed("1")),
            (expired_lease, completed("2")),
            (leases[cancelled], completed("3")),
        ],
        "worker:a",
        None,
        30,
        2,
    )
    assert results[0] is not None and results[1] is None and results[2] is None
    run = store.get_run(mine)
    assert run is not None and run.status is RunStatus.COMPLETED and run.output == "1"
    assert sequences(store, mine) == [0, 1, 2] and kinds(store, mine)[-1] == "assembled"
    assert results[0] == [2]
    stolen_run = store.get_run(stolen)
    assert stolen_run is not None and stolen_run.status is RunStatus.RUNNING
    assert "assembled" not in kinds(store, stolen)
    gone = store.get_run(cancelled)
    assert gone is not None and gone.status is RunStatus.CANCELLED
    assert "assembled" not in kinds(store, cancelled)
    assert [c.lease.run_id for c in claimed] == waiting[:2]
    assert all(kinds(store, c.lease.run_id) == ["request", "claimed"] for c in claimed)


def test_settle_and_claim_without_settles_or_without_a_claim(store: Store) -> None:
    first = enqueue(store)
    results, claimed = store.settle_and_claim([], "worker:a", None, 30, 5)
    assert results == [] and [c.lease.run_id for c in claimed] == [first]
    second = enqueue(store)
    results, claimed = store.settle_and_claim(
        [(claimed[0].lease, completed())], "worker:a", None, 30, 0
    )
    assert results[0] is not None and claimed == []
    run = store.get_run(second)
    assert run is not None and run.status is RunStatus.QUEUED


def test_settle_and_claim_is_one_transaction_a_refused_settle_applies_nothing(
    store: Store,
) -> None:
    ok, bad = enqueue(store), enqueue(store)
    leases = {c.lease.run_id: c.lease for c in store.claim("worker:a", None, 30, 2)}
    waiting = enqueue(store)
    # A terminal reason on a running row breaks the schema's own CHECK: the database
    # refuses that statement, and with it the whole transaction.
    impossible = Settlement(RunStatus.RUNNING, TerminationReason.COMPLETED)
    with pytest.raises(StoreError):
        store.settle_and_claim(
            [(leases[ok], completed()), (leases[bad], impossible)], "worker:a", None, 30, 1
        )
    for run_id in (ok, bad):
        run = store.get_run(run_id)
        assert run is not None and run.status is RunStatus.RUNNING
        assert kinds(store, run_id) == ["request", "claimed"]
    queued = store.get_run(waiting)
    assert queued is not None and queued.status is RunStatus.QUEUED
    assert kinds(store, waiting) == ["request"]


def test_settle_and_claim_with_an_old_and_a_new_lease_of_one_run_settles_the_new_one(
    store: Store,
) -> None:
    """A run handed back and claimed again by the same worker can end twice in one batch:
    under its old token (refused) and its new one (applied)."""
    run_id = enqueue(store)
    old = claim_one(store).lease
    assert store.release(old)
    new = claim_one(store).lease
    assert new.run_id == run_id and new.token == old.token + 1
    others = [enqueue(store) for _ in range(2)]
    other_leases = store.claim("worker:a", None, 30, 2)
    assert [c.lease.run_id for c in other_leases] == others
    results, _ = store.settle_and_claim(
        [
            (old, completed("old")),
            (new, completed("new")),
            *((c.lease, completed("other")) for c in other_leases),
        ],
        "worker:a",
        None,
        30,
        0,
    )
    assert results[0] is None and results[1] is not None
    assert all(r is not None for r in results[2:])
    run = store.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.output == "new"
    assembled = [e for e in store.events(run_id) if e.kind is EventKind.ASSEMBLED]
    assert [(e.payload["output"], e.lease_token) for e in assembled] == [("new", new.token)]
    assert sequences(store, run_id) == list(range(len(sequences(store, run_id))))


def test_a_settle_batch_larger_than_one_statement_settles_each_run_under_its_guard(
    store: Store,
) -> None:
    """SQLite writes a transaction's events a power of two per insert (at most 128): the 150
    events of 75 settles take four inserts (128 + 16 + 4 + 2), and each run keeps its own
    guard, values and events."""
    run_ids = [enqueue(store) for _ in range(75)]
    claimed = store.claim("worker:a", None, 30, 75)
    assert [c.lease.run_id for c in claimed] == run_ids
    settles = []
    for i, c in enumerate(claimed):
        lease = c.lease
        if i % 10 == 3:  # not ours any more: a token the row does not have
            lease = Lease(lease.run_id, lease.owner, lease.token + 1, lease.attempt)
        done = completed(f"out-{i}")
        events = (NewEvent(EventKind.LLM, {"i": i}), *done.events)
        settles.append((lease, replace(done, events=events)))
    results, _ = store.settle_and_claim(settles, "worker:a", None, 30, 0)
    for i, (run_id, result) in enumerate(zip(run_ids, results, strict=True)):
        run = store.get_run(run_id)
        assert run is not None
        if i % 10 == 3:
            assert result is None and run.status is RunStatus.RUNNING
            assert kinds(store, run_id) == ["request", "claimed"]
        else:
            assert result == [2, 3] and run.status is RunStatus.COMPLETED
            assert run.output == f"out-{i}"
            assert kinds(store, run_id) == ["request", "claimed", "llm", "assembled"]
            assert [e.payload for e in store.events(run_id)][2] == {"i": i}
