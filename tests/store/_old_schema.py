"""A database of either store at an older schema, for the tests of a migration."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tenure.store import _sql
from tenure.store.postgres import Q as PG


def database_before(
    request: pytest.FixtureRequest, tmp_path: Path, before: int, then: str | None = None
) -> Iterator[str]:
    """An empty database of the store `request.param` names ("sqlite" or "postgres"),
    migrated up to the schema before `before`, then the statements `then` if given (a
    script: statements each ended by a semicolon); its URL.
    A PostgreSQL database is dropped afterwards."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE tenure_schema_version (version INTEGER, applied_at REAL)")
            for version, script in _sql.migrations("sqlite"):
                if version < before:
                    conn.executescript(script)
                    conn.execute("INSERT INTO tenure_schema_version VALUES (?, 0)", (version,))
            if then is not None:
                conn.executescript(then)
        conn.close()
        yield f"sqlite:///{path}"
        return
    cluster = request.getfixturevalue("pg_cluster")
    name = f"tenure_before_{before}_{id(request)}"
    cluster.admin(f"CREATE DATABASE {name}")
    url = cluster.url(name)
    with psycopg.connect(url, autocommit=True) as pg, pg.transaction():
        pg.execute(PG["schema_version_table"])  # type: ignore[arg-type]
        for version, script in _sql.migrations("postgres"):
            if version < before:
                pg.execute(script)  # type: ignore[arg-type]
                pg.execute(PG["record_schema_version"], {"version": version})  # type: ignore[arg-type]
        if then is not None:
            pg.execute(then)  # type: ignore[arg-type]
    yield url
    cluster.admin(f"DROP DATABASE {name} WITH (FORCE)")
