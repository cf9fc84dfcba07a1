"""The worker loop: claim into free slots, execute segments on threads, reap periodically,
drain on SIGTERM/SIGINT.

Group commit: when a segment reaches its normal end it hands the settle to the worker and
its slot takes the next buffered run. The slot that finds the buffer empty commits the ends
of every run finished meanwhile, each under its own guard, and the claim that refills the
freed room, in one transaction (`Store.settle_and_claim`), on its own thread: no hand-off
to another thread, whose every wait for the GIL would stretch the commit. The loop of `run`
commits an end that waited `MAX_END_DELAY` (its slot went on to a long run) and claims when
the buffer is empty and no slot did (runs that arrive while every slot waits). Busy workers
so pay one commit for several runs. Nothing of a run happens after its settle, so deferring
the commit changes no guarantee: until it commits the run is still ours under its lease,
and a worker that dies first leaves it to the reaper.

Claims are batched too: one claim fills every free slot and, while recent runs have been
short, a small buffer (up to `prefetch` more runs); the next claim waits until that buffer
is empty, so one commit serves several runs. Runs that take seconds
(most agent runs) are not claimed ahead: a buffered run would hold a lease that another
worker could use. A buffered run holds its lease while it waits: one that waited longer than
a quarter of its lease, or that is still waiting when the worker stops, is handed back to
the queue (`release`, guarded by its lease) instead of being started.
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
from tenure._errors import DatabaseGone, StoreError
from tenure._ladder import Engine, Segment, _dead_letter
from tenure._reaper import Reaper
from tenure._types import FailureClass, Outcome, ToolEffect
from tenure.store._base import Claimed, Settlement

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
# An ended run's settle waits at most about this long for a commit: a slot that goes on to
# a buffered run commits its ended runs when the buffer runs dry, and this is the backstop
# for a slot that took a long run meanwhile.
MAX_END_DELAY = 0.02
_worker_numbers = itertools.count(1)


def worker_identity() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}:{next(_worker_numbers)}"


@dataclass(frozen=True)
class _Cycle:
    settled: int
    claimed: int
    tried_claim: bool


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
        self._held: set[str] = set()  # runs claimed and not yet given up (buffered or running)
        self._unsure = False  # a commit failed: its claims may have applied all the same
        self._ended: list[Segment] = []  # segments whose deferred settle awaits its commit
        self._ended_since = 0.0  # when the oldest of them ended
        self._committing = threading.Lock()  # held by the one thread committing for all
        self._closed = False  # set when the drain is over
        self._lock = threading.Lock()
        self._inflight = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._grace_over = threading.Event()
        self._reaper = Reaper(engine.store, engine.settings.max_requeues)
        self._gone: DatabaseGone | None = None  # raised by `run` once it stopped

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
        if self._gone is not None:
            raise self._gone
        return self.stats

    def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            cycle = self._cycle(overdue_only=True)
            if cycle is not None and (cycle.claimed or cycle.settled):
                continue
            if cycle is not None and cycle.tried_claim and self.burst and self.inflight == 0:
                return
            with self._lock:
                waiting = bool(self._ended) or self._inflight > 0
            # While runs are in flight, look again soon: an ended run whose slot went on to
            # a long run is committed from here once it is overdue.
            self._wake.wait(
                min(self.poll_interval, MAX_END_DELAY) if waiting else self.poll_interval
            )
            self._wake.clear()

    def _defer(self, segment: Segment, settlement: Settlement) -> bool:
        """A slot's segment ended: its settle waits for the next commit of this worker.
        Refused once the worker has stopped: nothing would commit it."""
        with self._lock:
            if self._closed:
                return False
            self._active.pop(segment.run_id, None)
            if not self._ended:
                self._ended_since = time.monotonic()
            self._ended.append(segment)
        return True

    def _take_ended(self) -> list[Segment]:
        with self._lock:
            ended, self._ended = self._ended, []
        return ended

    def _cycle(self, *, overdue_only: bool = False, claim: bool = True) -> _Cycle | None:
        """Commit the ended runs and, when the buffer is empty, claim into the free room, in
        one transaction. Whichever thread finds work does it (a slot whose buffer ran dry,
        or the loop of `run`); None when another thread is committing right now (what ends
        meanwhile goes with the next commit, or the loop's once overdue). With
        `overdue_only`, ended runs are committed only once they waited `MAX_END_DELAY`."""
        if not self._committing.acquire(blocking=False):
            return None
        try:
            with self._lock:
                overdue = time.monotonic() - self._ended_since >= MAX_END_DELAY
                if overdue_only and not overdue:
                    ended: list[Segment] = []
                else:
                    ended, self._ended = self._ended, []
                room = self.concurrency + self._prefetch_now() - self._inflight + len(ended)
                empty = self._buffered == 0
            if self._unsure:
                self._hand_back_orphans()
            claiming = claim and not self._stopping.is_set() and room > 0 and empty
            limit = room if claiming else 0
            claimed = self._commit(ended, limit) if ended or limit else []
            return _Cycle(len(ended), len(claimed), claiming)
        finally:
            self._committing.release()

    def _commit(self, ended: list[Segment], limit: int) -> list[Claimed]:
        """Settle the runs of `ended` and claim up to `limit` more, in one transaction."""
        store = self.engine.store
        settles = [(segment.lease, _deferred(segment)) for segment in ended]
        try:
            results, claimed = store.settle_and_claim(
                settles,
                self.identity,
                self.queues,
                self.engine.settings.lease_seconds,
                limit,
            )
        except DatabaseGone as exc:
            # Every later write would fail alike: stop claiming; `run` raises it at the end.
            self._gone = exc
            self.stop(immediately=True)
            return []
        except Exception as exc:
            # A lost COMMIT may have applied: its claims would be held under our name with
            # no slot to run them. They are looked for (now, or at a later cycle while the
            # database is out of reach) and handed back untouched.
            self._unsure = True
            if not ended:
                log.warning("%s: claim failed (%s); retrying", self.identity, describe(exc))
                self._hand_back_orphans()
                time.sleep(self.poll_interval)
                return []
            # Nothing applied. Each run is settled on its own, with its own recovery.
            log.warning(
                "%s: settling %d runs together failed (%s); settling them one by one",
                self.identity,
                len(ended),
                describe(exc),
            )
            outcomes = [segment.settle_deferred() for segment in ended]
            claimed = []
            self._hand_back_orphans()
        else:
            outcomes = [segment.settled(r) for segment, r in zip(ended, results, strict=True)]
        for segment, outcome in zip(ended, outcomes, strict=True):
            self._count(segment, outcome)
        now = time.monotonic()
        with self._lock:
            self._inflight += len(claimed) - len(ended)
            self._buffered += len(claimed)
            self._held.difference_update(segment.run_id for segment in ended)
            self._held.update(item.lease.run_id for item in claimed)
        self.stats.claimed += len(claimed)
        for item in claimed:
            self._jobs.put((item, now))
        return claimed

    def _hand_back_orphans(self) -> None:
        """Runs the database says we hold but no slot knows of (claimed by a commit whose
        outcome we never learnt) go back to the queue untouched, instead of waiting for
        their lease to expire and being charged a requeue. Called with `_committing` held,
        so no claim of ours is in flight; every hand-back is guarded by its lease."""
        store = self.engine.store
        try:
            held = store.held_by(self.identity)
            with self._lock:
                orphans = [lease for lease in held if lease.run_id not in self._held]
            for lease in orphans:
                if store.hand_back(lease, "its claim's commit was lost"):
                    log.warning("run %s: claimed by a lost commit; handed back", lease.run_id)
        except Exception as exc:  # still out of reach: the next cycle looks again
            log.warning("%s: cannot check its claims yet (%s)", self.identity, describe(exc))
            return
        self._unsure = False

    def _count(self, segment: Segment, outcome: Outcome) -> None:
        self.stats.count(outcome)
        if outcome is Outcome.LEASE_LOST:
            # A refused write leaves no row; this line is its only trace (the audit counts
            # them from the worker's log).
            log.warning(
                "run %s: lease_lost: a write under token %d was refused; the segment "
                "stopped without writing",
                segment.run_id,
                segment.lease.token,
            )

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

    def _next(self) -> tuple[Claimed, float] | None:
        """The next buffered entry; a slot that finds the buffer empty first commits the
        ended runs and claims more itself (no hand-off to another thread on the way)."""
        try:
            return self._jobs.get_nowait()
        except queue.Empty:
            pass
        self._cycle()
        return self._jobs.get()

    def _take(self) -> Claimed | None:
        """The next buffered run a slot should start; None when the worker is done."""
        max_wait = self.engine.settings.lease_seconds * MAX_BUFFER_WAIT_OF_LEASE
        while (entry := self._next()) is not None:
            item, claimed_at = entry
            with self._lock:
                self._buffered -= 1
            if self._stopping.is_set():
                self._release_unstarted(item, "the worker is stopping")
            elif time.monotonic() - claimed_at > max_wait:
                self._release_unstarted(item, "it waited too long in the worker's buffer")
            else:
                return item
        return None

    def _release_unstarted(self, item: Claimed, why: str) -> None:
        """A buffered run that never started goes back untouched (its attempt not counted)."""
        try:
            if self.engine.store.hand_back(item.lease, why):
                self.stats.released += 1
        except StoreError as exc:  # the lease will expire and the reaper requeues it
            log.warning("run %s: hand-back failed (%s)", item.lease.run_id, describe(exc))
        finally:
            with self._lock:
                self._inflight -= 1
                self._held.discard(item.lease.run_id)
            self._wake.set()

    def _slot(self) -> None:
        while (item := self._take()) is not None:
            segment: Segment | None = None
            try:
                segment = Segment(
                    self.engine,
                    item.lease,
                    item.request,
                    item.requeue_count,
                    collect_steps=False,
                    decision=item.decision,
                    defer=self._defer,
                )
                with self._lock:
                    self._active[item.lease.run_id] = segment
                started = time.monotonic()
                result = segment.execute()
                self._timed(time.monotonic() - started)
                if segment.deferred is None:
                    self._count(segment, result.outcome)
            except Exception:  # a bug must not kill the slot; the lease will expire
                log.exception("run %s: segment crashed", item.lease.run_id)
            finally:
                if segment is None or segment.deferred is None:
                    # A deferred end leaves the slot now and the run at its commit.
                    with self._lock:
                        self._active.pop(item.lease.run_id, None)
                        self._held.discard(item.lease.run_id)
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
                self._release_unstarted(entry[0], "the worker is stopping")
        deadline = time.monotonic() + self.grace_seconds
        while True:
            self._commit_ended()
            remaining = deadline - time.monotonic()
            if not self.inflight or self._grace_over.is_set() or remaining <= 0:
                break
            self._wake.wait(min(remaining, 0.1))
            self._wake.clear()
        with self._lock:
            leftover = list(self._active.values())
        for segment in leftover:
            self._hand_back(segment)
        with self._lock:
            self._closed = True  # a segment still running from here on settles itself
        self._commit_ended()  # runs that ended while the others were handed back

    def _commit_ended(self) -> None:
        """Commit every ended run now (waiting for a commit in progress), claiming nothing."""
        with self._committing:
            if ended := self._take_ended():
                self._commit(ended, 0)

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


def _deferred(segment: Segment) -> Settlement:
    assert segment.deferred is not None, "only a segment that deferred its end is committed"
    return segment.deferred
