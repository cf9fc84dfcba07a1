"""What HTTP providers share: a server's requested wait, the classes of plain Python
network errors, token counts. Pure; no SDK needed."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

from tenure._errors import ProviderError
from tenure._policy import MAX_RETRY_AFTER_SECONDS
from tenure._types import FailureClass


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, else `Retry-After` (seconds or an HTTP date),
    at most `MAX_RETRY_AFTER_SECONDS`.

    An HTTP date is counted from the response's own `Date` header: the wait is the server's,
    and the circuit it opens is shared by every worker, so a worker whose clock is off must
    not lengthen it (nor shorten it). Only without a readable `Date` is it counted from `now`
    (seconds since the epoch; the local clock when None). None when the server said nothing
    usable: no header, a negative or unreadable number, a date already past.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(header)
        if value is None:
            continue
        try:
            seconds = float(value.strip()) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_RETRY_AFTER_SECONDS)
    when = _http_date(lowered.get("retry-after"))
    if when is None:
        return None
    served = _http_date(lowered.get("date"))
    if served is None:
        served = time.time() if now is None else now
    seconds = when - served
    if seconds < 0:  # a date already past says nothing about how long to wait
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


def _http_date(value: str | None) -> float | None:
    """An HTTP date as seconds since the epoch; None if absent or not a date with a zone."""
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        return None
    return when.timestamp()


def classify_plain(exc: BaseException, message: str) -> ProviderError:
    """What is left once the SDK's and httpx's own exceptions are classified: Python's
    timeouts and connection errors, and `unknown` for everything else."""
    if isinstance(exc, TimeoutError):
        return ProviderError(FailureClass.TIMEOUT, message)
    if isinstance(exc, ConnectionError):
        return ProviderError(FailureClass.CONNECTION, message)
    return ProviderError(FailureClass.UNKNOWN, message)


def count_tokens(value: Any) -> int:
    """A usage count as the endpoint reported it; anything but a positive number is 0."""
    return int(value) if isinstance(value, int | float) and value > 0 else 0
