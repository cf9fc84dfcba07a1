"""The lease keeper (SPEC §15): renews the leases of every segment in flight in this process,
in the background, so that a step may take minutes under a lease of seconds.

Every `lease / 3` the keeper renews, in one statement, the lease of each registered segment
whose current step is still within its deadline (a tool's `timeout`, a model call's). A step
past its deadline is no longer renewed: its lease expires and the reaper handles the run as
a dead worker's (a write's fence stands). A renewal that misses its guard (the run was
cancelled, reaped or redriven, or this process was frozen past its lease) marks the segment
lost at once: its next write is refused without asking the database, its model call is
aborted, and its tool sees `ctx.cancelled`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tenure._classify import describe, retry_log_level
from tenure._types import RunStatus
from tenure.store._base import Lease, Store

log = logging.getLogger("tenure.keeper")

# A round every this fraction of the shortest lease held: two rounds may fail before a lease
# runs out.
ROUND_OF_LEASE = 1 / 3


class Kept(Protocol):
    """What the keeper needs of a segment."""

    @property
    def lease(self) -> Lease: ...

    @property
    def lease_seconds(self) -> float: ...

    def renewable(self, now: float) -> bool:
        """Whether its current step is within its deadline (by `time.monotonic`)."""

    def lose(self, cancelled: bool) -> None:
        """The run is no longer this segment's: stop, write nothing more."""


class Beating(Protocol):
    """What the keeper needs of a worker's own heartbeat (`_heartbeat.py`): it beats in the
    keeper's round, right after the renewals, so that its row is seen as often as its leases
    are renewed, and a worker dead to one is dead to the other."""

    @property
    def interval(self) -> float: ...

    def beat_if_due(self) -> None: ...


class Keeper:
    def __init__(
        self, store: Callable[[], Store], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store  # a callable: the Runtime opens its store on first use
        self._clock = clock
        self._kept: dict[str, Kept] = {}
        self._beats: list[Beating] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        # The wait between rounds the keeper's thread is in (None: not computed yet). A
        # segment whose lease needs no shorter one does not wake the thread: at thousands of
        # runs a second, a wake-up per run was a large part of a trivial run's CPU.
        self._round: float | None = None
        self.rounds = 0
        self.wakeups = 0  # times the thread was woken early to shorten its wait

    def keep(self, segment: Kept) -> None:
        """Renew `segment`'s lease from now on, until `release`."""
        with self._lock:
            if self._closed:
                return
            self._kept[segment.lease.run_id] = segment
            if self._thread is None:
                self._start()
            sooner = self._round is None or segment.lease_seconds * ROUND_OF_LEASE < self._round
        if sooner:
            self._wake.set()  # a shorter lease needs an earlier round

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="tenure-lease-keeper", daemon=True
            )
            self._thread.start()

    def add_beat(self, beat: Beating) -> bool:
        """Beat `beat` in every round from now on (with or without leases to renew), until
        `remove_beat`; False once the keeper is closed."""
        with self._lock:
            if self._closed:
                return False
            self._beats.append(beat)
            self._start()
        self._wake.set()
        return True

    def remove_beat(self, beat: Beating) -> None:
        with self._lock:
            if beat in self._beats:
                self._beats.remove(beat)

    def release(self, segment: Kept) -> None:
        run_id = segment.lease.run_id
        with self._lock:
            if self._kept.get(run_id) is segment:
                del self._kept[run_id]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _interval(self) -> float:
        """The wait until the next round, which `keep` compares a new segment's with."""
        with self._lock:
            rounds = [s.lease_seconds * ROUND_OF_LEASE for s in self._kept.values()]
            rounds += [b.interval for b in self._beats]
            self._round = min(rounds) if rounds else 1.0
            return self._round

    def _loop(self) -> None:
        last = self._clock()
        while True:
            self._wake.wait(max(0.0, last + self._interval() - self._clock()))
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
            if self._clock() < last + self._interval():
                # Woken by a segment that starts: its claim has just set a fresh lease, and
                # it holds a shorter one, so only the time of the next round changes.
                self.wakeups += 1
                continue
            last = self._clock()
            try:
                self.run_once()
            except Exception as exc:  # the database is out of reach: the next round retries
                log.log(retry_log_level(exc), "lease keeper: renewal failed (%s)", describe(exc))
            self._beat_all()

    def _beat_all(self) -> None:
        with self._lock:
            beats = list(self._beats)
        for beat in beats:
            try:
                beat.beat_if_due()
            except Exception as exc:  # out of reach: the next round beats again
                log.log(
                    retry_log_level(exc),
                    "lease keeper: a worker's heartbeat failed (%s)",
                    describe(exc),
                )

    def run_once(self) -> None:
        """One round: every renewable lease in one statement; the misses are lost."""
        now = self._clock()
        with self._lock:
            due = [s for s in self._kept.values() if s.renewable(now)]
        if not due:
            return
        store = self._store()
        renewed = store.renew_leases([(s.lease, s.lease_seconds) for s in due])
        self.rounds += 1
        for segment in due:
            if segment.lease.run_id in renewed:
                continue
            with self._lock:
                if self._kept.get(segment.lease.run_id) is not segment:
                    continue  # it ended meanwhile: its own writes settled it
            cancelled = store.run_status(segment.lease.run_id) is RunStatus.CANCELLED
            log.warning(
                "run %s: the lease keeper's renewal missed (%s); the segment stops",
                segment.lease.run_id,
                "cancelled" if cancelled else "lease lost",
            )
            segment.lose(cancelled)
            self.release(segment)
            # An observer of the store (metrics) learns of the loss here, where it is
            # decided: a renewal that missed because its segment had just ended is none.
            noted = getattr(store, "note_lease_lost", None)
            if noted is not None:
                noted(segment.lease, cancelled)
