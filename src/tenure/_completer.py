"""The completer: commits the ends of a worker's finished segments in batches, together with
the claim that refills the freed slots (one transaction, `Store.settle_and_claim`).

Shaped like River's batch completer: a segment *returns* its ending (a `Settlement`) and the
worker hands it here; the completer owns the buffer of ended runs, its locks and the commit,
and gives each segment its outcome once the commit is known. Segments never call back into
it. Deferring a settle is safe because nothing of a run happens after its settle: until the
commit, the run is still ours under its lease, and a worker that dies first leaves it to the
reaper exactly as if it had died one instruction earlier.

Whichever thread finds work commits (a slot whose buffer ran dry, or the worker's loop);
`cycle` never waits for another thread's commit: what ends meanwhile goes with the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tenure._classify import describe, retry_log_level
from tenure._errors import DatabaseGone
from tenure._ladder import Segment
from tenure._types import Outcome, direct_init
from tenure.store._base import Claimed, Settlement, Store

log = logging.getLogger("tenure.worker")

# An ended run's settle waits at most about this long for a commit: a slot that goes on to
# a buffered run commits its ended runs when the buffer runs dry, and this is the backstop
# for a slot that took a long run meanwhile.
MAX_END_DELAY = 0.02


def claim_room(
    *, concurrency: int, prefetch: int, inflight: int, ending: int, buffered: int
) -> int:
    """How many runs the next commit may claim: every slot, plus the claim-ahead buffer,
    less the runs the worker holds (`inflight` counts the `ending` ones until their settle
    commits, in this very transaction). Nothing while runs still wait in the buffer: one
    claim serves several slots, the next waits until the buffer is empty."""
    if buffered > 0:
        return 0
    return max(concurrency + prefetch - inflight + ending, 0)


@dataclass(frozen=True)
class Cycle:
    settled: int
    claimed: int
    tried_claim: bool


@direct_init
@dataclass(frozen=True)
class Ended:
    segment: Segment
    settlement: Settlement


class Completer:
    def __init__(
        self,
        store: Store,
        owner: str,
        queues: Sequence[str] | None,
        lease_seconds: float,
        *,
        on_outcome: Callable[[Segment, Outcome], None],
        on_commit: Callable[[list[Claimed], int], None],
        on_gone: Callable[[DatabaseGone], None],
        retry_pause: float,
    ) -> None:
        self.store = store
        self.owner = owner
        self.queues = list(queues) if queues else None
        self.lease_seconds = lease_seconds
        self._on_outcome = on_outcome
        self._on_commit = on_commit  # (claimed runs, ended runs committed)
        self._on_gone = on_gone
        self._retry_pause = retry_pause
        self._lock = threading.Lock()  # guards the fields below
        self._committing = threading.Lock()  # held by the one thread committing for all
        self._ended: list[Ended] = []
        self._ended_since = 0.0  # when the oldest of them ended
        self._closed = False  # once closed, an ending is settled by its own segment
        self._held: set[str] = set()  # runs claimed here and not yet given up
        self._unsure = False  # a commit failed: its claims may have applied all the same

    # -- what the worker tells it --------------------------------------------------------

    def submit(self, segment: Segment, settlement: Settlement) -> bool:
        """A segment ended normally: its settle waits for the next commit. Refused once
        closed (nothing would commit it): the caller settles it on its own."""
        with self._lock:
            if self._closed:
                return False
            if not self._ended:
                self._ended_since = time.monotonic()
            self._ended.append(Ended(segment, settlement))
        return True

    def forget(self, run_id: str) -> None:
        """A claimed run left the worker without an ending to commit (its segment settled,
        requeued or lost it, or it was handed back unstarted)."""
        with self._lock:
            self._held.discard(run_id)

    @property
    def waiting(self) -> bool:
        with self._lock:
            return bool(self._ended)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    # -- commits -------------------------------------------------------------------------

    def cycle(self, room: Callable[[int], int], *, overdue_only: bool = False) -> Cycle | None:
        """Commit the ended runs and claim up to `room(ended)` more, in one transaction; None
        when another thread is committing right now. With `overdue_only`, ended runs are
        committed only once the oldest waited `MAX_END_DELAY`."""
        if not self._committing.acquire(blocking=False):
            return None
        try:
            return self._cycle(room, overdue_only)
        finally:
            self._committing.release()

    def flush(self) -> None:
        """Commit every ended run now (waiting for a commit in progress), claiming nothing."""
        with self._committing:
            self._cycle(lambda _: 0, overdue_only=False)

    def _cycle(self, room: Callable[[int], int], overdue_only: bool) -> Cycle:
        with self._lock:
            overdue = time.monotonic() - self._ended_since >= MAX_END_DELAY
            ended: list[Ended] = []
            if self._ended and (overdue or not overdue_only):
                ended, self._ended = self._ended, []
        if self._unsure:
            self._hand_back_orphans()
        limit = room(len(ended))
        claimed = self._commit(ended, limit) if ended or limit else []
        return Cycle(len(ended), len(claimed), limit > 0)

    def _commit(self, ended: list[Ended], limit: int) -> list[Claimed]:
        """Settle the runs of `ended` and claim up to `limit` more, in one transaction."""
        try:
            results, claimed = self.store.settle_and_claim(
                [(e.segment.lease, e.settlement) for e in ended],
                self.owner,
                self.queues,
                self.lease_seconds,
                limit,
            )
        except DatabaseGone as exc:
            self._on_gone(exc)  # every later write would fail alike
            return []
        except Exception as exc:
            self._failed(ended, exc)
            claimed = []
        else:
            for e, sequences in zip(ended, results, strict=True):
                self._on_outcome(e.segment, e.segment.settled(e.settlement, sequences))
        with self._lock:
            self._held.difference_update(e.segment.run_id for e in ended)
            self._held.update(item.lease.run_id for item in claimed)
        self._on_commit(claimed, len(ended))
        return claimed

    def _failed(self, ended: list[Ended], exc: Exception) -> None:
        # A lost COMMIT may have applied: its claims would be held under our name with no
        # slot to run them. They are looked for (now, or at a later cycle while the database
        # is out of reach) and handed back untouched.
        self._unsure = True
        if not ended:
            log.log(
                retry_log_level(exc), "%s: claim failed (%s); retrying", self.owner, describe(exc)
            )
            self._hand_back_orphans()
            time.sleep(self._retry_pause)
            return
        # Nothing applied (or we cannot tell): each run is settled on its own, with its own
        # recovery; a settle that had applied finds its guard taken and reports it.
        log.warning(
            "%s: settling %d runs together failed (%s); settling them one by one",
            self.owner,
            len(ended),
            describe(exc),
        )
        for e in ended:
            self._on_outcome(e.segment, e.segment.settle_alone(e.settlement))
        self._hand_back_orphans()

    def _hand_back_orphans(self) -> None:
        """Runs the database says we hold but no slot knows of (claimed by a commit whose
        outcome we never learnt) go back to the queue untouched, instead of waiting for
        their lease to expire and being charged a requeue. Called with `_committing` held,
        so no claim of ours is in flight; every hand-back is guarded by its lease. A run
        claimed in doubt goes back with its fence, for a worker that can ask its probe."""
        try:
            held = self.store.held_by(self.owner)
            with self._lock:
                orphans = [h for h in held if h.lease.run_id not in self._held]
            for orphan in orphans:
                lease = orphan.lease
                why = "its claim's commit was lost"
                if self.store.hand_back(lease, why, fence_call=orphan.fence_call):
                    log.warning("run %s: claimed by a lost commit; handed back", lease.run_id)
        except Exception as exc:  # still out of reach: the next cycle looks again
            log.log(
                retry_log_level(exc),
                "%s: cannot check its claims yet (%s)",
                self.owner,
                describe(exc),
            )
            return
        self._unsure = False
