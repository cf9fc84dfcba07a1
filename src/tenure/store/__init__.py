"""Stores: where runs and events live. `open_store(url)` picks the dialect from the URL."""

from __future__ import annotations

from tenure._errors import InvalidRequest
from tenure.store._base import (
    Claimed,
    Held,
    Lease,
    NewEvent,
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
    "NewRun",
    "Settlement",
    "StaleRun",
    "Store",
    "open_store",
]


def open_store(url: str) -> Store:
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
        store: Store = PostgresStore(url)
        return store
    raise InvalidRequest(
        f"unsupported database URL {url!r}: use sqlite:///FILE or postgresql://..."
    )
