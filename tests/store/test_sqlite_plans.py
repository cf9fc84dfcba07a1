"""Every named query of the SQLite store finds its rows through an index, on the schema the
migrations build: an index dropped to make writes cheaper must not leave a query scanning
the table. (SQLite only: the planner and its `EXPLAIN QUERY PLAN` are SQLite's.)

And no named query pays at each execution for a table's checks: SQLite tests `x IN (a, b, c)`
(three constants or more) by building a temporary table of them each time a statement runs,
which was once more than half of an enqueue's INSERT. A check must be written so that the
statements compile to as many temporary tables as they do with no checks at all.

The listing of runs (`runs`, `runs_after`) and the operator's search (`search_runs`, by
metadata and time) read the table in their own order and are the exceptions: they stop at
their page size.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tenure.store.sqlite import Q, SQLiteStore

SCANS_BY_DESIGN = {"runs", "runs_after", "search_runs"}
RUN_TABLES = ("tenure_runs", "tenure_events")


def _plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {name: None for name in re.findall(r":(\w+)", sql)}
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    # The function the store gives its connections, through which `settle_one` hands back
    # the settled row's sequence.
    conn.create_function("tenure_settled", 1, lambda sequence: sequence)
    return conn


def _migrated(path: Path) -> sqlite3.Connection:
    store = SQLiteStore(f"sqlite:///{path}")
    store.migrate()
    store.close()
    return _connect(path)


@pytest.fixture
def migrated(tmp_path: Path) -> sqlite3.Connection:
    return _migrated(tmp_path / "tenure.db")


def _without_checks(sql: str) -> str:
    """A CREATE TABLE statement with its CHECK clauses (and comments) taken out."""
    sql = re.sub(r"--[^\n]*", "", sql)
    kept, i = [], 0
    while i < len(sql):
        if not sql.startswith("CHECK", i):
            kept.append(sql[i])
            i += 1
            continue
        i, depth = sql.index("(", i), 0
        while True:  # to the parenthesis that closes the check
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
            if depth == 0:
                break
    commas = re.sub(r",(\s*,)+", ",", "".join(kept))
    return re.sub(r",\s*\)\s*$", ")", commas)


@pytest.fixture
def unchecked(tmp_path: Path) -> sqlite3.Connection:
    """The same schema with every table's checks removed (behind SQLite's back)."""
    conn = _migrated(tmp_path / "unchecked.db")
    tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    for name, sql in tables:
        if sql is not None and "CHECK" in sql:
            stripped = _without_checks(sql)
            assert "CHECK" not in stripped
            conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (stripped, name))
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")
    conn.commit()
    conn.close()
    return _connect(tmp_path / "unchecked.db")


def _temporary_tables(conn: sqlite3.Connection, sql: str) -> int:
    params = {name: None for name in re.findall(r":(\w+)", sql)}
    return sum(row[1] == "OpenEphemeral" for row in conn.execute("EXPLAIN " + sql, params))


@pytest.mark.parametrize("name", sorted(n for n in Q if n not in SCANS_BY_DESIGN))
def test_a_query_reads_the_run_tables_through_an_index(
    migrated: sqlite3.Connection, name: str
) -> None:
    plan = _plan(migrated, Q[name])
    scans = [step for step in plan if step.startswith(tuple(f"SCAN {t}" for t in RUN_TABLES))]
    covering = [step for step in scans if "COVERING INDEX" in step or "USING INDEX" in step]
    assert scans == covering, f"{name} scans a run table: {plan}"


def test_the_claim_reads_the_queued_runs_in_its_own_order(migrated: sqlite3.Connection) -> None:
    """Highest priority first, then the oldest (SPEC §22), straight from the index: no
    sort of the backlog at each claim."""
    for name in ("claim",):
        plan = _plan(migrated, Q[name])
        assert any("tenure_runs_claim_order" in step for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan


def test_the_counts_and_the_reaper_read_the_listing_index_without_queued_runs(
    migrated: sqlite3.Connection,
) -> None:
    for name in ("run_counts", "stale_runs", "held_by"):
        assert any("tenure_runs_listing_dequeued" in step for step in _plan(migrated, Q[name]))
    queued = migrated.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'tenure_runs_listing_dequeued'"
    ).fetchone()[0]
    assert "WHERE status <> 'queued'" in queued


def test_no_query_builds_a_table_to_test_a_check(
    migrated: sqlite3.Connection, unchecked: sqlite3.Connection
) -> None:
    runs = "SELECT sql FROM sqlite_master WHERE name = 'tenure_runs'"
    assert "CHECK" in migrated.execute(runs).fetchone()[0]
    extra = {
        name: _temporary_tables(migrated, sql) - _temporary_tables(unchecked, sql)
        for name, sql in Q.items()
    }
    assert {name: n for name, n in extra.items() if n} == {}
    assert _temporary_tables(migrated, Q["enqueue"]) == 0
