"""The reaper (SPEC §7): settles or requeues runs whose lease expired."""

from __future__ import annotations

import logging

from tenure import _policy
from tenure._types import ReapReport
from tenure.store._base import Store

log = logging.getLogger("tenure.reaper")
DEFAULT_REAP_LIMIT = 50


class Reaper:
    def __init__(self, store: Store, max_requeues: int) -> None:
        self.store = store
        self.max_requeues = max_requeues

    def run_once(self, limit: int = DEFAULT_REAP_LIMIT) -> ReapReport:
        """One pass over at most `limit` stale runs.

        The candidates are read without a lock; each write re-checks staleness and the
        lease token it saw, so a heartbeat landing in between wins (the slow worker keeps
        its run) and a concurrent reaper's write makes ours a skip.
        """
        requeued = dead_lettered = skipped = 0
        for stale in self.store.stale_runs(limit):
            verdict = _policy.reap(
                stale.pending_effect, stale.has_request, stale.requeue_count, self.max_requeues
            )
            if verdict is None:
                won = self.store.requeue_stale(stale.run_id, stale.lease_token)
                requeued += won
            else:
                won = self.store.dead_letter_stale(
                    stale.run_id, stale.lease_token, verdict.reason, verdict.why
                )
                dead_lettered += won
            skipped += not won
            if won:
                log.info(
                    "reaper: run %s %s",
                    stale.run_id,
                    "requeued" if verdict is None else f"dead-lettered ({verdict.reason})",
                )
        expired = self.store.expire_waits(limit)
        return ReapReport(
            requeued=requeued, dead_lettered=dead_lettered, skipped=skipped, expired=expired
        )
