"""The embedded SQLite store: one file shared by the threads and processes of one machine.

WAL lets readers run beside the one writer; every write is a `BEGIN IMMEDIATE` transaction,
so it holds the writer lock from its first statement and the compare-and-set inside it can
neither interleave with another writer nor fail late with a busy upgrade.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, unquote

from tenure._errors import DatabaseGone, DatabaseUnavailable, StoreError
from tenure._json import dumps
from tenure.store import _sql
from tenure.store._base import Lease, Settlement
from tenure.store._common import Cursor, SQLStore
from tenure.store._rows import epoch_to_datetime
from tenure.store._sqlbase import in_powers_of_two, numbered, numbered_nulls, repeated_row

T = TypeVar("T")

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
BUSY_TIMEOUT_MS = 5_000
# After SQLite's own busy wait, a transaction is retried this many times before giving up.
LOCKED_RETRIES = 6
# WAL pages between automatic checkpoints (SQLite's default is 1,000). A checkpoint syncs
# the database file; a run's commits rewrite the same few pages, so a longer interval copies
# and syncs far less per commit. Durability is unchanged: it is the WAL's, per commit.
WAL_AUTOCHECKPOINT_PAGES = 10_000
# How often the write path makes sure the database file is still the one it opened.
FILE_CHECK_SECONDS = 1.0
# The most events written by one statement (`insert_events`, 7 values each): under 999
# parameters, the most a SQLite before 3.32 binds.
EVENTS_PER_INSERT = 128
# The enqueue's parameters that are None for most runs (no idempotency key, no concurrency
# key, no parent): written in its statement as NULL when they are (`numbered_nulls`).
ENQUEUE_NULLABLE = ("idempotency_key", "concurrency_key", "parent_id", "root_id")
# The values of one row of `insert_events`, in the order the statement names them.
EVENT_VALUES = ("run_id", "sequence", "attempt", "lease_token", "kind", "payload", "replay")
Q = _sql.queries("sqlite", now=NOW)
assert repeated_row(Q["insert_events"], 1)[1] == EVENT_VALUES
log = logging.getLogger("tenure.store.sqlite")


def parse_url(url: str) -> tuple[str, float, int]:
    """`sqlite:///relative.db` or `sqlite:////abs/path.db` (the SQLAlchemy convention), with
    optional `?busy_timeout=SECONDS&locked_retries=N`. Returns (path, busy timeout, retries).
    """
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise ValueError(
            f"not a SQLite URL: {url!r} (expected sqlite:///relative.db or sqlite:////abs.db)"
        )
    rest, _, query = url[len(prefix) :].partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - {"busy_timeout", "locked_retries"}
    if unknown:
        raise ValueError(f"unknown SQLite URL options: {', '.join(sorted(unknown))}")
    try:
        busy = float(options.get("busy_timeout", BUSY_TIMEOUT_MS / 1000))
        retries = int(options.get("locked_retries", LOCKED_RETRIES))
    except ValueError:
        raise ValueError(f"bad SQLite URL options in {url!r}") from None
    if busy < 0 or retries < 0:
        raise ValueError(f"SQLite URL options must not be negative in {url!r}")
    path = unquote(rest)
    if path in (":memory:", "") or path.startswith("file:"):
        raise ValueError("an in-memory SQLite database cannot be shared by workers; name a file")
    return path, busy, retries


class SQLiteStore(SQLStore):
    _q = Q

    def __init__(self, url: str) -> None:
        self.url = url
        self.path, self.busy_timeout, self.locked_retries = parse_url(url)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # The threads of one process take turns at writing here, before BEGIN IMMEDIATE: a
        # thread that finds SQLite's writer lock taken sleeps in its busy handler (1, 2, 5,
        # 10 ms ...) even when the holder commits microseconds later; a thread waiting on
        # this lock wakes as soon as it is free. Other processes still meet SQLite's lock.
        self._writer = threading.Lock()
        # Every write goes through one connection, guarded by `_writer`: writes take turns
        # anyway, and a connection per writing thread (each worker slot commits on its own)
        # read the schema and prepared every statement again, once per thread. Reads keep a
        # connection per thread (they run beside a write; a read on the writer's connection
        # would see the open transaction).
        self._writer_conn: sqlite3.Connection | None = None
        self._closed = False
        # (st_dev, st_ino) of the file first opened: a connection to an unlinked file goes
        # on writing into it without an error, so the write path compares it with the path.
        self._file: tuple[int, int] | None = None
        self._file_checked = 0.0
        self._gone: str | None = None
        # After a write failed for want of space the WAL is truncated by the next write that
        # can, else it keeps the size it grew to during the episode.
        self._wal_to_truncate = False
        # The last sequence of the run the last `settle_one` settled (`_note_settled`).
        self._settled = -1

    # -- connections ---------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._file is not None and self._identity() != self._file:
            self._mark_gone()  # connecting would open (or create) some other file
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise DatabaseUnavailable(
                f"cannot open database {self.path!r}: directory {directory!r} does not exist"
            )
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            conn.execute("PRAGMA foreign_keys = ON")
            # A run that ends cancels its children by a trigger, whose updates must fire it
            # again for their own children (SPEC §21).
            conn.execute("PRAGMA recursive_triggers = ON")
            # A settle hands its row's new last sequence back through this (settle_one).
            conn.create_function("tenure_settled", 1, self._note_settled)
        except sqlite3.Error as exc:
            raise DatabaseUnavailable(f"cannot open database {self.path!r}: {exc}") from exc
        if str(mode).lower() != "wal":
            conn.close()
            raise DatabaseUnavailable(f"cannot use WAL on {self.path!r} (got {mode!r})")
        with self._lock:
            self._all.append(conn)
            if self._file is None:
                self._file = self._identity()
        return conn

    def _identity(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return None
        return found.st_dev, found.st_ino

    def _check_file(self) -> None:
        """Refuse to write once the file at our path is not the one we opened (at most one
        `stat` per FILE_CHECK_SECONDS)."""
        if self._gone is None:
            now = time.monotonic()
            if now - self._file_checked < FILE_CHECK_SECONDS:
                return
            self._file_checked = now
            if self._file is None or self._identity() == self._file:
                return
        self._mark_gone()

    def _mark_gone(self) -> NoReturn:
        if self._gone is None:
            self._gone = f"database file {self.path!r} was deleted or replaced while open"
        raise DatabaseGone(self._gone)

    def _truncate_wal(self, conn: sqlite3.Connection) -> None:
        """Best effort, after a disk-full episode: give the WAL's space back."""
        try:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error as exc:
            log.debug("WAL truncation after a full disk failed: %s", exc)
            return
        if not busy:
            self._wal_to_truncate = False
            log.warning("database %r: the WAL was truncated after the disk filled", self.path)

    @property
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError("the store is closed")
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _write_conn(self) -> sqlite3.Connection:
        """The writers' connection; called with `_writer` held."""
        conn = self._writer_conn
        if conn is None:
            if self._closed:
                raise StoreError("the store is closed")
            conn = self._connect()
            self._writer_conn = conn
        return conn

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._writer_conn = None
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    # -- transactions --------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], T]) -> T:
        delay = 0.05
        for attempt in range(self.locked_retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                message = str(exc).lower()
                if "locked" not in message and "busy" not in message:
                    if exc.sqlite_errorcode == sqlite3.SQLITE_FULL:
                        self._wal_to_truncate = True
                    raise DatabaseUnavailable(f"database {self.path!r}: {exc}") from exc
                if attempt == self.locked_retries:
                    raise DatabaseUnavailable(
                        f"database {self.path!r} stayed locked after {self.locked_retries} retries"
                    ) from exc
                log.warning(
                    "database %r is locked; retrying the transaction (%d of %d)",
                    self.path,
                    attempt + 1,
                    self.locked_retries,
                )
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except sqlite3.DatabaseError as exc:
                raise DatabaseUnavailable(f"database {self.path!r}: {exc}") from exc
        raise AssertionError("unreachable")

    def _write(self, fn: Callable[[Cursor], T]) -> T:
        """Run `fn` in one BEGIN IMMEDIATE transaction (retried whole while locked)."""

        def once() -> T:
            with self._writer:
                conn = self._write_conn()
                self._check_file()
                if self._wal_to_truncate:
                    self._truncate_wal(conn)
                # BEGIN and COMMIT on the transaction's own cursor: `conn.execute` makes a
                # cursor for each (~1,400 instructions apiece, at every write).
                cur = conn.cursor()
                cur.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(cur)
                    cur.execute("COMMIT")
                except sqlite3.IntegrityError as exc:
                    self._rollback(conn)
                    raise StoreError(f"database {self.path!r} refused the write: {exc}") from exc
                except BaseException:
                    # Also when COMMIT itself failed (a full disk, an I/O error): a
                    # transaction left open would refuse every later BEGIN on this thread.
                    self._rollback(conn)
                    raise
            return result

        return self._retrying(once)

    def _rollback(self, conn: sqlite3.Connection) -> None:
        # Some errors (SQLITE_FULL among them) may have rolled the transaction back already.
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if conn.in_transaction:  # stuck in it: the next write starts over on a new connection
            if conn is self._writer_conn:
                self._writer_conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _insert_runs(self, cur: Cursor, params: list[dict[str, Any]]) -> list[bool]:
        """The `enqueue` statement for each run, its values bound by position and those of
        `ENQUEUE_NULLABLE` that are None written in it as NULL: by name, sqlite3 makes and
        looks up a string per name, and it looks for an adapter for each None it binds.
        Whether each inserted its row, by the statement's count (no RETURNING: SQLite
        builds a result table for it). No row: the key is taken. A child that was inserted
        marks its parent (`mark_parent`; no trigger does, 0026)."""
        out = []
        enqueue = self._q["enqueue"]
        for p in params:
            nulls = tuple([name for name in ENQUEUE_NULLABLE if p[name] is None])
            sql, values = numbered_nulls(enqueue, nulls)
            cur.execute(sql, values(p))
            inserted = cur.rowcount != 0
            if inserted and p["parent_id"] is not None:
                cur.execute(numbered(self._q["mark_parent"])[0], (p["parent_id"],))
            out.append(inserted)
        return out

    def _insert_events(self, cur: Cursor, rows: list[dict[str, Any]]) -> None:
        """The rows `_event_rows` made, a power of two of them per statement. An event
        without a replay form goes with '' for it, which the statement stores as NULL:
        sqlite3 binds None only after looking for an adapter for it, at every binding."""
        for chunk in in_powers_of_two(rows, EVENTS_PER_INSERT):
            sql, _ = repeated_row(self._q["insert_events"], len(chunk))
            values: list[Any] = []
            for row in chunk:
                values += (
                    row["run_id"],
                    row["sequence"],
                    row["attempt"],
                    row["lease_token"],
                    row["kind"],
                    row["payload"],
                    row["replay"] or "",
                )
            cur.execute(sql, values)
        # The deltas of an answered call go with its `llm` event (SPEC §18; 0025). One
        # look at the table first: it is empty unless some call is streaming.
        answered = [(row["run_id"],) for row in rows if row["kind"] == "llm"]
        if answered and cur.execute(self._q["any_deltas"]).fetchone() is not None:
            cur.executemany(numbered(self._q["delete_answered_deltas"])[0], answered)

    def _settle_one(self, cur: Cursor, params: dict[str, Any]) -> list[Any]:
        """One run's settle, its values bound; what a parameter cannot hold as it stands (a
        cost that is not a finite number, text that is not UTF-8, an integer beyond 64 bits)
        goes as a batch of one, whose JSON stores it as `_json.dumps` writes it, as every
        batch did."""
        if math.isfinite(params["cost"]):
            settle, values = numbered(self._q["settle_one"])
            self._settled = -1  # a sequence noted by an earlier settle is never taken
            try:
                cur.execute(settle, values(params))
            except (UnicodeEncodeError, OverflowError):  # refused at binding: nothing ran
                pass
            else:
                # The rows the UPDATE itself changed (not its triggers'): 1 if the guard
                # held, and then `tenure_settled` was given the row's new last sequence.
                if cur.rowcount != 1:
                    return []
                if self._settled < 0:
                    raise StoreError("settle_one applied without handing back its sequence")
                return [(params["id"], params["token"], self._settled)]
        cur.execute(self._q["settle_batch"], {"batch": dumps([params])})
        return cur.fetchall()

    def _note_settled(self, sequence: int) -> int:
        """`tenure_settled(x)` in SQL: x, noted for the settle that computed it. Writes take
        turns on one connection (`_writer`), so the note is read by the writer that made it,
        right after its statement."""
        self._settled = sequence
        return sequence

    def _settle_params(self, lease: Lease, settlement: Settlement) -> dict[str, Any]:
        params = super()._settle_params(lease, settlement)
        # sqlite3 binds an int as it stands but looks for an adapter for a bool (not an
        # exact int) at every binding; SQLite stores a bool as 0 or 1 anyway.
        params["keep"] = int(params["keep"])
        params["keep_fence"] = int(params["keep_fence"])
        return params

    def _read(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return self._retrying(lambda: self._conn.execute(sql, params).fetchall())

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> None:
        def apply(cur: Cursor) -> None:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS tenure_schema_version "
                "(version INTEGER NOT NULL, applied_at REAL NOT NULL)"
            )
            current = cur.execute(
                "SELECT COALESCE(MAX(version), 0) FROM tenure_schema_version"
            ).fetchone()[0]
            _sql.refuse_newer(current, "sqlite")
            for version, script in _sql.migrations("sqlite"):
                if version <= current:
                    continue
                for statement in _statements(script):
                    cur.execute(statement)
                cur.execute(f"INSERT INTO tenure_schema_version VALUES (?, {NOW})", (version,))

        self._write(apply)

    def schema_version(self) -> int:
        rows = self._read("SELECT COALESCE(MAX(version), 0) FROM tenure_schema_version", {})
        return int(rows[0][0])

    def _time(self, value: Any) -> datetime | None:
        return epoch_to_datetime(value)

    def _time_param(self, value: datetime) -> Any:
        return value.timestamp()

    def _queues_param(self, queues: Sequence[str] | None) -> Any:
        return json.dumps(list(queues)) if queues else None


def _statements(script: str) -> Iterator[str]:
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement, buffer = buffer.strip(), ""
            if not _only_comments(statement):
                yield statement
    if not _only_comments(buffer):
        raise StoreError("migration script ends inside a statement")


def _only_comments(text: str) -> bool:
    """Whether `text` holds nothing but blank lines and `--` comments."""
    return all(not ln.strip() or ln.strip().startswith("--") for ln in text.splitlines())
