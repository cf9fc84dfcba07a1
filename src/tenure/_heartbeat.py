"""A worker's own heartbeat: its row in `tenure_workers`, beside the leases it holds.

Leases show a worker only while it executes runs, and show it dead only once they expire. Its
own row shows it from the moment it starts: written at start, seen again in every round of the
lease keeper (`lease / 3`, right after the renewals) whether or not it has runs in flight,
`stopping` while it drains, `stopped` after a clean shutdown. A worker whose heartbeat is
overdue is dead (killed, frozen or cut off), and shows so before its leases expire: its last
beat came with its last renewal, and a lease lasts three rounds.

`worker_state` is the reader's decision, pure: what a row says, read against the database's
clock.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from tenure._classify import describe, retry_log_level
from tenure._errors import DatabaseGone
from tenure._keeper import ROUND_OF_LEASE
from tenure.store._base import WorkerInfo, WorkerRow

if TYPE_CHECKING:
    from tenure._keeper import Keeper
    from tenure.store._base import Store

log = logging.getLogger("tenure.worker")

# A heartbeat every this fraction of the worker's lease: the lease keeper's round.
HEARTBEAT_OF_LEASE = ROUND_OF_LEASE
# A keeper round woken early (a new segment to keep) beats only if this fraction of the
# interval has passed since the last beat: at most one beat per round, never one per segment.
MIN_BEAT_SPACING = 0.5
# Dead once no heartbeat came for this many intervals. One failed beat (a database blip)
# leaves a gap of two; a dead worker still shows dead before its leases expire, three rounds
# after the renewal its last beat followed.
DEAD_AFTER_BEATS = 2.5
# A change of the slots in use is written this long after it (once for every change in the
# meantime), not at the next round a third of a lease later: `tenure workers` showed
# `slots 0/8` beside `runs 8` for a whole round after a claim. At most one such write a
# second, and none when the count is back to what the row says.
CHANGE_BEAT_SECONDS = 1.0


class WorkerState(enum.StrEnum):
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DEAD = "dead"


def worker_state(row: WorkerRow, now: datetime) -> WorkerState:
    """What a worker is now: what it last said, unless its heartbeat is overdue."""
    said = WorkerState(row.state)
    if said is WorkerState.STOPPED:
        return said
    silent = (now - row.last_seen).total_seconds()
    return WorkerState.DEAD if silent > DEAD_AFTER_BEATS * row.heartbeat_seconds else said


def describe_worker(
    identity: str, queues: Sequence[str] | None, slots: int, lease_seconds: float
) -> WorkerInfo:
    return WorkerInfo(
        id=identity,
        host=socket.gethostname(),
        pid=os.getpid(),
        queues=list(queues) if queues else None,
        slots=slots,
        heartbeat_seconds=lease_seconds * HEARTBEAT_OF_LEASE,
    )


class Heartbeat:
    """Keeps one worker's row: registers it, beats in the lease keeper's round (on a thread of
    its own when there is no keeper), says `stopping` when the drain begins and `stopped` at
    the end. Every write is best effort: a worker that cannot reach its database keeps
    working (its claims fail alike), and its row shows it dead."""

    def __init__(
        self,
        store: Callable[[], Store],
        worker: WorkerInfo,
        slots_in_use: Callable[[], int],
        stopping: Callable[[], bool],
    ) -> None:
        self._store = store
        self.worker = worker
        self._slots_in_use = slots_in_use
        self._stopping = stopping
        self._keeper: Keeper | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: float | None = None  # by time.monotonic
        self._reported = 0  # the slots in use the row says
        self._change_lock = threading.Lock()
        self._change_timer: threading.Timer | None = None
        self.beats = 0

    @property
    def interval(self) -> float:
        return self.worker.heartbeat_seconds

    def start(self, keeper: Keeper | None) -> None:
        self._best_effort("cannot register the worker", self._register)
        if keeper is not None and keeper.add_beat(self):
            self._keeper = keeper
            return
        self._thread = threading.Thread(
            target=self._loop, name="tenure-worker-heartbeat", daemon=True
        )
        self._thread.start()

    def _register(self) -> None:
        self._last = time.monotonic()  # registered is seen: the first round need not beat
        self._store().register_worker(self.worker)

    def _loop(self) -> None:
        while not self._closed.wait(self.interval):
            self._best_effort("heartbeat failed", self.run_once)

    def beat_if_due(self) -> None:
        """The keeper's round: a beat, unless the last one was less than half an interval ago."""
        last = self._last
        if last is None or time.monotonic() - last >= self.interval * MIN_BEAT_SPACING:
            self.run_once()

    def run_once(self) -> None:
        """One beat; a worker whose row is gone (purged while it was cut off) writes it again."""
        self._last = time.monotonic()
        store = self._store()
        in_use = self._slots_in_use()
        if not store.beat_worker(self.worker.id, in_use, self._stopping()):
            store.register_worker(self.worker)
        self._reported = in_use
        self.beats += 1

    def changed(self) -> None:
        """The slots in use changed: the row says so within `CHANGE_BEAT_SECONDS`."""
        # A beat already pending covers this change without the lock: its timer clears the
        # field before it reads the slots in use, so a change made before this look is seen.
        if self._change_timer is not None:
            return
        with self._change_lock:
            if self._change_timer is not None or self._closed.is_set():
                return
            timer = threading.Timer(CHANGE_BEAT_SECONDS, self._beat_changed)
            timer.name = "tenure-worker-heartbeat-change"
            timer.daemon = True
            self._change_timer = timer
        timer.start()

    def _beat_changed(self) -> None:
        with self._change_lock:
            self._change_timer = None
            if self._closed.is_set():
                return
        if self._slots_in_use() != self._reported:
            self._best_effort("heartbeat failed", self.run_once)

    def draining(self) -> None:
        """The drain begins: the row says `stopping` now, not at the next round."""
        self._best_effort("heartbeat failed", self.run_once)

    def stop(self) -> None:
        """A clean shutdown: no more beats, and the row says stopped."""
        if self._keeper is not None:
            self._keeper.remove_beat(self)
        with self._change_lock:
            self._closed.set()
            if self._change_timer is not None:
                self._change_timer.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._best_effort("cannot mark the worker stopped", self._stop_row)

    def _stop_row(self) -> None:
        self._store().stop_worker(self.worker.id)

    def _best_effort(self, what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except DatabaseGone as exc:  # the worker stops on it and says so, in one line
            log.debug("%s: %s (%s)", self.worker.id, what, describe(exc))
        except Exception as exc:  # the next beat retries; a row left behind shows it dead
            log.log(retry_log_level(exc), "%s: %s (%s)", self.worker.id, what, describe(exc))
