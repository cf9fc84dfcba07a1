"""Migrations 0011 and 0012 rebuild SQLite's run table (a column's UNIQUE, or a check, cannot
be changed in place), and 0012 its workers table: a database written by the schema before
them keeps every row and every value, its keys still deduplicate, its trigger still clears
a run's deltas, and its workers are still there. (SQLite only: PostgreSQL's 0011 and 0012
change nothing.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tenure.store import _sql
from tenure.store._records import NewRun
from tenure.store.sqlite import SQLiteStore, _statements

REBUILT = 11
# One run in each kind of state the old schema could hold, two with keys and two without
# (the running one with 0010's step nonce).
ROWS = [
    "('q1', 'default', 'queued', '', '{}', 'key-1', '', NULL, 0, 0, 5.0, '', 0, '', '', NULL,"
    " 0, 0, 0, 0, 1.0, NULL, NULL, 1.0, NULL, NULL, NULL, 0, NULL, 0, NULL)",
    "('q2', 'other', 'queued', '', '{}', NULL, '', NULL, 0, 2, 6.0, '', 1, 'timeout', 'slow',"
    " NULL, 0, 0, 0, 3, 2.0, 2.0, NULL, 2.0, NULL, NULL, NULL, 1, NULL, 0, NULL)",
    "('r1', 'default', 'running', '', '{}', NULL, 'worker:h:1:0', 99.0, 3, 0, 1.0,"
    " 'non_idempotent_write', 1, '', '', NULL, 10, 20, 0.5, 7, 3.0, 3.0, NULL, 3.0, NULL,"
    ' NULL, NULL, 0, \'{"tool": "pay"}\', 1, 42)',
    "('c1', 'default', 'completed', 'completed', NULL, 'key-2', '', NULL, 1, 0, 1.0, '', 0,"
    " '', '', 'done', 1, 2, 0.25, 4, 4.0, 4.0, 5.0, 5.0, NULL, NULL, NULL, 0, NULL, 0, NULL)",
    "('w1', 'default', 'waiting_for_approval', '', '{}', NULL, '', NULL, 1, 0, 1.0, '', 0,"
    " '', '', NULL, 0, 0, 0, 2, 6.0, 6.0, NULL, 6.0, '{\"kind\": \"approval\"}', NULL, 9.0,"
    " 0, NULL, 0, NULL)",
]


WORKERS = [
    "('worker:h:1:0', 'h', 1, NULL, 4, 2, 10.0, 'running', 1.0, 2.0, NULL)",
    "('worker:h:2:0', 'h', 2, '[\"mail\"]', 1, 0, 10.0, 'stopped', 1.0, 3.0, 3.0)",
]


def _old_database(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE tenure_schema_version (version INTEGER NOT NULL, applied_at REAL NOT NULL)"
    )
    for version, script in _sql.migrations("sqlite"):
        if version >= REBUILT:
            continue
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO tenure_schema_version VALUES (?, 0)", (version,))
    for row in ROWS:
        conn.execute(f"INSERT INTO tenure_runs VALUES {row}")
    conn.execute(
        "INSERT INTO tenure_deltas (run_id, sequence, chunk, text) VALUES ('r1', 8, 0, 'x')"
    )
    for row in WORKERS:
        conn.execute(f"INSERT INTO tenure_workers VALUES {row}")
    conn.close()


def _all_rows(path: Path, table: str = "tenure_runs") -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
    conn.close()
    return rows


# Columns a later migration fills in from what the database holds: `streamed` (0024) is set
# for a run that holds deltas (r1 here).
DERIVED = {"streamed"}


def _as_before(path: Path, before: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The run rows now, in the columns they had before; a column added by a later
    migration (appended at the end) holds nothing yet, or its declared default."""
    width = len(before[0])
    rows = _all_rows(path)
    with sqlite3.connect(path) as conn:
        info = conn.execute("PRAGMA table_info(tenure_runs)").fetchall()
    conn.close()
    added = [
        (width + i, None if d is None else conn_literal(d))
        for i, (_cid, name, _type, _nn, d, _pk) in enumerate(info[width:])
        if name not in DERIVED
    ]
    assert all(row[i] in (None, d) for row in rows for i, d in added)
    return [row[:width] for row in rows]


