"""Every named query of the SQLite store finds its rows through an index, on the schema the
migrations build: an index dropped to make writes cheaper must not leave a query scanning
the table. (SQLite only: the planner and its `EXPLAIN QUERY PLAN` are SQLite's.)

The listing of runs (`runs`, `runs_after`) reads the table in its own order and is the one
exception: it has always done so, and stops at its page size.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tenure.store.sqlite import Q, SQLiteStore

SCANS_BY_DESIGN = {"runs", "runs_after"}
RUN_TABLES = ("tenure_runs", "tenure_events")


def _plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {name: None for name in re.findall(r":(\w+)", sql)}
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


@pytest.fixture
def migrated(tmp_path: Path) -> sqlite3.Connection:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'tenure.db'}")
    store.migrate()
    store.close()
    return sqlite3.connect(tmp_path / "tenure.db")


@pytest.mark.parametrize("name", sorted(n for n in Q if n not in SCANS_BY_DESIGN))
def test_a_query_reads_the_run_tables_through_an_index(
    migrated: sqlite3.Connection, name: str
) -> None:
    plan = _plan(migrated, Q[name])
    scans = [step for step in plan if step.startswith(tuple(f"SCAN {t}" for t in RUN_TABLES))]
    covering = [step for step in scans if "COVERING INDEX" in step or "USING INDEX" in step]
    assert scans == covering, f"{name} scans a run table: {plan}"


def test_the_counts_and_the_reaper_read_the_listing_index_without_queued_runs(
    migrated: sqlite3.Connection,
) -> None:
    for name in ("run_counts", "stale_runs", "held_by"):
        assert any("tenure_runs_listing_dequeued" in step for step in _plan(migrated, Q[name]))
    queued = migrated.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'tenure_runs_listing_dequeued'"
    ).fetchone()[0]
    assert "WHERE status <> 'queued'" in queued
