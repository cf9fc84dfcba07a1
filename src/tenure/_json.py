"""JSON for what tenure stores: orjson on the hot paths, the standard library where orjson
refuses a value (an integer beyond 64 bits) or a text (`NaN`, which older rows may hold)."""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS
_FALLBACK = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def dumps(value: Any) -> str:
    """Compact JSON text; a value JSON cannot hold is written as its `str()`."""
    try:
        return orjson.dumps(value, default=str, option=_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _FALLBACK.encode(value)


def loads(text: str | bytes) -> Any:
    """The value of a JSON text; raises ValueError when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
