"""The reaper (SPEC §7): settles or requeues runs whose lease expired."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tenure import _policy
from tenure._types import ReapReport
from tenure.store._base import StaleRun, Store

log = logging.getLogger("tenure.reaper")
# Stale runs read per page; a pass keeps taking pages until one comes back short.
DEFAULT_REAP_LIMIT = 50
# One pass stops taking pages after this long, so that it cannot hog the database; what is
# left is the next pass's (a worker's reaper runs every lease/4).
DEFAULT_REAP_PASS_SECONDS = 5.0


class Reaper:
    def __init__(
        self,
        store: Store,
        max_requeues: int,
        *,
        pass_seconds: float = DEFAULT_REAP_PASS_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_requeues = max_requeues
        self.pass_seconds = pass_seconds
        self._clock = clock

    def run_once(self, limit: int = DEFAULT_REAP_LIMIT) -> ReapReport:
        """One pass: pages of at most `limit` stale runs until a page comes back short (a
        worker that held hundreds of runs dies: all of them are settled in one pass), or
        the pass has taken `pass_seconds`.

        The candidates are read without a lock; each write re-checks everything the decision
        read (staleness, lease token, fence, budget, request), so a heartbeat landing in
        between wins (the slow worker keeps its run), a fence stamped in between is never
        cleared, and a concurrent reaper's write makes ours a skip.
        """
        deadline = self._clock() + self.pass_seconds
        requeued = dead_lettered = skipped = 0
        while True:
            page = self.store.stale_runs(limit)
            won = [self._settle(stale) for stale in page]
            requeued += won.count("requeued")
            dead_lettered += won.count("dead_lettered")
            skipped += won.count("skipped")
            # A skipped run changed since it was read: it is read afresh with the next page
            # (or the next pass), never decided on what was read before.
            if len(page) < limit or self._clock() >= deadline:
                break
        expired = 0
        while True:
            batch = self.store.expire_waits(limit)
            expired += batch
            if batch < limit or self._clock() >= deadline:
                break
        return ReapReport(
            requeued=requeued, dead_lettered=dead_lettered, skipped=skipped, expired=expired
        )

    def _settle(self, stale: StaleRun) -> str:
        """The decision on one stale run, written under the guard of what it was made on."""
        verdict = _policy.reap(
            stale.pending_effect,
            stale.has_request,
            stale.requeue_count,
            self.max_requeues,
            probe=stale.fence_probe,
            step_deadline=stale.step_deadline,
        )
        if isinstance(verdict, _policy.InDoubt):
            if not self.store.requeue_in_doubt_stale(stale, verdict.why):
                return "skipped"
            log.info("reaper: run %s requeued in doubt (its write's probe will tell)", stale.run_id)
            return "requeued"
        if verdict is None:
            if not self.store.requeue_stale(stale):
                return "skipped"
            log.info(
                "reaper: run %s requeued (%s)",
                stale.run_id,
                stale.step_deadline or "its worker stopped renewing its lease",
            )
            return "requeued"
        if not self.store.dead_letter_stale(stale, verdict.reason, verdict.why):
            return "skipped"
        log.info("reaper: run %s dead-lettered (%s)", stale.run_id, verdict.reason)
        return "dead_lettered"
