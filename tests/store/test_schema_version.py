"""A database whose schema is newer than this tenure knows is refused, never used (a rolling
upgrade must not let an old worker write a newer schema)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

import tenure
from tenure.store import _sql, open_store


def bump_schema(db_url: str, version: int) -> None:
    """What a newer tenure's migration leaves behind, written with a raw statement."""
    sql = "INSERT INTO tenure_schema_version VALUES ({p}, 0)"
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql.format(p="?"), (version,))
        conn.close()
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql.format(p="%s").replace(", 0)", ", now())"), (version,))


def known(db_url: str) -> int:
    dialect = "sqlite" if db_url.startswith("sqlite") else "postgres"
    return max(v for v, _ in _sql.migrations(dialect))


def test_a_newer_schema_is_refused_with_both_versions_named(db_url: str) -> None:
    rt = tenure.Runtime(db_url)
    run_id = rt.enqueue(tenure.RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]))
    rt.close()
    newer = known(db_url) + 3
    bump_schema(db_url, newer)
    expected = f"database schema is version {newer}; this tenure knows up to {known(db_url)}"
    late = tenure.Runtime(db_url)
    with pytest.raises(tenure.StoreError, match=expected + ": upgrade tenure"):
        late.enqueue(tenure.RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]))
    with pytest.raises(tenure.StoreError, match=expected):
        late.run_queued(run_id)
    late.close()
    store = open_store(db_url)
    try:
        with pytest.raises(tenure.StoreError, match=expected):
            store.migrate()
        assert store.schema_version() == newer, "the refusal changed the schema"
        assert store.run_status(run_id) is tenure.RunStatus.QUEUED, "the run was touched"
    finally:
        store.close()


def test_the_current_schema_migrates_again_without_complaint(db_url: str) -> None:
    store = open_store(db_url)
    try:
        store.migrate()
        store.migrate()
        assert store.schema_version() == known(db_url)
    finally:
        store.close()
