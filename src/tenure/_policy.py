"""Pure decisions: failure recovery (SPEC §6.7), backoff (§6), the reaper (§7), the drain."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenure._types import FailureClass, TerminationReason, ToolEffect

DEFAULT_LEASE_SECONDS = 900.0
DEFAULT_MAX_REQUEUES = 3
DEFAULT_BACKOFF_BASE = 30.0
DEFAULT_BACKOFF_CAP = 600.0
MAX_ITERATIONS_CEILING = 20


@dataclass(frozen=True)
class Requeue:
    delay: float


@dataclass(frozen=True)
class DeadLetter:
    reason: TerminationReason
    why: str


Decision = Requeue | DeadLetter


def fence_lease(lease_seconds: float, tool_timeout: float) -> float:
    """The lease stamped with a write's fence: the tool's declared timeout, plus one ordinary
    lease so that a tool ending right at its timeout can still record its event."""
    return tool_timeout + lease_seconds


def backoff(
    requeue_count: int,
    *,
    base: float = DEFAULT_BACKOFF_BASE,
    cap: float = DEFAULT_BACKOFF_CAP,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before the next attempt.

    `d = min(base * 2**n, cap)`, then a uniform draw in `[d/2, d]`: jitter that still keeps
    a minimum wait. A server's Retry-After is a floor, never shortened by the jitter.
    """
    d = min(base * (2 ** min(requeue_count, 62)), cap)
    delay = (rng or random).uniform(d / 2, d)
    if retry_after is not None and retry_after > delay:
        delay = retry_after
    return max(delay, 0.0)


def recovery(
    failure_class: FailureClass,
    pending_effect: ToolEffect | None,
    requeue_count: int,
    max_requeues: int,
) -> DeadLetter | None:
    """Whether a failed queued run is dead-lettered, in SPEC §6.7 order; None means requeue."""
    if not failure_class.is_retryable:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE, f"failure class {failure_class} is not retryable"
        )
    if pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            "a non-idempotent write was in flight; repeating it is not safe",
        )
    if requeue_count >= max_requeues:
        return DeadLetter(
            TerminationReason.RETRIES_EXHAUSTED,
            f"requeue budget spent ({requeue_count} of {max_requeues})",
        )
    return None


def reap(
    pending_effect: ToolEffect | None,
    has_request: bool,
    requeue_count: int,
    max_requeues: int,
) -> DeadLetter | None:
    """What the reaper does with a run whose lease expired (SPEC §7); None means requeue."""
    if pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            "lease expired during a non-idempotent write; it may have happened",
        )
    if not has_request:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            "lease expired on an interactive run; nothing can re-execute it",
        )
    if requeue_count >= max_requeues:
        return DeadLetter(
            TerminationReason.RETRIES_EXHAUSTED,
            f"lease expired and the requeue budget is spent ({requeue_count} of {max_requeues})",
        )
    return None


def drain(pending_effect: ToolEffect | None) -> DeadLetter | None:
    """A draining worker hands a run back to the queue unless a non-idempotent write stands."""
    if pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            "worker shut down during a non-idempotent write; it may have happened",
        )
    return None
