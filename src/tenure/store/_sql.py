"""Loads a dialect's named queries and migrations from `store/sql/<dialect>/`."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from tenure._errors import StoreError

RUN_COLUMNS = (
    "id",
    "queue",
    "status",
    "termination_reason",
    "idempotency_key",
    "claimed_by",
    "lease_expires",
    "lease_token",
    "requeue_count",
    "available_at",
    "pending_effect",
    "attempt",
    "error_class",
    "error",
    "output",
    "input_tokens",
    "output_tokens",
    "cost",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "waiting",
    "wait_deadline",
    "fence_probe",
    "forked_from_id",
    "forked_from_sequence",
    "parent_id",
    # A run without a parent is the root of its own tree (SPEC §21).
    "COALESCE(root_id, id)",
    "priority",
    "concurrency_key",
)

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def _dir(dialect: str) -> resources.abc.Traversable:
    return resources.files("tenure.store").joinpath("sql", dialect)


@cache
def queries(dialect: str, **macros: str) -> dict[str, str]:
    """`-- name: x` blocks of `queries.sql`, with `{macro}`s filled in.

    A block whose name starts with `_` is a fragment, not a query: other blocks include it as
    `{_name}`, so that two statements that must agree (a claim and the claim of one named run)
    share their text instead of repeating it.
    """
    text = _dir(dialect).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        blocks[name] = "\n".join(lines).strip().rstrip(";")
    filled = {"run_columns": ", ".join(RUN_COLUMNS), **macros}
    # A fragment may include another (an enqueue's run includes its round): fill them in
    # until none is left.
    for _ in range(3):
        filled |= {
            name: _fill(filled.get(name, sql), filled)
            for name, sql in blocks.items()
            if name.startswith("_")
        }
    return {name: _fill(sql, filled) for name, sql in blocks.items() if not name.startswith("_")}


def _fill(sql: str, macros: dict[str, str]) -> str:
    for key, value in macros.items():
        sql = sql.replace("{" + key + "}", value)
    return sql


def migrations(dialect: str) -> list[tuple[int, str]]:
    """(version, script) of every `NNNN_name.sql`, in order."""
    found = []
    for entry in _dir(dialect).iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    return sorted(found)


def refuse_newer(current: int, dialect: str) -> None:
    """Refuse a database whose schema is newer than the migrations this tenure ships.

    Its rows may mean things this code does not know: a worker left over from before a
    rolling upgrade must not read them, let alone write them.
    """
    known = max((version for version, _ in migrations(dialect)), default=0)
    if current > known:
        raise StoreError(
            f"database schema is version {current}; this tenure knows up to {known}: upgrade tenure"
        )