def conn_literal(sql: str) -> object:
    """A column default as SQLite declares it (a literal), as the value it stores."""
    with sqlite3.connect(":memory:") as conn:
        value = conn.execute(f"SELECT {sql}").fetchone()[0]
    conn.close()
    return value


@pytest.fixture
def upgraded(tmp_path: Path) -> tuple[Path, list[tuple[object, ...]], SQLiteStore]:
    path = tmp_path / "old.db"
    _old_database(path)
    before = _all_rows(path)
    store = SQLiteStore(f"sqlite:///{path}")
    store.migrate()
    return path, before, store


def test_every_row_and_value_survives_the_rebuild(
    upgraded: tuple[Path, list[tuple[object, ...]], SQLiteStore],
) -> None:
    path, before, store = upgraded
    try:
        assert store.schema_version() >= REBUILT
        assert len(before) == len(ROWS)
        assert _as_before(path, before) == before
        assert _all_rows(path, "tenure_workers") == [
            ("worker:h:1:0", "h", 1, None, 4, 2, 10.0, "running", 1.0, 2.0, None),
            ("worker:h:2:0", "h", 2, '["mail"]', 1, 0, 10.0, "stopped", 1.0, 3.0, 3.0),
        ]
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    finally:
        store.close()


def test_keys_still_deduplicate_and_runs_without_a_key_do_not_collide(
    upgraded: tuple[Path, list[tuple[object, ...]], SQLiteStore],
) -> None:
    _, _, store = upgraded
    try:
        taken = NewRun("new-1", "default", "{}", "key-1")
        assert store.enqueue(taken) == ("q1", False)
        assert store.enqueue(NewRun("new-2", "default", "{}", None)) == ("new-2", True)
        assert store.enqueue(NewRun("new-3", "default", "{}", None)) == ("new-3", True)
        assert store.enqueue(NewRun("new-4", "default", "{}", "key-3")) == ("new-4", True)
    finally:
        store.close()


def test_a_run_leaving_running_still_clears_its_deltas(
    upgraded: tuple[Path, list[tuple[object, ...]], SQLiteStore],
) -> None:
    path, _, store = upgraded
    try:
        with sqlite3.connect(path) as conn:
            marked = conn.execute("SELECT id FROM tenure_runs WHERE streamed").fetchall()
        conn.close()
        assert marked == [("r1",)]  # 0024 marks the run that holds deltas, and only it
        assert store.cancel("r1")
        with sqlite3.connect(path) as conn:
            left = conn.execute("SELECT COUNT(*) FROM tenure_deltas WHERE run_id = 'r1'")
            assert left.fetchone()[0] == 0
        conn.close()
    finally:
        store.close()


def test_the_rebuilt_tables_still_refuse_what_their_checks_refuse(
    upgraded: tuple[Path, list[tuple[object, ...]], SQLiteStore],
) -> None:
    path, before, store = upgraded
    store.close()
    refused = [
        "UPDATE tenure_runs SET status = 'unknown' WHERE id = 'q1'",
        "UPDATE tenure_runs SET termination_reason = 'unknown' WHERE id = 'c1'",
        "UPDATE tenure_runs SET pending_effect = 'unknown' WHERE id = 'r1'",
        "UPDATE tenure_runs SET lease_expires = NULL WHERE id = 'r1'",
        "UPDATE tenure_workers SET state = 'unknown' WHERE id = 'worker:h:1:0'",
    ]
    with sqlite3.connect(path) as conn:
        for sql in refused:
            with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
                conn.execute(sql)
    conn.close()
    assert _as_before(path, before) == before
