"""Writing to a test database behind tenure's back, to plant a row tenure would never write
(a corrupt payload, a timestamp out of range): the way a bad migration or a hand edit would."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any


def raw_execute(db_url: str, sql: str, *params: Any) -> int:
    """Run one statement (`?` placeholders) on either store; returns the rows it changed."""
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            return conn.execute(sql, params).rowcount
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute(sql.replace("?", "%s"), params).rowcount  # type: ignore[arg-type]


def backdate_update(db_url: str, run_id: str, seconds: float) -> None:
    """Move a run's `updated_at` (when a waiting run began to wait) `seconds` into the past,
    as if it had waited that long: neither store's clock can be moved from a test."""
    if db_url.startswith("sqlite:///"):
        sql = "UPDATE tenure_runs SET updated_at = updated_at - ? WHERE id = ?"
    else:
        sql = (
            "UPDATE tenure_runs SET updated_at = updated_at - make_interval(secs => ?) WHERE id = ?"
        )
    assert raw_execute(db_url, sql, seconds, run_id) == 1
