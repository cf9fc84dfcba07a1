"""JSON for what tenure stores: orjson on the hot paths, the standard library where orjson
refuses a text (`NaN`, which older rows may hold).

What JSON cannot hold is stored as its text, the same on both stores: a float that is NaN or
infinite as `"nan"`, `"inf"`, `"-inf"`; an integer beyond 64 bits as its digits; a lone
surrogate (text that is not UTF-8) with a backslash escape. Otherwise SQLite would keep a
value that PostgreSQL refuses (or orjson would write NaN as `null`, losing it)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS
# orjson writes integers in this range; the walk writes the others as text.
_INTEGERS = range(-(2**63), 2**64)
_STRICT = json.JSONEncoder(allow_nan=False, default=str, check_circular=False)


def dumps(value: Any) -> str:
    """Compact JSON text; a value JSON cannot hold is written as its `str()`."""
    try:
        text = orjson.dumps(value, default=str, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return orjson.dumps(json_safe(value), default=str, option=_OPTIONS).decode()
    # orjson writes NaN and infinities as null: only where a null appears can one hide. Most
    # payloads with a null read back equal to the value (NaN equals nothing, None least of
    # all), which is cheaper to see than the standard library's strict encoding; the others
    # (tuples, keys that are not text, NaN itself) take that encoding to decide.
    if text.find(b"null") >= 0 and orjson.loads(text) != value:
        try:
            _STRICT.encode(value)
        except (ValueError, TypeError):
            text = orjson.dumps(json_safe(value), default=str, option=_OPTIONS)
    return text.decode()


def dumps_finite(value: Any) -> str:
    """`dumps` of a value whose floats its caller knows to be finite, so that every null in
    the text is a None: the look that a null does not hide a NaN is skipped."""
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except orjson.JSONEncodeError:  # text that is not UTF-8, an integer beyond 64 bits, ...
        return dumps(value)


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` with what JSON cannot hold replaced by its text; `value` itself (the same
    object) when nothing needed replacing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if value in _INTEGERS else str(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if depth > 500:  # deeper than any payload tenure writes: its text, not a RecursionError
        return str(value)
    if isinstance(value, dict):
        items = {json_safe(k, depth + 1): json_safe(v, depth + 1) for k, v in value.items()}
        same = all(a is b for a, b in zip(items.values(), value.values(), strict=True))
        return value if same and all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, list | tuple):
        converted = [json_safe(v, depth + 1) for v in value]
        return value if all(a is b for a, b in zip(converted, value, strict=True)) else converted
    return value


def loads(text: str | bytes) -> Any:
    """The value of a JSON text; raises ValueError when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
