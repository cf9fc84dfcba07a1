"""Helpers for the benchmarks in `bench/`: fill a table fast, count transactions, probe the
machine's commit rate. Their SQL is in `store/sql/<dialect>/bench.sql`; the runtime never
calls them.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from functools import cache
from importlib import resources
from typing import Any

from tenure.store import sqlite as _sqlite
from tenure.store._common import Cursor, SQLStore

SEED_CHUNK = 100_000
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def _queries(dialect: str, now: str) -> dict[str, str]:
    path = resources.files("tenure.store").joinpath("sql", dialect, "bench.sql")
    parts = _NAME.split(path.read_text(encoding="utf-8"))
    found = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        found[name] = "\n".join(lines).strip().rstrip(";").replace("{now}", now)
    return found


def _dialect(store: Any) -> tuple[str, dict[str, str]]:
    if isinstance(store, _sqlite.SQLiteStore):
        return "sqlite", _queries("sqlite", _sqlite.NOW)
    from tenure.store import _pg_conn

    return "postgres", _queries("postgres", _pg_conn.NOW)


def seed_finished(store: SQLStore, n: int) -> None:
    """Insert `n` completed runs, each with the four events of a one-step run."""
    _, q = _dialect(store)
    left = n
    while left > 0:
        chunk = min(left, SEED_CHUNK)

        def tx(cur: Cursor, chunk: int = chunk) -> None:
            cur.execute(q["seed_cache"], {})
            cur.execute(q["seed_finished_runs"], {"n": chunk})
            cur.execute(q["seed_finished_events"], {})
            cur.execute(q["unmark_seeded"], {})

        store._write(tx)
        left -= chunk


def quiesce(store: SQLStore) -> None:
    """After a bulk fill, catch up on the maintenance a database does in the background."""
    dialect, q = _dialect(store)
    conn = (_sqlite_connect(store) if dialect == "sqlite" else _postgres_connect(store))()
    try:
        conn.execute(q["quiesce"])
        if dialect == "postgres":
            conn.execute(q["checkpoint"])
    finally:
        conn.close()


def transactions(store: SQLStore) -> int:
    """PostgreSQL's count of committed transactions in this database; -1 on SQLite."""
    _, q = _dialect(store)
    return int(store._read(q["transactions"], {})[0][0])


def commit_rate(store: SQLStore, seconds: float, clients: int) -> float:
    """One-statement UPDATE commits per second, `clients` connections at once, each with
    the store's own connection settings and nothing of tenure's code in the loop."""
    dialect, q = _dialect(store)
    connect = _sqlite_connect(store) if dialect == "sqlite" else _postgres_connect(store)
    setup = connect()
    setup.execute(q["probe_table"])
    for i in range(clients):
        setup.execute(q["probe_row"], {"id": i})
    setup.close()
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(i: int) -> None:
        conn = connect()
        start.wait()
        while not stop.is_set():
            if dialect == "sqlite":
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(q["probe_update"], {"id": i})
                conn.execute("COMMIT")
            else:
                conn.execute(q["probe_update"], {"id": i})  # autocommit: one transaction
            counts[i] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - began)


def _sqlite_connect(store: Any) -> Any:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(store.path, timeout=60, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    return connect


def _postgres_connect(store: Any) -> Any:
    import psycopg

    def connect() -> Any:
        return psycopg.connect(store.conninfo, autocommit=True)

    return connect
