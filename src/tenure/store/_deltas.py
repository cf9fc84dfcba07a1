"""What the stores share for streaming (SPEC §18): a published piece of answer text, a
delta as a reader gets it, and the feed through which a reader gets them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenure.store._base import Lease

# How often the table of deltas (SQLite) is read while anyone follows a run.
POLL_SECONDS = 0.01
log = logging.getLogger("tenure.store")


@dataclass(frozen=True)
class DeltaPiece:
    """A piece of the text of the model call a lease's segment has in flight. The call is
    named by `sequence`, the one its `llm` event will take (the segment's last event plus
    one, known when the call starts): a piece published late, after that sequence is taken,
    is refused, never taken for a later call's. `chunk` numbers the pieces of one call
    from 0."""

    lease: Lease
    sequence: int
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


class TablePoller:
    """The deltas of every run followed in this process, from one thread that reads the
    table every POLL_SECONDS (one query, however many readers: fifty readers polling each on
    their own would spend a busy machine's time on polling). It runs while anyone follows.

    `read_all(after)` returns (row id, run id, delta) of every row after a row id;
    `read_run(run_id)` the (row id, delta) rows of one run, for a reader that joins while
    its run's call is in flight. The lock covers a poll from its read to its delivery and a
    reader's joining, so a joining reader misses no row and gets none twice.
    """

    def __init__(
        self,
        read_all: Callable[[int], list[tuple[int, str, StoredDelta]]],
        read_run: Callable[[str], list[tuple[int, StoredDelta]]],
    ) -> None:
        self._read_all = read_all
        self._read_run = read_run
        self._lock = threading.Lock()
        self._feeds: dict[str, list[TableFeed]] = {}
        self._after = 0
        self._thread: threading.Thread | None = None

    def follow(self, run_id: str) -> TableFeed:
        feed = TableFeed(self, run_id)
        with self._lock:
            feed.deliver(self._read_run(run_id))
            self._feeds.setdefault(run_id, []).append(feed)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-deltas-poll")
                self._thread.daemon = True
                self._thread.start()
        return feed

    def leave(self, feed: TableFeed) -> None:
        with self._lock:
            feeds = self._feeds.get(feed.run_id, [])
            if feed in feeds:
                feeds.remove(feed)
            if not feeds:
                self._feeds.pop(feed.run_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._feeds:
                    self._thread = None
                    return
                self._poll()
            time.sleep(POLL_SECONDS)

    def _poll(self) -> None:
        try:
            rows = self._read_all(self._after)
        except Exception as exc:  # the store closed or failed: readers just see no deltas
            log.debug("deltas not read: %s", exc)
            return
        if not rows:
            return
        self._after = rows[-1][0]
        by_run: dict[str, list[tuple[int, StoredDelta]]] = {}
        for row_id, run_id, delta in rows:
            if run_id in self._feeds:
                by_run.setdefault(run_id, []).append((row_id, delta))
        for run_id, found in by_run.items():
            for feed in self._feeds[run_id]:
                feed.deliver(found)


class TableFeed:
    """One reader's deltas of one run, delivered by a TablePoller."""

    def __init__(self, poller: TablePoller, run_id: str) -> None:
        self.run_id = run_id
        self._poller = poller
        self._after = 0  # the last row id delivered
        self._ready: list[StoredDelta] = []
        self._cond = threading.Condition()
        self._closed = False

    def deliver(self, rows: list[tuple[int, StoredDelta]]) -> None:
        with self._cond:
            fresh = [delta for row_id, delta in rows if row_id > self._after]
            if rows:
                self._after = max(self._after, rows[-1][0])
            if fresh:
                self._ready.extend(fresh)
                self._cond.notify_all()

    def take(self, timeout: float) -> list[StoredDelta]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._ready) or self._closed, timeout)
            found, self._ready = self._ready, []
            return found

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._poller.leave(self)
