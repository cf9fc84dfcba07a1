"""The built-in demo app: a Runtime with a scripted model and three tools, one per effect.

The two write tools keep their data in the run database's SQLite file, through their own
sqlite3 connection, the way user code would write to its own tables: `demo_orders` (an
upsert keyed by order, so repeating it changes nothing) and `demo_ledger` (a plain append,
so repeating it would show as a second row — which is what the demo's audit looks for).
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from typing import Any
from urllib.parse import unquote

from tenure import Probe, Runtime, ToolContext, ToolEffect, providers

# Write tools declare a short timeout: the fence's lease covers it, so a worker killed
# during a write is reaped soon enough for the demo to finish.
WRITE_TIMEOUT = 5.0
BUSY_TIMEOUT_MS = 10_000

LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS demo_ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    customer_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    written_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_orders (
    order_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

app = Runtime()
app.add_model("default", providers.Scripted())

_local = threading.local()


def sqlite_path(database_url: str) -> str:
    """The file of a `sqlite:///relative.db` or `sqlite:////abs.db` URL."""
    prefix = "sqlite:///"
    if not database_url.startswith(prefix) or len(database_url) == len(prefix):
        raise ValueError(f"not a SQLite URL: {database_url!r} (expected sqlite:///FILE)")
    return unquote(database_url[len(prefix) :].partition("?")[0])


def connect(database_url: str) -> sqlite3.Connection:
    """A connection of this thread to the demo tables (created on first use)."""
    path = sqlite_path(database_url)
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is not None and getattr(_local, "path", None) == path:
        return conn
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.executescript(LEDGER_SCHEMA)
    _local.conn, _local.path = conn, path
    return conn


def _database() -> sqlite3.Connection:
    if not app.database_url.startswith("sqlite:"):
        raise RuntimeError("the demo tools keep their tables in a SQLite database")
    return connect(app.database_url)


@app.tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order: its customer, amount and status."""
    seed = zlib.crc32(order_id.encode())
    return {
        "order_id": order_id,
        "customer_id": f"c{seed % 1000:03d}",
        "amount_cents": 500 + seed % 20_000,
        "status": "open",
    }


def set_order_status(ctx: ToolContext, order_id: str, status: str) -> dict[str, Any]:
    """Set an order's status (repeating it leaves the same row)."""
    _database().execute(
        "INSERT INTO demo_orders (order_id, status, idempotency_key, updated_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (order_id) DO UPDATE SET "
        "status = excluded.status, idempotency_key = excluded.idempotency_key, "
        "updated_at = excluded.updated_at",
        (order_id, status, ctx.idempotency_key, time.time()),
    )
    return {"order_id": order_id, "status": status}


def send_invoice(
    ctx: ToolContext, customer_id: str, amount_cents: int, ledger_delay: float = 0.0
) -> dict[str, Any]:
    """Send an invoice: appends one row to the ledger every time it runs. `ledger_delay`:
    seconds the ledger takes to acknowledge a written row (the demo kills a worker then)."""
    cursor = _database().execute(
        "INSERT INTO demo_ledger "
        "(run_id, idempotency_key, fencing_token, customer_id, amount_cents, written_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            ctx.run_id,
            ctx.idempotency_key,
            ctx.fencing_token,
            customer_id,
            amount_cents,
            time.time(),
        ),
    )
    time.sleep(ledger_delay)
    return {"invoice": cursor.lastrowid, "customer_id": customer_id, "amount_cents": amount_cents}


def invoice_sent(
    ctx: ToolContext, customer_id: str, amount_cents: int, ledger_delay: float = 0.0
) -> Probe:
    """The probe of `send_invoice` (SPEC §16): the ledger answers by idempotency key, so an
    invoice interrupted by a crash is resolved by looking, not by a person."""
    row = (
        _database()
        .execute("SELECT id FROM demo_ledger WHERE idempotency_key = ?", (ctx.idempotency_key,))
        .fetchone()
    )
    if row is None:
        return Probe.not_done()
    return Probe.done({"invoice": row[0], "customer_id": customer_id, "amount_cents": amount_cents})


app.tool(set_order_status, effect=ToolEffect.IDEMPOTENT_WRITE, timeout=WRITE_TIMEOUT)
app.tool(
    send_invoice,
    effect=ToolEffect.NON_IDEMPOTENT_WRITE,
    timeout=WRITE_TIMEOUT,
    probe=invoice_sent,
)


def check(name: str, idempotency_key: str) -> int:
    """How many times the demo's tables saw the write with this key (`tenure crashtest`)."""
    table = {"send_invoice": "demo_ledger", "set_order_status": "demo_orders"}.get(name)
    if table is None:
        return 0
    row = (
        _database()
        .execute(f"SELECT COUNT(*) FROM {table} WHERE idempotency_key = ?", (idempotency_key,))
        .fetchone()
    )
    return int(row[0])
