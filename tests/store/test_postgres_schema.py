"""The two dialects describe one schema: the same migrations, columns and named queries."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from tenure.store import _sql
from tenure.store.sqlite import SQLiteStore

TABLES = ("tenure_runs", "tenure_events", "tenure_workers")


def test_both_dialects_have_the_same_migration_versions() -> None:
    assert [v for v, _ in _sql.migrations("postgres")] == [v for v, _ in _sql.migrations("sqlite")]


# SQLite's own statements, with why PostgreSQL has none: each is checked against the
# statement it stands beside (tests/unit/test_guards.py).
SQLITE_ONLY = {
    # A settle batch's runs one statement each, their values bound: SQLite's json_each
    # rendered each run's object anew for every value read; PostgreSQL's settle_batch reads
    # its batch once.
    "settle_one",
    # A run's first delta publication marks it `streamed` (schema 24), so that its status
    # changes run the one status trigger that clears its deltas: SQLite sets up a trigger's
    # program whatever its WHEN; PostgreSQL tests a WHEN before it calls anything.
    "mark_streamed",
    # A child's insert marks its parent (`has_children`, schema 26): SQLite sets up an AFTER
    # INSERT trigger's program at every insert, whatever its WHEN, so the store runs the
    # statement itself; PostgreSQL's trigger tests its WHEN (a parent) before anything.
    "mark_parent",
    # A run's deltas go with its call's `llm` event (schema 25: no trigger on tenure_events,
    # which made SQLite copy every multi-row insert of events through a temporary table),
    # after a look at whether the table holds any: PostgreSQL keeps no deltas in a table.
    "any_deltas",
    "delete_answered_deltas",
}
# SQLite's own columns, with why PostgreSQL has none.
SQLITE_ONLY_COLUMNS = {
    "tenure_runs": {"streamed"},  # set by `mark_streamed`, above
}


def test_every_sqlite_query_has_a_postgres_twin() -> None:
    missing = set(_sql.queries("sqlite")) - set(_sql.queries("postgres")) - SQLITE_ONLY
    assert not missing, f"queries with no PostgreSQL version: {sorted(missing)}"


def test_migrated_tables_have_the_same_columns(pg_url: str, tmp_path: Path) -> None:
    lite = SQLiteStore(f"sqlite:///{tmp_path / 'schema.db'}")
    lite.migrate()
    lite.close()
    with sqlite3.connect(tmp_path / "schema.db") as conn:
        sqlite_columns = {
            table: sorted(
                row[1]
                for row in conn.execute(f"PRAGMA table_info({table})")
                if row[1] not in SQLITE_ONLY_COLUMNS.get(table, set())
            )
            for table in TABLES
        }
    conn.close()
    with psycopg.connect(pg_url) as pg:
        pg_columns = {
            table: sorted(
                row[0]
                for row in pg.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s",
                    (table,),
                )
            )
            for table in TABLES
        }
    assert pg_columns == sqlite_columns
