"""A lease that has expired is lost even before a reaper looked (SPEC §15): every write
guarded by it is refused on the database's clock and changes nothing, and the reaper then
handles the run as it handles a dead worker's.

Each write is tried twice on a run set up the same way: under a live lease it applies (the
case is one that can win), under the same lease once expired it does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tenure._reaper import Reaper
from tenure._types import EventKind, FailureClass, RunStatus, TerminationReason
from tenure.store import Lease, Settlement, Store

from .helpers import SHORT_LEASE, WRITE, claim_one, completed, enqueue, expire, step

CALL = {"name": "pay", "args": {"amount": 7}, "idempotency_key": "k", "turn": 2, "index": 0}
Write = Callable[[Store, Lease], bool]


def _settle_and_claim(store: Store, lease: Lease) -> bool:
    settled, claimed = store.settle_and_claim([(lease, completed())], "worker:a", None, 30, 0)
    assert claimed == []
    return settled != [None]


def _dead_letter_while_fenced(store: Store, lease: Lease) -> bool:
    settlement = Settlement(
        RunStatus.FAILED,
        TerminationReason.NOT_RETRYABLE,
        error_class=FailureClass.UNKNOWN,
        error="drain",
        events=(step(EventKind.DEAD_LETTERED, reason="not_retryable"),),
        only_while_fenced=WRITE,
    )
    return store.settle(lease, settlement) is not None


def _suspend(store: Store, lease: Lease) -> bool:
    waiting = {"kind": "approval", "turn": 1, "calls": []}
    status = RunStatus.WAITING_FOR_APPROVAL
    return store.suspend(lease, status, waiting, None, None, []) is not None


# (name, whether the run has a probe-able fence standing, the write): every write a segment
# or its worker makes under a lease.
WRITES: list[tuple[str, bool, Write]] = [
    ("record_step", False, lambda s, lease: s.record_step(lease, 30, [step()]) is not None),
    ("renew_leases", False, lambda s, lease: lease.run_id in s.renew_leases([(lease, 30)])),
    ("mark_fence", False, lambda s, lease: s.mark_fence(lease, WRITE, 30, CALL, True)),
    (
        "clear_fence",
        True,
        lambda s, lease: s.clear_fence(lease, 30, step(EventKind.TOOL, name="pay")) is not None,
    ),
    (
        "resolve_fence",
        True,
        lambda s, lease: (
            s.resolve_fence(lease, 30, [step(EventKind.PROBE, verdict="not_done")]) is not None
        ),
    ),
    ("requeue", False, lambda s, lease: s.requeue(lease, 0, FailureClass.TIMEOUT, "x")),
    (
        "requeue_in_doubt",
        True,
        lambda s, lease: s.requeue_in_doubt(lease, 0, FailureClass.UNKNOWN, "in doubt"),
    ),
    ("hand_back", False, lambda s, lease: s.hand_back(lease, "the worker is stopping")),
    (
        "hand_back_unserved",
        False,
        lambda s, lease: s.hand_back(lease, "it lacks", ["tool 'pay'"]),
    ),
    ("release", False, lambda s, lease: s.release(lease)),
    ("settle", False, lambda s, lease: s.settle(lease, completed()) is not None),
    ("settle_while_fenced", True, _dead_letter_while_fenced),
    ("settle_and_claim", False, _settle_and_claim),
    ("suspend", False, _suspend),
    ("park", False, lambda s, lease: s.park(lease, 1.0, {"model": "m", "why": "capacity"})),
]
CASES = [pytest.param(fenced, write, id=name) for name, fenced, write in WRITES]


def _held(store: Store, fenced: bool, lease_seconds: float) -> Lease:
    """A run held under a lease of `lease_seconds`, with a probe-able fence if `fenced`."""
    enqueue(store)
    lease = claim_one(store, lease=lease_seconds).lease
    if fenced:
        assert store.mark_fence(lease, WRITE, lease_seconds, CALL, True)
    return lease


def _snapshot(store: Store, run_id: str) -> tuple[Any, ...]:
    return store.get_run(run_id, with_request=True), store.events(run_id)


@pytest.mark.parametrize(("fenced", "write"), CASES)
def test_each_guarded_write_applies_under_a_live_lease(
    store: Store, fenced: bool, write: Write
) -> None:
    lease = _held(store, fenced, 30)
    assert write(store, lease)


@pytest.mark.parametrize(("fenced", "write"), CASES)
def test_each_guarded_write_is_refused_once_the_lease_expired(
    store: Store, fenced: bool, write: Write
) -> None:
    """No reaper acted: the row still names the owner and its token, but the lease's time is
    over by the database's clock. The write is refused and changes nothing; the reaper then
    requeues the run as a dead worker's (in doubt, when a probe-able fence stands)."""
    lease = _held(store, fenced, SHORT_LEASE)
    expire()
    before = _snapshot(store, lease.run_id)
    assert before[0].status is RunStatus.RUNNING and before[0].claimed_by == lease.owner
    assert not write(store, lease)
    assert _snapshot(store, lease.run_id) == before
    report = Reaper(store, 3).run_once()
    assert report.requeued == 1
    run = store.get_run(lease.run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 1
    assert (run.pending_effect is WRITE) == fenced
    cause = store.events(lease.run_id)[-1].payload["cause"]
    assert cause == ("in_doubt" if fenced else "stale")
