"""What HTTP providers share: reading a server's requested wait. Pure; no SDK needed."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping


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
