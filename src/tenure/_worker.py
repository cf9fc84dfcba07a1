"""The worker loop: claim into free slots, execute segments on threads, reap periodically,
drain on SIGTERM/SIGINT.

Group commit: when a segment reaches its normal end it returns its ending, which the slot
hands to the completer (`_completer.py`), and takes the next buffered run. The slot that
finds the buffer empty has the completer commit the ends of every run finished meanwhile,
each under its own guard, and the claim that refills the freed room, in one transaction,
on its own thread: no hand-off to another thread, whose every wait for the GIL would stretch
the commit. The loop of `run` commits an end that waited `MAX_END_DELAY` (its slot went on
to a long run) and claims when the buffer is empty and no slot did (runs that arrive while
every slot waits). Busy workers so pay one commit for several runs.

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
import itertools
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType

from tenure import _loop
from tenure._classify import describe, retry_log_level
from tenure._completer import MAX_END_DELAY, Completer, claim_room
from tenure._endings import Ending
from tenure._errors import DatabaseGone, StoreError
from tenure._handback import hand_back
from tenure._heartbeat import Heartbeat, describe_worker
from tenure._ladder import Engine, Segment, StepInFlight
from tenure._reaper import Reaper
from tenure._types import Outcome
from tenure.store._base import Claimed, Lease

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
# How often the worker looks for a step hung past its deadline, whose slot it gives back.
HUNG_CHECK_SECONDS = 0.5
# How often a drain tries release, then a fenced dead-letter, while its segment still runs.
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
        key = str(outcome)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


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
        fire_schedules: Callable[[], int] | None = None,
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
        self._fire_schedules = fire_schedules
        self.identity = worker_identity()
        self.stats = WorkerStats()
        self.prefetch = max(MIN_PREFETCH, PREFETCH_PER_SLOT * concurrency)
        self._jobs: queue.SimpleQueue[tuple[Claimed, float] | None] = queue.SimpleQueue()
        self._buffered = 0
        self._segment_seconds: float | None = None  # EWMA; None until a segment ended
        self._active: dict[str, Segment] = {}
        # Leases whose hung step's slot was replaced (a lease, not a run: the run may come back
        # to this worker under a new token while the abandoned thread still hangs).
        self._abandoned: set[Lease] = set()
        self._slot_numbers = itertools.count(1)
        self._next_hung_check = 0.0
        self._lock = threading.Lock()
        self._completer = Completer(
            engine.store,
            self.identity,
            self.queues,
            engine.settings.lease_seconds,
            on_outcome=self._count,
            on_commit=self._committed,
            on_gone=self._database_gone,
            retry_pause=poll_interval,
        )
        self._inflight = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._grace_over = threading.Event()
        self._reaper = Reaper(engine.store, engine.settings.max_requeues)
        self.heartbeat = Heartbeat(
            lambda: engine.store,
            describe_worker(self.identity, self.queues, concurrency, engine.settings.lease_seconds),
            slots_in_use=self._slots_in_use,
            stopping=self._stopping.is_set,
        )
        self._gone: DatabaseGone | None = None  # raised by `run` once it stopped
        self._loop_failed = False  # no event loop thread could be started: stopped claiming

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

    def _slots_in_use(self) -> int:
        with self._lock:
            return len(self._active)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        # The signal handlers first: a slot claims as soon as it starts, and a SIGTERM that
        # arrived before the handlers would kill the process instead of draining it.
        with self._signals():
            # Registered before the first claim, so that its row is there before any lease
            # names it.
            self.heartbeat.start(self.engine.keeper)
            for _ in range(self.concurrency):
                self._start_slot()
            reaper = threading.Thread(target=self._reap_loop, name="tenure-reaper", daemon=True)
            reaper.start()
            log.info("%s started: concurrency %d", self.identity, self.concurrency)
            unsubscribe = self.engine.store.subscribe(self.wake)
            try:
                self._claim_loop()
            finally:
                unsubscribe()
                if self._stopping.is_set():
                    self.heartbeat.draining()
                self._drain()
                # A burst run ends without a stop: the reaper thread stops with it.
                self._stopping.set()
                for _ in range(self.concurrency):
                    self._jobs.put(None)
                self.heartbeat.stop()
        if self._gone is not None:
            raise self._gone
        return self.stats

    def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._give_back_hung_slots()
            cycle = self._completer.cycle(self._room, overdue_only=True)
            if cycle is not None and (cycle.claimed or cycle.settled):
                continue
            if cycle is not None and cycle.tried_claim and self.burst and self.inflight == 0:
                return
            waiting = self._completer.waiting or self.inflight > 0
            # While runs are in flight, look again soon: an ended run whose slot went on to
            # a long run is committed from here once it is overdue.
            self._wake.wait(
                min(self.poll_interval, MAX_END_DELAY) if waiting else self.poll_interval
            )
            self._wake.clear()

    def _room(self, ending: int) -> int:
        """How many runs the commit about to happen may claim (none once stopping)."""
        if self._stopping.is_set():
            return 0
        if _loop.unavailable() is not None:
            self._loop_unavailable()
            return 0
        with self._lock:
            return claim_room(
                concurrency=self.concurrency,
                prefetch=self._prefetch_now(),
                inflight=self._inflight,
                ending=ending,
                buffered=self._buffered,
            )

    def _committed(self, claimed: list[Claimed], ended: int) -> None:
        """A commit applied: `ended` runs left their slots, `claimed` runs wait in the
        buffer for a slot."""
        now = time.monotonic()
        with self._lock:
            self._inflight += len(claimed) - ended
            self._buffered += len(claimed)
        self.stats.claimed += len(claimed)
        for item in claimed:
            self._jobs.put((item, now))

    def _loop_unavailable(self) -> None:
        # Every async tool, async model and MCP call would fail alike: stop claiming, and let
        # the runs in flight end (theirs fail as retryable and go back to the queue).
        with self._lock:
            if self._loop_failed:
                return
            self._loop_failed = True
        log.error("%s stops claiming: %s", self.identity, _loop.unavailable())
        self.stop()

    def _database_gone(self, exc: DatabaseGone) -> None:
        # Every later write would fail alike: stop claiming; `run` raises it at the end.
        self._gone = exc
        self.stop(immediately=True)

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
            self._time_locked(seconds)

    def _time_locked(self, seconds: float) -> None:
        """`_timed` for a caller that holds `_lock` already."""
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
        self._completer.cycle(self._room)
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
        """A buffered run that never started goes back untouched (its attempt not counted),
        with the in-doubt fence it was claimed with, if any."""
        try:
            if self.engine.store.hand_back(item.lease, why, fence_call=item.fence_call):
                self.stats.released += 1
        except StoreError as exc:  # the lease will expire and the reaper requeues it
            log.warning("run %s: hand-back failed (%s)", item.lease.run_id, describe(exc))
        finally:
            with self._lock:
                self._inflight -= 1
            self._completer.forget(item.lease.run_id)
            self._wake.set()

    def _start_slot(self) -> None:
        number = next(self._slot_numbers)
        threading.Thread(target=self._slot, name=f"tenure-slot-{number}", daemon=True).start()

    def _give_back_hung_slots(self) -> None:
        """A step past its deadline (a tool that never returns) must not hold its slot
        forever: the segment is abandoned (its lease is no longer renewed, every write it
        tries later is refused), a new slot thread takes its place, and the old thread ends
        when the step returns, if it ever does. The run is marked with that cause, for the
        reaper to report when the lease lapses. Looked at every `HUNG_CHECK_SECONDS`."""
        now = time.monotonic()
        if now < self._next_hung_check:
            return
        self._next_hung_check = now + HUNG_CHECK_SECONDS
        with self._lock:
            hung = [(s, step) for s in self._active.values() if (step := s.past_deadline(now))]
            for segment, _ in hung:
                del self._active[segment.run_id]
                self._abandoned.add(segment.lease)
                self._inflight -= 1
        for segment, step in hung:
            # Given up before the mark: a step that returns from here on records nothing,
            # so the step the mark names stays the run's last word under this lease.
            segment.lose(cancelled=False)
            self._completer.forget(segment.run_id)
            log.warning(
                "run %s: %s; the slot is given back (the step's thread is abandoned, and "
                "nothing it returns is recorded)",
                segment.run_id,
                step.why,
            )
            self._start_slot()
            self._mark_past_deadline(segment, step)

    def _mark_past_deadline(self, segment: Segment, step: StepInFlight) -> None:
        try:
            marked = segment.mark_past_deadline(step)
        except StoreError as exc:
            log.warning(
                "run %s: its step's deadline could not be recorded (%s); the reaper will "
                "report a lease expiry",
                segment.run_id,
                describe(exc),
            )
            return
        if not marked:
            # The lease expired first (the reaper may have requeued the run already: its
            # requeue stands as written), or the step ended in between.
            log.info(
                "run %s: its step's deadline was not recorded: the run changed since the "
                "step was given up",
                segment.run_id,
            )

    def _slot(self) -> None:
        while (item := self._take()) is not None:
            ended_here = not self._execute(item)
            with self._lock:
                # (An empty set is looked at first: hashing a Lease is a Python call.)
                if self._abandoned and item.lease in self._abandoned:
                    # A new slot took this one's place while its step hung: end the thread.
                    self._abandoned.discard(item.lease)
                    return
                if ended_here:
                    # The run left the slot here (not at a commit): the slot is free again.
                    self._active.pop(item.lease.run_id, None)
                    self._inflight -= 1
            if ended_here:
                self._completer.forget(item.lease.run_id)
                self.heartbeat.changed()
                self._wake.set()  # a slot is free, and no commit will say so
            # A run whose ending went to the completer wakes no one: the next slot to find
            # the buffer empty commits it with its claim, or the loop within MAX_END_DELAY
            # (a thread switch per run was a large part of a trivial run's CPU).

    def _execute(self, item: Claimed) -> bool:
        """Run one segment; True when its ending went to the completer to be committed."""
        segment = Segment(
            self.engine,
            item.lease,
            item.request,
            item.requeue_count,
            collect_steps=False,
            decision=item.decision,
            fence_call=item.fence_call,
            last_sequence=item.last_sequence,
        )
        with self._lock:
            self._active[item.lease.run_id] = segment
        self.heartbeat.changed()
        try:
            started = time.monotonic()
            result = segment.execute_until_end()
            seconds = time.monotonic() - started
            if not isinstance(result, Ending):
                self._timed(seconds)
                self._count(segment, result.outcome)
                return False
            with self._lock:  # one acquisition for both (every run passes here)
                self._time_locked(seconds)
                self._active.pop(item.lease.run_id, None)
            self.heartbeat.changed()
            if self._completer.submit(segment, result.settlement):
                return True
            # The worker has stopped: nothing would commit it, so it is settled here.
            self._count(segment, segment.settle_alone(result.settlement))
        except Exception:  # a bug must not kill the slot; the lease will expire
            log.exception("run %s: segment crashed", item.lease.run_id)
        return False

    def _reap_loop(self) -> None:
        while not self._stopping.wait(self.reap_interval):
            try:
                report = self._reaper.run_once()
            except Exception as exc:
                log.log(retry_log_level(exc), "reaper pass failed: %s", describe(exc))
                continue
            self.stats.reaped += report.requeued + report.dead_lettered
            if report.requeued:
                self._wake.set()
            if self._fire_schedules is None:
                continue
            # Every worker fires due schedules (SPEC §22); a tick another worker fired first
            # is not fired again (the schedule's compare-and-set, then its idempotency key).
            try:
                if self._fire_schedules():
                    self._wake.set()
            except Exception as exc:
                log.log(retry_log_level(exc), "schedule pass failed: %s", describe(exc))

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
            self._completer.flush()
            remaining = deadline - time.monotonic()
            if not self.inflight or self._grace_over.is_set() or remaining <= 0:
                break
            self._wake.wait(min(remaining, 0.1))
            self._wake.clear()
        with self._lock:
            leftover = list(self._active.values())
        for segment in leftover:
            if hand_back(self.engine, segment):
                self.stats.released += 1
        self._completer.close()  # a segment still running from here on settles itself
        self._completer.flush()  # runs that ended while the others were handed back

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
