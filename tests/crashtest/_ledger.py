"""An outside system for the crash-test apps: a JSON-lines file (`$CRASHTEST_LEDGER`) of the
writes it saw, shared by every process of a crash test."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

LEDGER_VARIABLE = "CRASHTEST_LEDGER"


def _path() -> Path:
    return Path(os.environ[LEDGER_VARIABLE])


def entries() -> list[dict[str, Any]]:
    path = _path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(tool: str, key: str, amount: int, **extra: Any) -> int:
    """Append a write, as a non-idempotent outside system does: every call is a new one."""
    with _path().open("a") as f:
        f.write(json.dumps({"tool": tool, "key": key, "amount": amount, **extra}) + "\n")
    return len(entries())


def write_once(tool: str, key: str, amount: int, **extra: Any) -> int:
    """The same system with an idempotency key honoured: a repeated key changes nothing."""
    for number, entry in enumerate(entries(), 1):
        if entry["key"] == key and entry["tool"] == tool:
            return number
    return write(tool, key, amount, **extra)


def seen(tool: str, key: str) -> int:
    return sum(1 for e in entries() if e["key"] == key and e["tool"] == tool)
