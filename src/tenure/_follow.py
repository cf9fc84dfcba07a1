"""Following a run live (SPEC §18): its events as they are recorded, and the deltas of its
model call in flight in between, from any process.

Order: a delta names its call by the sequence the call's `llm` event will take (the
publisher names it, the store refuses it once that sequence is taken), so it is yielded
after every event before that sequence and before the event at it. Whatever arrives late
for a call that already has its event is dropped; a piece is known by its call and its
number, never by when it arrived. A reader that saw the start
of a call but missed its last deltas (they are published a few milliseconds before the
call's `llm` event, and on SQLite deleted with it) is given the rest of the text as one last
delta just before the event: the deltas of a call it followed from the start always add up
to the call's text.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tenure._types import Delta, Event, EventKind, RunStatus
from tenure.store._base import Store
from tenure.store._deltas import StoredDelta

# The longest a reader waits for a new event while no delta arrives.
EVENT_POLL_SECONDS = 0.05
# While deltas stream, the run itself is read at most this often (its events wait: a
# reader of fifty streaming runs would otherwise spend its time on these reads).
MIN_CHECK = 0.25
_WAITING = (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT)


def follow(
    store: Store, run_id: str, after: int = -1, poll: float = EVENT_POLL_SECONDS
) -> Iterator[Event | Delta]:
    """The run's events after sequence `after` and its deltas, until the run ends or waits
    for a person; nothing for an unknown run."""
    follower = Follower(store, run_id, after)
    wait = 0.0
    try:
        while True:
            items, status = follower.poll(wait)
            wait = poll
            yield from items
            if status is None or status.is_terminal or status in _WAITING:
                return
    finally:
        follower.close()


class Follower:
    """One run followed, a round at a time (for a caller with a loop of its own, such as
    an HTTP event stream)."""

    def __init__(self, store: Store, run_id: str, after: int = -1) -> None:
        self._store = store
        self.run_id = run_id
        self._feed = store.follow_deltas(run_id)
        self._reader = _Reader(after)
        self._status: RunStatus | None = None  # as last read
        self._checked = 0.0  # when (time.monotonic)

    def poll(self, wait: float) -> tuple[list[Event | Delta], RunStatus | None]:
        """What arrived, waiting up to `wait` seconds for a delta, and the run's status as
        read before its events (None: the run is unknown, or was purged)."""
        deltas = self._feed.take(wait)
        now = time.monotonic()
        if self._streaming(deltas) and now - self._checked < max(wait, MIN_CHECK):
            # The call after the last event read is streaming: its deltas now; the run is
            # read again once MIN_CHECK (or a longer `wait`) has passed.
            return list(self._reader.merge(deltas, [])), self._status
        self._checked = now
        progress = self._store.run_progress(self.run_id)
        if progress is None:
            return [], None
        # Status first, events second: whatever ended the run is among the events read.
        status, last = progress
        self._status = status
        after = self._reader.after
        events = self._store.events(self.run_id, after) if last > after else []
        return list(self._reader.merge(deltas, events)), status

    def _streaming(self, deltas: list[StoredDelta]) -> bool:
        """Only deltas of the call that follows the last event yielded: no event can be
        missing before them (a delta of a later call means events to read first)."""
        nxt = self._reader.after + 1
        return self._status is not None and bool(deltas) and all(d.sequence == nxt for d in deltas)

    def close(self) -> None:
        self._feed.close()


@dataclass
class _Reader:
    after: int  # the last event yielded
    # The pieces yielded, by call sequence, then by piece number.
    _texts: dict[int, dict[int, str]] = field(default_factory=dict)

    def merge(self, deltas: Iterable[StoredDelta], events: Iterable[Event]) -> Iterator[Any]:
        # A call's pieces in their numbers' order, before its event.
        items: list[tuple[int, int, int, StoredDelta | Event]] = [
            (d.sequence, 0, d.chunk, d) for d in deltas
        ]
        items += [(e.sequence, 1, i, e) for i, e in enumerate(events)]
        for _, _, _, item in sorted(items, key=lambda t: t[:3]):
            if isinstance(item, Event):
                yield from self._event(item)
            elif (delta := self._delta(item)) is not None:
                yield delta

    def _delta(self, delta: StoredDelta) -> Delta | None:
        if delta.sequence <= self.after:
            return None  # its call already has its event
        pieces = self._texts.setdefault(delta.sequence, {})
        if delta.chunk in pieces:
            return None  # a piece seen already (a reader that joined mid-call reads some twice)
        pieces[delta.chunk] = delta.text
        return Delta(delta.sequence, delta.text)

    def _event(self, event: Event) -> Iterator[Event | Delta]:
        pieces = self._texts.get(event.sequence, {})
        seen = "".join(pieces[n] for n in sorted(pieces))
        if seen and event.kind is EventKind.LLM:
            text = _answer_text(event.payload)
            if text.startswith(seen) and len(text) > len(seen):
                yield Delta(event.sequence, text[len(seen) :])
        for sequence in [s for s in self._texts if s <= event.sequence]:
            del self._texts[sequence]
        self.after = event.sequence
        yield event


def _answer_text(payload: dict[str, Any]) -> str:
    message = payload.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""
