"""Fixtures of the store tests that run on SQLite alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.store.sqlite import SQLiteStore


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A migrated SQLite store on a fresh file (for what only SQLite's schema has)."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'store.db'}")
    store.migrate()
    yield store
    store.close()
