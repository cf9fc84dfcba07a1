"""What HTTP providers share: a server's requested wait, the classes of plain Python
network errors, token counts. Pure; no SDK needed."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

from tenure._errors import ProviderError
from tenure._types import FailureClass


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, else `Retry-After` (seconds or an HTTP date).

    None when the server said nothing usable; never negative.
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
            return seconds
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


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
