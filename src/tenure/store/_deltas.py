"""What the stores share for streaming (SPEC §18): a published piece of answer text, a
delta as a reader gets it, and the feed through which a reader gets them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenure.store._base import Lease

# How often a polling feed (SQLite) looks for new deltas while a reader waits.
POLL_SECONDS = 0.01


@dataclass(frozen=True)
class DeltaPiece:
    """A piece of the text of the model call a lease's segment has in flight; `chunk`
    numbers the pieces of one call from 0."""

    lease: Lease
    chunk: int
    text: str


@dataclass(frozen=True)
class StoredDelta:
    """A delta as a reader receives it: the call's sequence, the piece's number, its text."""

    sequence: int
    chunk: int
    text: str


class DeltaFeed(Protocol):
    def take(self, timeout: float) -> list[StoredDelta]:
        """The deltas that arrived since the last call, waiting up to `timeout` seconds
        for at least one (an empty list when none came)."""

    def close(self) -> None: ...


class PollingFeed:
    """A feed that reads a table: `read(after)` returns (row id, delta) after a row id."""

    def __init__(self, read: Callable[[int], list[tuple[int, StoredDelta]]]) -> None:
        self._read = read
        self._after = 0
        self._closed = threading.Event()

    def take(self, timeout: float) -> list[StoredDelta]:
        deadline = time.monotonic() + timeout
        while True:
            rows = self._read(self._after)
            if rows:
                self._after = rows[-1][0]
                return [delta for _, delta in rows]
            left = deadline - time.monotonic()
            if left <= 0 or self._closed.wait(min(POLL_SECONDS, left)):
                return []

    def close(self) -> None:
        self._closed.set()
