"""Publishing the text of streaming model calls while they are in flight (SPEC §18).

One publisher per Runtime, on a thread of its own, owns the batching: a segment's call
hands it each piece of text as the provider produces it and never waits for the database;
the thread gathers what arrives within a few milliseconds, from every call in flight, and
publishes it in one store call. A failed publication is logged and dropped: deltas are a
view of a call in flight, the call's `llm` event is its record, so a lost delta costs a
reader a moment of liveness and never a step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tenure.store._base import Lease, Store
from tenure.store._deltas import DeltaPiece

log = logging.getLogger("tenure")

# Deltas that arrive within this long of the first are published together.
BATCH_SECONDS = 0.005
# A piece is at most this many characters: at most 4 bytes each in UTF-8, so a piece and
# its header stay under PostgreSQL's 8,000-byte NOTIFY payload.
MAX_PIECE_CHARS = 1_900
# How long the end of a call waits for its last deltas to be published, at most.
FLUSH_SECONDS = 2.0


def pieces(text: str) -> list[str]:
    return [text[i : i + MAX_PIECE_CHARS] for i in range(0, len(text), MAX_PIECE_CHARS)]


class CallStream:
    """The deltas of one model call, named by `sequence`, the one its `llm` event will take:
    `add` is the call's `on_delta`; `close` at the call's end returns once they are published
    (or given up after FLUSH_SECONDS), so that a reader has the call's text before its event.
    A piece still published after that is refused by the store (its call's sequence is
    taken), never shown as a later call's."""

    def __init__(self, publisher: DeltaPublisher, lease: Lease, sequence: int) -> None:
        self.lease = lease
        self.sequence = sequence
        self.next_chunk = 0  # only the publisher's thread counts
        self._publisher = publisher

    def add(self, text: str) -> None:
        if text:
            self._publisher.submit(self, text)

    def close(self) -> None:
        self._publisher.flush(self)


class DeltaPublisher:
    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._pending: dict[CallStream, list[str]] = {}
        self._in_flight: set[CallStream] = set()
        self._hurry = False  # a call's end is waiting: publish without gathering more
        self._thread: threading.Thread | None = None
        self._closed = False

    def open(self, lease: Lease, sequence: int) -> CallStream:
        """The stream of a call whose `llm` event will take `sequence`."""
        return CallStream(self, lease, sequence)

    def submit(self, call: CallStream, text: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending.setdefault(call, []).append(text)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-deltas", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, call: CallStream) -> None:
        with self._cond:
            if call not in self._pending and call not in self._in_flight:
                return  # nothing streamed (the usual case): no wait at all
            self._hurry = True
            self._cond.notify_all()
            self._cond.wait_for(
                lambda: call not in self._pending and call not in self._in_flight,
                timeout=FLUSH_SECONDS,
            )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(FLUSH_SECONDS)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._closed)
                if not self._pending:
                    return  # closed, with nothing left to publish
                if not self._hurry:
                    self._cond.wait_for(lambda: self._hurry or self._closed, BATCH_SECONDS)
                batch, self._pending = self._pending, {}
                self._in_flight, self._hurry = set(batch), False
            try:
                self._publish(batch)
            finally:
                with self._cond:
                    self._in_flight = set()
                    self._cond.notify_all()

    def _publish(self, batch: dict[CallStream, list[str]]) -> None:
        out: list[DeltaPiece] = []
        for call, texts in batch.items():
            for piece in pieces("".join(texts)):
                out.append(DeltaPiece(call.lease, call.sequence, call.next_chunk, piece))
                call.next_chunk += 1
        try:
            self._store().publish_deltas(out)
        except Exception as exc:
            log.warning("deltas of %d run(s) not published: %s", len(batch), exc)
