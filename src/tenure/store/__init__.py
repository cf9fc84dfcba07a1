"""Stores: where runs and events live. `open_store(url)` picks the dialect from the URL."""

from __future__ import annotations

from tenure._errors import InvalidRequest
from tenure.store._base import (
    Claimed,
    Held,
    Lease,
    NewEvent,
    NewFork,
    NewRun,
    Settlement,
    StaleRun,
    Store,
)

__all__ = [
    "Claimed",
    "Held",
    "Lease",
    "NewEvent",
    "NewFork",
    "NewRun",
    "Settlement",
    "StaleRun",
    "Store",
    "open_store",
]


def open_store(url: str, *, reach_seconds: float | None = None) -> Store:
    """The store at `url`. `reach_seconds` (PostgreSQL; a SQLite file has no server to wait
    for): how long to wait for a server that has not answered yet before
    `DatabaseUnavailable`, without a word in the log meanwhile; by default the whole retry
    window, told in the log."""
    if url.startswith("sqlite:"):
        from tenure.store.sqlite import SQLiteStore

        try:
            return SQLiteStore(url)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        try:
            from tenure.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise InvalidRequest(
                f"PostgreSQL needs the postgres extra: pip install 'tenure[postgres]' ({exc})"
            ) from None
        store: Store = PostgresStore(url, reach_seconds=reach_seconds)
        return store
    raise InvalidRequest(
        f"unsupported database URL {url!r}: use sqlite:///FILE or postgresql://..."
    )
