"""Provider capacity (SPEC §17): `Limits`, and the pure arithmetic of its buckets.

A per-minute limit is a bucket refilled continuously at `limit / 60` per second that holds at
most `limit / 10`: providers enforce their minute over shorter windows, so a client that spends
its whole minute in the first second is refused most of it. The store keeps the buckets (one
row per model, shared by every worker on the database); this module only says what a bucket
holds and how long until it can pay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenure._errors import InvalidRequest

SECONDS_PER_MINUTE = 60.0
# A bucket holds a tenth of its per-minute limit: at 60 requests a minute, 6 at once, then
# one a second.
BURST_FRACTION = 0.1
# The largest limit accepted: far past any provider's, and far inside what both stores hold.
MAX_PER_MINUTE = 1e12
MAX_CONCURRENCY = 1_000_000


def _per_minute(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"Limits: {name} must be a number > 0 or None, got {value!r}")
    if not (math.isfinite(value) and 0 < value <= MAX_PER_MINUTE):
        raise InvalidRequest(f"Limits: {name} must be a number > 0 or None, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """What a model may use, shared by every worker on the database (SPEC §17).

    `requests_per_minute` and `tokens_per_minute` are spread evenly (a bucket refilled at
    `limit / 60` per second holding at most `limit / 10`); `concurrency` caps the calls in
    flight at once. None: no such limit. A model registered with any `Limits` (even all None)
    also shares its circuit: a `rate_limit` failure carrying `Retry-After` stops every worker
    from calling it until then.
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        rpm = _per_minute("requests_per_minute", self.requests_per_minute)
        tpm = _per_minute("tokens_per_minute", self.tokens_per_minute)
        object.__setattr__(self, "requests_per_minute", rpm)
        object.__setattr__(self, "tokens_per_minute", tpm)
        c = self.concurrency
        if c is not None and (
            isinstance(c, bool) or not isinstance(c, int) or not 0 < c <= MAX_CONCURRENCY
        ):
            raise InvalidRequest(
                f"Limits: concurrency must be a whole number > 0 or None, got {c!r}"
            )


def capacity(per_minute: float) -> float:
    """The most a bucket of this per-minute limit holds (at least one whole unit)."""
    return max(per_minute * BURST_FRACTION, 1.0)


def wait_for(level: float, amount: float, per_minute: float, headroom: float = 0.0) -> float:
    """Seconds until a bucket now at `level` can pay `amount` and keep `headroom` seconds of
    its refill. An amount larger than the bucket is paid once the bucket is full (it then
    owes the rest), so a large call is slowed but never starved."""
    keep = headroom * per_minute / SECONDS_PER_MINUTE
    needed = min(amount + keep, capacity(per_minute)) - level
    return max(needed, 0.0) * SECONDS_PER_MINUTE / per_minute


# A call refused for concurrency alone cannot know when a call in flight ends: it looks again
# after this long.
CONCURRENCY_RETRY_SECONDS = 0.5


def refusal_wait(
    limits: Limits,
    requests: float | None,
    tokens: float | None,
    in_use: int,
    circuit_seconds: float,
    estimate: float,
    headroom: float = 0.0,
) -> float:
    """Seconds until a call of `estimate` tokens could be granted, given the buckets' levels
    now, the calls in flight, how long the circuit stays open and the headroom kept."""
    waits = [max(circuit_seconds, 0.0)]
    if limits.requests_per_minute is not None and requests is not None:
        waits.append(wait_for(requests, 1, limits.requests_per_minute, headroom))
    if limits.tokens_per_minute is not None and tokens is not None:
        waits.append(wait_for(tokens, estimate, limits.tokens_per_minute, headroom))
    if limits.concurrency is not None and in_use >= limits.concurrency:
        waits.append(CONCURRENCY_RETRY_SECONDS)
    return max(waits)
