"""Storage faults of the SQLite store: its file deleted or replaced while open, a full disk.

SQLite only: PostgreSQL has no file of ours to lose, and its server owns its disk.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

import tenure
from tenure import RunRequest
from tenure.store.sqlite import FILE_CHECK_SECONDS, SQLiteStore

REQUEST = RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}])


def _wait_for_the_file_check() -> None:
    time.sleep(FILE_CHECK_SECONDS + 0.1)


@pytest.mark.parametrize("fault", ["deleted", "replaced"])
def test_a_write_after_the_file_is_deleted_or_replaced_is_refused(
    tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "tenure.db"
    rt = tenure.Runtime(f"sqlite:///{path}")
    first = rt.enqueue(REQUEST)
    if fault == "deleted":
        path.unlink()
    else:
        other = tenure.Runtime(f"sqlite:///{tmp_path / 'other.db'}")
        other.enqueue(REQUEST)
        other.close()
        os.replace(tmp_path / "other.db", path)
    _wait_for_the_file_check()
    message = f"database file {str(path)!r} was deleted or replaced while open"
    with pytest.raises(tenure.StoreError, match=message):
        rt.enqueue(REQUEST)
    with pytest.raises(tenure.StoreError, match=message):
        rt.run_queued(first)  # every later write, not only the first one
    rt.close()
    assert path.exists() == (fault == "replaced"), "a new database file was created"


def test_a_write_before_the_file_check_is_due_is_not_delayed(tmp_path: Path) -> None:
    rt = tenure.Runtime(f"sqlite:///{tmp_path / 'tenure.db'}")
    rt.enqueue(REQUEST)
    started = time.monotonic()
    for _ in range(50):
        rt.enqueue(REQUEST)
    assert time.monotonic() - started < 5
    rt.close()


def _wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_after_a_full_disk_the_store_recovers_and_the_wal_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "tenure.db"
    rt = tenure.Runtime(f"sqlite:///{path}")
    big = RunRequest(prompt="x" * 20_000, model="scripted", script=[{"say": "ok"}])
    for _ in range(100):
        rt.enqueue(big)
    grown = _wal_size(path)
    assert grown > 1_000_000
    # The store's connection for writes may not grow the database by a single page:
    # SQLite's own way to make a disk full without a disk.
    store = rt.store
    assert isinstance(store, SQLiteStore)
    conn = store._write_conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(tenure.StoreError, match="full"):
        for _ in range(50):
            rt.enqueue(big)
    conn.execute("PRAGMA max_page_count = 1073741823")  # space is back
    run_id = rt.enqueue(big)  # the same connection: usable again
    assert rt.status(run_id) is not None
    assert _wal_size(path) < grown / 10, "the WAL kept the size it grew to"
    rt.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
