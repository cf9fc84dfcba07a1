"""Failure recovery (SPEC §6.7): what a segment does when its loop raised.

The decision is `_policy.recovery` (pure); this module carries it out with the segment's
guarded writes (`Steps`). Each write is ownership-guarded: one that does not win raises
(`LeaseLost`, `RunCancelled`) and the segment touches nothing more. A failure inside recovery itself
dead-letters the run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tenure import _policy
from tenure._classify import classify, describe, retry_after
from tenure._errors import LeaseLost, RunCancelled
from tenure._types import EventKind, FailureClass, Outcome, RunStatus, TerminationReason
from tenure.store._base import NewEvent, Settlement

if TYPE_CHECKING:
    from tenure._steps import Steps

log = logging.getLogger("tenure")


def recover(steps: Steps, exc: Exception, *, interactive: bool, requeue_count: int) -> Outcome:
    """Interactive runs settle `failed` (`provider_failed`) and surface the error; queued
    runs are requeued with backoff or dead-lettered, in SPEC §6.7's order."""
    failure_class = classify(exc)
    message = describe(exc)
    try:
        if interactive:
            steps.settle(
                Settlement(
                    RunStatus.FAILED,
                    TerminationReason.PROVIDER_FAILED,
                    error_class=failure_class,
                    error=message,
                )
            )
            return Outcome.FAILED
        return _recover_queued(steps, exc, failure_class, message, requeue_count)
    except LeaseLost:
        return Outcome.LEASE_LOST
    except RunCancelled:
        return Outcome.CANCELLED
    except Exception as inner:
        log.error("run %s: failure recovery failed (%s); dead-lettering", steps.run_id, inner)
        return _dead_letter_after(steps, exc, inner)


def _recover_queued(
    steps: Steps, exc: Exception, failure_class: FailureClass, message: str, requeue_count: int
) -> Outcome:
    settings = steps.settings
    verdict = _policy.recovery(
        failure_class,
        steps.fence,
        requeue_count,
        settings.max_requeues,
        probe=steps.fence_probe,
    )
    if isinstance(verdict, _policy.InDoubt):
        steps.requeue_in_doubt(failure_class, message)
        log.warning("run %s: requeued in doubt (%s): %s", steps.run_id, verdict.why, message)
        return Outcome.REQUEUED
    if verdict is None:
        delay = _policy.backoff(
            requeue_count,
            base=settings.backoff_base,
            cap=settings.backoff_cap,
            retry_after=retry_after(exc),
        )
        steps.requeue(delay, failure_class, message)
        log.info("run %s: requeued after %s, retry in %.1fs", steps.run_id, message, delay)
        return Outcome.REQUEUED
    steps.settle(dead_letter(verdict, failure_class, message, "failure"))
    log.warning("run %s: dead-lettered (%s): %s", steps.run_id, verdict.reason, message)
    return Outcome.FAILED


def _dead_letter_after(steps: Steps, exc: Exception, inner: Exception) -> Outcome:
    verdict = _policy.DeadLetter(
        TerminationReason.NOT_RETRYABLE, f"failure recovery failed: {describe(inner)}"
    )
    settlement = dead_letter(verdict, FailureClass.UNKNOWN, describe(exc), "failure")
    try:
        won = steps.store.settle(steps.lease, settlement)
    except Exception as last:
        # The database is out of reach: the lease will expire and the reaper decides.
        log.error("run %s: cannot dead-letter either (%s)", steps.run_id, last)
        return Outcome.FAILED
    return Outcome.LEASE_LOST if won is None else Outcome.FAILED


def dead_letter(
    verdict: _policy.DeadLetter, failure_class: FailureClass, message: str, cause: str
) -> Settlement:
    """The settlement of a dead-letter: why, by which failure, and its event."""
    event = NewEvent(
        EventKind.DEAD_LETTERED,
        {
            "reason": str(verdict.reason),
            "cause": cause,
            "error_class": str(failure_class),
            "error": message,
            "why": verdict.why,
        },
    )
    return Settlement(
        RunStatus.FAILED,
        verdict.reason,
        error_class=failure_class,
        error=message,
        events=(event,),
    )
