"""The drain's last word on a run still in flight when the grace period is over: back to the
queue untouched, back in doubt (a probe-able write in flight), or dead-lettered (a
non-idempotent write in flight, no probe)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from tenure import _policy
from tenure._recovery import dead_letter
from tenure._types import FailureClass, ToolEffect

if TYPE_CHECKING:
    from tenure._ladder import Engine, Segment

log = logging.getLogger("tenure.worker")
# A release and a dead-letter refused in turn (the write cleared its fence in between) are
# tried again this many times; refused every time, the run is no longer ours.
HAND_BACK_ATTEMPTS = 3


def hand_back(engine: Engine, segment: Segment) -> bool:
    """A run still in flight when a drain's grace is over goes back (SPEC §10 worker, §16);
    True when it went back to the queue untouched (`release`)."""
    # `release` refuses a run whose non-idempotent fence stands (in the same UPDATE, so a
    # fence stamped this instant is seen): that run is dead-lettered instead, because
    # the write may be happening right now. The segment is still running, though: its
    # write may finish and clear the fence between the two statements, so the
    # dead-letter applies only while the fence stands, and a refused pair is tried
    # again. Both refused every time: the run is no longer ours (it ended, or left us).
    # A fence whose tool has a probe sends the run back in doubt instead (SPEC §16),
    # guarded the same way: only while that fence stands.
    store = engine.store
    for _ in range(HAND_BACK_ATTEMPTS):
        if store.release(segment.lease):
            log.info("run %s handed back to the queue (drain)", segment.run_id)
            return True
        verdict = _policy.drain(
            ToolEffect.NON_IDEMPOTENT_WRITE,
            probe=segment.fence_probe,
            requeue_count=segment.requeue_count,
            max_requeues=engine.settings.max_requeues,
        )
        if isinstance(verdict, _policy.InDoubt):
            # The write is still running in this process: its run is claimable only once
            # the tool's timeout is over, so that the probe asks after the write ended,
            # and the tool is told its run is gone (`ctx.cancelled`) before that.
            wait = segment.step_time_left(time.monotonic())
            if store.requeue_in_doubt(segment.lease, wait, FailureClass.UNKNOWN, verdict.why):
                segment.lose(cancelled=False)
                log.warning("run %s requeued in doubt on drain", segment.run_id)
                return False
            continue
        assert verdict is not None
        settlement = dataclasses.replace(
            dead_letter(verdict, FailureClass.UNKNOWN, verdict.why, "drain"),
            only_while_fenced=ToolEffect.NON_IDEMPOTENT_WRITE,
        )
        if store.settle(segment.lease, settlement) is not None:
            log.warning("run %s dead-lettered on drain: %s", segment.run_id, verdict.why)
            return False
    return False
