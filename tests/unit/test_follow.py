"""The reader of a run followed live (SPEC §18): a piece of a call is known by its call and
its number, never by the order in which it arrived."""

from __future__ import annotations

from datetime import UTC, datetime

from tenure._follow import _Reader
from tenure._types import Delta, Event, EventKind
from tenure.store._deltas import StoredDelta


def _llm(sequence: int, text: str) -> Event:
    payload = {"message": {"role": "assistant", "content": text}}
    return Event("r", sequence, 0, EventKind.LLM, payload, datetime.now(UTC), 1)


def test_pieces_out_of_order_are_all_shown_and_a_repeat_is_dropped() -> None:
    reader = _Reader(after=1)
    first = list(reader.merge([StoredDelta(2, 1, "world")], []))
    second = list(reader.merge([StoredDelta(2, 0, "hello "), StoredDelta(2, 1, "world")], []))
    assert first == [Delta(2, "world")]
    assert second == [Delta(2, "hello ")]  # the piece numbered before is not a repeat


def test_the_rest_of_a_call_comes_just_before_its_event_in_piece_order() -> None:
    reader = _Reader(after=1)
    items = list(reader.merge([StoredDelta(2, 1, "b"), StoredDelta(2, 0, "a")], [_llm(2, "abc")]))
    # Sorted by piece number on the way in, then "c", the part no delta carried.
    assert items[:-1] == [Delta(2, "a"), Delta(2, "b"), Delta(2, "c")]
    assert isinstance(items[-1], Event) and items[-1].sequence == 2


def test_a_piece_of_a_call_that_has_its_event_is_dropped_not_given_to_the_next() -> None:
    reader = _Reader(after=1)
    list(reader.merge([StoredDelta(2, 0, "first ")], [_llm(2, "first call")]))
    late = list(reader.merge([StoredDelta(2, 1, "call"), StoredDelta(4, 0, "next")], []))
    assert late == [Delta(4, "next")]
