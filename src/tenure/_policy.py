"""Pure decisions: failure recovery (SPEC §6.7), backoff (§6), the reaper (§7), the drain."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tenure._errors import InvalidRequest
from tenure._types import FailureClass, TerminationReason, ToolEffect

# The lease keeper renews in-flight leases every lease/3, so a lease needs to outlive a few
# seconds of database trouble, not the longest step (SPEC §15).
DEFAULT_LEASE_SECONDS = 30.0
# How long a model call may take before its lease is no longer renewed (rt.add_model timeout).
DEFAULT_MODEL_TIMEOUT = 600.0
DEFAULT_MAX_REQUEUES = 3
DEFAULT_BACKOFF_BASE = 30.0
DEFAULT_BACKOFF_CAP = 600.0
MAX_ITERATIONS_CEILING = 20
# The longest time tenure accepts anywhere a user gives a time (a delay, a lease, a backoff,
# a timeout, a retention age): a year and a day. Far past any real wait, and far inside what
# both stores can hold and read back.
MAX_DELAY_SECONDS = 366 * 86400.0
# The longest wait a server's Retry-After can impose: a day. A server's header is not a
# user's choice: one bad header (a wrong clock, a bug) must not park a run, or close a model
# for every worker, for a year.
MAX_RETRY_AFTER_SECONDS = 86400.0
# An age looks back from now (purge): a century stays well inside every store's timestamps.
MAX_AGE_SECONDS = 100 * 366 * 86400.0
# The deepest nesting of lists and objects accepted in a request's metadata or script.
MAX_NESTING_DEPTH = 64


def check_seconds(
    name: str, value: object, *, allow_zero: bool = False, ceiling: float | None = None
) -> float:
    """A time a user gave, in seconds: a finite number, positive (or zero when
    `allow_zero`), at most `ceiling` (`MAX_DELAY_SECONDS`); else InvalidRequest."""
    ceiling = MAX_DELAY_SECONDS if ceiling is None else ceiling
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number of seconds, got {value!r}")
    low_ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and low_ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidRequest(f"{name} must be a number of seconds {bound}, got {value!r}")
    if value > ceiling:
        raise InvalidRequest(
            f"{name} must be at most {ceiling:.0f} seconds ({_days(ceiling)}), got {value!r}"
        )
    return float(value)


def _days(seconds: float) -> str:
    return f"{seconds / 86400:.0f} days"


@dataclass(frozen=True)
class Requeue:
    delay: float


@dataclass(frozen=True)
class DeadLetter:
    reason: TerminationReason
    why: str


@dataclass(frozen=True)
class InDoubt:
    """Requeue with the fence standing: the next segment asks the tool's probe (SPEC §16)."""

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
    d = min(base * (2 ** min(requeue_count, 62)), cap, MAX_DELAY_SECONDS)
    delay = (rng or random).uniform(d / 2, d)
    if retry_after is not None:
        delay = max(delay, clamp_wait(retry_after))
    return min(max(delay, 0.0), MAX_DELAY_SECONDS)


def clamp_wait(seconds: float) -> float:
    """A wait someone else asked for (a server's Retry-After), within
    `[0, MAX_RETRY_AFTER_SECONDS]`; a wait that is not a number, or is infinite, is the
    ceiling."""
    if not math.isfinite(seconds):
        return 0.0 if seconds == -math.inf else MAX_RETRY_AFTER_SECONDS
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _in_doubt(requeue_count: int, max_requeues: int, when: str) -> DeadLetter | InDoubt:
    """A probe-able fence: back in doubt, while the budget lasts (charged like a stale
    requeue); an exhausted budget still dead-letters, the fence kept as evidence."""
    if requeue_count >= max_requeues:
        return DeadLetter(
            TerminationReason.RETRIES_EXHAUSTED,
            f"{when} a non-idempotent write whose tool has a probe, and the requeue budget "
            f"is spent ({requeue_count} of {max_requeues})",
        )
    return InDoubt(f"{when} a non-idempotent write; its tool's probe will tell")


def recovery(
    failure_class: FailureClass,
    pending_effect: ToolEffect | None,
    requeue_count: int,
    max_requeues: int,
    probe: bool = False,
) -> DeadLetter | InDoubt | None:
    """Whether a failed queued run is dead-lettered or requeued in doubt, in SPEC §6.7
    order (§16 for a fence whose tool has a probe); None means requeue."""
    if not failure_class.is_retryable:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE, f"failure class {failure_class} is not retryable"
        )
    if pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        if probe:
            return _in_doubt(requeue_count, max_requeues, "failed during")
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
    probe: bool = False,
    step_deadline: str | None = None,
) -> DeadLetter | InDoubt | None:
    """What the reaper does with a run whose lease expired (SPEC §7, §16); None means
    requeue. `step_deadline` is why the lease lapsed when its worker said so (a step past
    its deadline): the decision is the same, its reason names that cause."""
    lapsed = "lease expired" if step_deadline is None else f"{step_deadline},"
    fenced = pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    if fenced and probe and has_request:
        return _in_doubt(requeue_count, max_requeues, f"{lapsed} during")
    if fenced:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            f"{lapsed} during a non-idempotent write; it may have happened",
        )
    if not has_request:
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            f"{lapsed} on an interactive run; nothing can re-execute it",
        )
    if requeue_count >= max_requeues:
        return DeadLetter(
            TerminationReason.RETRIES_EXHAUSTED,
            f"{lapsed} and the requeue budget is spent ({requeue_count} of {max_requeues})",
        )
    return None


def drain(
    pending_effect: ToolEffect | None,
    probe: bool = False,
    requeue_count: int = 0,
    max_requeues: int = DEFAULT_MAX_REQUEUES,
) -> DeadLetter | InDoubt | None:
    """A draining worker hands a run back to the queue unless a non-idempotent write stands:
    then the run goes back in doubt (its tool has a probe) or is dead-lettered."""
    if pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        if probe:
            return _in_doubt(requeue_count, max_requeues, "worker shut down during")
        return DeadLetter(
            TerminationReason.NOT_RETRYABLE,
            "worker shut down during a non-idempotent write; it may have happened",
        )
    return None
