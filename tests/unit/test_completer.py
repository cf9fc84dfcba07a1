"""The completer's slot arithmetic: how many runs a commit may claim."""

from __future__ import annotations

from tenure._completer import claim_room


def test_an_idle_worker_claims_every_slot_and_the_buffer() -> None:
    room = claim_room(concurrency=8, prefetch=8, inflight=0, ending=0, buffered=0)
    assert room == 16


def test_runs_ending_in_this_commit_free_their_slots_in_it() -> None:
    """`inflight` still counts the ending runs: their settle is in the same transaction."""
    busy = claim_room(concurrency=4, prefetch=0, inflight=4, ending=0, buffered=0)
    freeing = claim_room(concurrency=4, prefetch=0, inflight=4, ending=3, buffered=0)
    assert (busy, freeing) == (0, 3)


def test_nothing_is_claimed_while_the_buffer_holds_runs() -> None:
    assert claim_room(concurrency=4, prefetch=4, inflight=1, ending=1, buffered=2) == 0


def test_room_is_never_negative() -> None:
    """A worker can hold more runs than slots while prefetch shrinks (slow segments)."""
    assert claim_room(concurrency=2, prefetch=0, inflight=6, ending=0, buffered=0) == 0
