"""How a duration reads to a person, on the command line and on the dashboard alike (pure)."""

from __future__ import annotations


def span(seconds: float) -> str:
    """`45s`, `3m 20s`, `2h 5m`, `3d 4h`: a duration in its two largest units."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d {s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"
