"""The worker loop: claim into free slots, execute segments on threads, reap periodically,
drain on SIGTERM/SIGINT.

Claims are batched: one claim transaction fills every free slot and, while recent runs have
been short, a small buffer (up to `prefetch` more runs); the next claim waits until that
buffer is empty, so one claim commit serves several runs. Runs that take seconds (most agent
runs) are not claimed ahead: a buffered run would hold a lease that another worker could use.
A buffered run holds its lease while it waits: one that waited longer than a quarter of its
lease, or that is still waiting when the worker stops, is handed back to the queue
(`release`, guarded by its lease) instead of being started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType

from tenure import _policy
from tenure._classify import describe
from tenure._errors import StoreError
from tenure._ladder import Engine, Segment, _dead_letter
from tenure._reaper import Reaper
from tenure._types import FailureClass, Outcome, ToolEffect
from tenure.store._base import Claimed

log = logging.getLogger("tenure.worker")

DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_GRACE_SECONDS = 30.0
# Runs claimed ahead per slot, and at least this many in all (concurrency 1 claims 4 at once).
PREFETCH_PER_SLOT = 1
MIN_PREFETCH = 4
# Claim ahead only while segments take less than this on average (an EWMA of recent ones).
PREFETCH_BELOW_SECONDS = 0.05
SEGMENT_EWMA_WEIGHT = 0.2
# A buffered run that waited longer than this fraction of its lease is not started.
MAX_BUFFER_WAIT_OF_LEASE = 0.25
# How often a drain tries release, then a fenced dead-letter, while its segment still runs.
HAND_BACK_ATTEMPTS = 3
_worker_numbers = itertools.count(1)


def worker_identity() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}:{next(_worker_numbers)}"


@dataclass
class WorkerStats:
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    released: int = 0
    reaped: int = 0

    def count(self, outcome: Outcome) -> None:
        self.outcomes[str(outcome)] = self.outcomes.get(str(outcome), 0) + 1


class Worker:
    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 4,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        reap_interval: float | None = None,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.engine = engine
        self.concurrency = concurrency
        self.queues = list(queues) if queues else None
        self.burst = burst
        self.poll_interval = poll_interval
        self.reap_interval = reap_interval or engine.settings.lease_seconds / 4
        self.grace_seconds = grace_seconds
        self.identity = worker_identity()
        self.stats = WorkerStats()
        self.prefetch = max(MIN_PREFETCH, PREFETCH_PER_SLOT * concurrency)
        self._jobs: queue.SimpleQueue[tuple[Claimed, float] | None] = queue.SimpleQueue()
        self._buffered = 0
        self._segment_seconds: float | None = None  # EWMA; None until a segment ended
        self._active: dict[str, Segment] = {}
        self._lock = threading.Lock()
        self._inflight = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._grace_over = threading.Event()
        self._reaper = Reaper(engine.store, engine.settings.max_requeues)

    # -- control -------------------------------------------------------------------------

    def stop(self, *, immediately: bool = False) -> None:
        """Stop claiming; in-flight runs get the grace period (none when `immediately`)."""
        self._stopping.set()
        if immediately:
            self._grace_over.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @property
    def inflight(self) -> int:
        with self._lock:
            return self._inflight

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        slots = [
            threading.Thread(target=self._slot, name=f"tenure-slot-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        reaper = threading.Thread(target=self._reap_loop, name="tenure-reaper", daemon=True)
        for thread in [*slots, reaper]:
            thread.start()
        log.info("%s started: concurrency %d", self.identity, self.concurrency)
        unsubscribe = self.engine.store.subscribe(self.wake)
        with self._signals():
            try:
                self._claim_loop()
            finally:
                unsubscribe()
                self._drain()
                for _ in slots:
                    self._jobs.put(None)
        return self.stats

    def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                room = self.concurrency + self._prefetch_now() - self._inflight
                empty = self._buffered == 0
            if empty and room > 0:
                if self._claim(room):
                    continue
                if self.burst and self.inflight == 0:
                    return
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _claim(self, limit: int) -> list[Claimed]:
        try:
            claimed = self.engine.store.claim(
                self.identity, self.queues, self.engine.settings.lease_seconds, limit
            )
        except StoreError as exc:
            log.warning("%s: claim failed (%s); retrying", self.identity, describe(exc))
            time.sleep(self.poll_interval)
            return []
        now = time.monotonic()
        with self._lock:
            self._inflight += len(claimed)
            self._buffered += len(claimed)
        self.stats.claimed += len(claimed)
        for item in claimed:
            self._jobs.put((item, now))
        return claimed

    def _prefetch_now(self) -> int:
        """Runs to claim ahead now: only while recent segments have been short."""
        recent = self._segment_seconds
        return self.prefetch if recent is not None and recent < PREFETCH_BELOW_SECONDS else 0

    def _timed(self, seconds: float) -> None:
        with self._lock:
            recent = self._segment_seconds
            self._segment_seconds = (
                seconds if recent is None else recent + SEGMENT_EWMA_WEIGHT * (seconds - recent)
            )

    def _take(self) -> Claimed | None:
        """The next buffered run a slot should start; None when the worker is done."""
        max_wait = self.engine.settings.lease_seconds * MAX_BUFFER_WAIT_OF_LEASE
        while (entry := self._jobs.get()) is not None:
            item, claimed_at = entry
            with self._lock:
                self._buffered -= 1
                empty = self._buffered == 0
            if empty:
                self._wake.set()  # the claim loop refills the buffer
            if self._stopping.is_set() or time.monotonic() - claimed_at > max_wait:
                self._release_unstarted(item)
                continue
            return item
        return None

    def _release_unstarted(self, item: Claimed) -> None:
        try:
            if self.engine.store.release(item.lease):
                self.stats.released += 1
        except StoreError as exc:  # the lease will expire and the reaper requeues it
            log.warning("run %s: hand-back failed (%s)", item.lease.run_id, describe(exc))
        finally:
            with self._lock:
                self._inflight -= 1
            self._wake.set()

    def _slot(self) -> None:
        while (item := self._take()) is not None:
            try:
                segment = Segment(
                    self.engine,
                    item.lease,
                    item.request,
                    item.requeue_count,
                    collect_steps=False,
                    decision=item.decision,
                )
                with self._lock:
                    self._active[item.lease.run_id] = segment
                started = time.monotonic()
                result = segment.execute()
                self._timed(time.monotonic() - started)
                self.stats.count(result.outcome)
                if result.outcome is Outcome.LEASE_LOST:
                    # A refused write leaves no row; this line is its only trace (the audit
                    # counts them from the worker's log).
                    log.warning(
                        "run %s: lease_lost: a write under token %d was refused; the "
                        "segment stopped without writing",
                        item.lease.run_id,
                        item.lease.token,
                    )
            except Exception:  # a bug must not kill the slot; the lease will expire
                log.exception("run %s: segment crashed", item.lease.run_id)
            finally:
                with self._lock:
                    self._active.pop(item.lease.run_id, None)
                    self._inflight -= 1
                self._wake.set()

    def _reap_loop(self) -> None:
        while not self._stopping.wait(self.reap_interval):
            try:
                report = self._reaper.run_once()
            except Exception as exc:
                log.warning("reaper pass failed: %s", describe(exc))
                continue
            self.stats.reaped += report.requeued + report.dead_lettered
            if report.requeued:
                self._wake.set()

    # -- drain ---------------------------------------------------------------------------

    def _drain(self) -> None:
        """Hand back the runs not started yet; wait for the running ones up to the grace
        period, then hand the rest back."""
        while True:
            try:
                entry = self._jobs.get_nowait()
            except queue.Empty:
                break
            if entry is not None:
                with self._lock:
                    self._buffered -= 1
                self._release_unstarted(entry[0])
        deadline = time.monotonic() + self.grace_seconds
        while self.inflight and not self._grace_over.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wake.wait(min(remaining, 0.1))
            self._wake.clear()
        with self._lock:
            leftover = list(self._active.values())
        for segment in leftover:
            self._hand_back(segment)

    def _hand_back(self, segment: Segment) -> None:
        # `release` refuses a run whose non-idempotent fence stands (in the same UPDATE, so a
        # fence stamped this instant is seen): that run is dead-lettered instead, because
        # the write may be happening right now. The segment is still running, though: its
        # write may finish and clear the fence between the two statements, so the
        # dead-letter applies only while the fence stands, and a refused pair is tried
        # again. Both refused every time: the run is no longer ours (it ended, or left us).
        store = self.engine.store
        verdict = _policy.drain(ToolEffect.NON_IDEMPOTENT_WRITE)
        assert verdict is not None
        settlement = dataclasses.replace(
            _dead_letter(verdict, FailureClass.UNKNOWN, verdict.why, "drain"),
            only_while_fenced=ToolEffect.NON_IDEMPOTENT_WRITE,
        )
        for _ in range(HAND_BACK_ATTEMPTS):
            if store.release(segment.lease):
                self.stats.released += 1
                log.info("run %s handed back to the queue (drain)", segment.run_id)
                return
            if store.settle(segment.lease, settlement) is not None:
                log.warning("run %s dead-lettered on drain: %s", segment.run_id, verdict.why)
                return

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            first = not self._stopping.is_set()
            log.warning(
                "%s: %s received, %s",
                self.identity,
                signal.Signals(signum).name,
                f"draining (grace {self.grace_seconds:g}s)" if first else "stopping now",
            )
            self.stop(immediately=not first)

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
