"""PostgreSQL connections: URLs and their defaults, which errors can heal by waiting, how
an outage is told in the log, how timestamps are loaded, and the dialect's named queries. No
store logic."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg.abc import AdaptContext
from psycopg_pool import PoolTimeout

from tenure._errors import InvalidRequest
from tenure.store import _sql

# The database's clock, read at each use (not the transaction's start), and the named
# queries of this dialect with it.
NOW = "clock_timestamp()"
Q = _sql.queries("postgres", now=NOW)

URL_PREFIXES = ("postgresql://", "postgres://", "postgresql+psycopg://")
APPLICATION_NAME = "tenure"
# The name of every tenure connection pool: psycopg_pool's log lines about it carry it.
POOL_NAME = "tenure"
CONNECT_TIMEOUT_SECONDS = 5
DEFAULT_POOL_MIN_SIZE = 1
DEFAULT_POOL_MAX_SIZE = 10
# How long one operation keeps retrying transient failures before DatabaseUnavailable. Long
# enough to ride out a server restart; the pool's own reconnect backoff is part of it.
DEFAULT_RETRY_SECONDS = 30.0
RETRY_FIRST_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
# Longest wait for a pooled connection in one attempt (the pool may be reconnecting).
CHECKOUT_TIMEOUT_SECONDS = 5.0
# The pool doubles the wait between its attempts to replace a lost connection (1 s, 2 s, 4 s
# ...) for as long as this; then it gives the slot up, and the next checkout that finds no
# connection starts again from 1 s. Without a bound a server back after a minute's outage
# would wait about as long again for the pool's next attempt.
POOL_RECONNECT_SECONDS = 4.0
# An idle listener proves its connection alive this often (a silent network loss would
# otherwise leave it waiting forever on a dead socket).
LISTEN_HEALTH_SECONDS = 30.0
LISTEN_RECONNECT_MAX_DELAY = 5.0
# TCP keepalives for the long-lived listener connection.
LISTEN_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10}
# A publication of deltas is tried once, this long at most: a late delta is worth nothing.
PUBLISH_TIMEOUT_SECONDS = 1.0


def conninfo_from_url(url: str) -> str:
    """A libpq connection string from a `postgresql://` / `postgres://` URL, with defaults.

    `postgresql+psycopg://` (the SQLAlchemy spelling) is accepted too. Parameters in the URL
    win over tenure's defaults (`application_name`, `connect_timeout`).
    """
    if not url.startswith(URL_PREFIXES):
        raise InvalidRequest(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
    if url.startswith("postgresql+psycopg://"):
        url = "postgresql://" + url[len("postgresql+psycopg://") :]
    try:
        given = pg_conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidRequest(f"malformed PostgreSQL URL {url!r}: {exc}") from None
    defaults: dict[str, Any] = {
        "application_name": APPLICATION_NAME,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    }
    return pg_conninfo.make_conninfo(url, **{k: v for k, v in defaults.items() if k not in given})


# Errors that waiting does not heal: a database that does not exist, credentials the server
# refuses, a host name nobody can resolve. They fail at once instead of using up the retry
# window (and filling the log) on something only a person can fix.
_PERMANENT_ERRORS = (
    psycopg.errors.InvalidCatalogName,
    psycopg.errors.InvalidPassword,
    psycopg.errors.InvalidAuthorizationSpecification,
)
# A connection attempt fails before any SQLSTATE exists: libpq's words are all there is.
_PERMANENT_MESSAGES = (
    "does not exist",
    "password authentication failed",
    "could not translate host name",
    "failed to resolve host",  # psycopg resolves names itself before libpq does
    "no password supplied",
)


def is_permanent(exc: BaseException) -> bool:
    """Whether a connection or statement error cannot heal by waiting and retrying."""
    if isinstance(exc, _PERMANENT_ERRORS):
        return True
    if not isinstance(exc, psycopg.OperationalError) or exc.sqlstate is not None:
        return False
    message = str(exc)
    return any(words in message for words in _PERMANENT_MESSAGES)


def is_unreachable(exc: BaseException) -> bool:
    """Whether a transient failure says that the server cannot be reached (a connection that
    failed, was lost or was shut down, a pool with none to give), rather than that a
    transaction lost a race (a deadlock, a serialization failure) on a server that answers."""
    if isinstance(exc, PoolTimeout):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "57P"))


def one_line(exc: BaseException) -> str:
    """libpq's message (one line per address it tried) as one line, without repeats."""
    parts: list[str] = []
    for line in str(exc).splitlines():
        line = " ".join(line.split())
        if line and line not in parts:
            parts.append(line)
    return "; ".join(parts)


log = logging.getLogger("tenure.store.postgres")


class Reachability:
    """Whether the server answers, told in the log once per change: one line when it stops
    answering, one when it answers again. The attempts in between (a worker retries for as
    long as an outage lasts) are logged at DEBUG only.

    Both lines are warnings so that a log which shows an outage also shows its end."""

    def __init__(self, where: Callable[[], str]) -> None:
        self._where = where
        self._lock = threading.Lock()
        self._down_since: float | None = None

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def lost(self, reason: Callable[[], str]) -> None:
        """An attempt failed for want of the server (`reason` is asked only if it is news)."""
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        log.warning("%s unreachable (%s); retrying until it answers", self._where(), reason())

    def answered(self, asked_at: float) -> None:
        """An attempt begun at `asked_at` (monotonic) succeeded. One begun before the loss was
        noticed proves nothing: it may have been answered just before the server went."""
        if self._down_since is None:  # every operation comes here: no lock when all is well
            return
        with self._lock:
            since = self._down_since
            if since is None or asked_at <= since:
                return
            self._down_since = None
        log.warning("%s reachable again after %.1fs", self._where(), time.monotonic() - since)


class QuietPool(logging.Filter):
    """psycopg_pool logs each failed attempt of its background reconnects, and each dead
    connection it drops, as a warning of its own (two lines each, every second or so while a
    server is down). For tenure's pools `Reachability` says it once per outage instead; these
    go to tenure's log at DEBUG. Other pools in the process keep their lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _about_our_pool(record):
            return True
        log.debug("pool: %s", record.getMessage())
        return False


# psycopg_pool's lines about reaching the server; any other of its warnings stays one.
_POOL_CONNECTIVITY_LINES = (
    "error connecting in",
    "reconnection attempt in pool",
    "discarding broken connection",
    "discarding closed connection",
)


# Set while this thread checks a tenure pool's idle connections (an idle connection does not
# name its pool).
_checking = threading.local()


@contextlib.contextmanager
def checking_our_pool() -> Iterator[None]:
    _checking.active = True
    try:
        yield
    finally:
        _checking.active = False


def _about_our_pool(record: logging.LogRecord) -> bool:
    if not str(record.msg).startswith(_POOL_CONNECTIVITY_LINES):
        return False
    if getattr(_checking, "active", False):
        return True
    args = record.args if isinstance(record.args, tuple) else ()
    for arg in args:
        if arg == POOL_NAME:
            return True
        pool = getattr(arg, "_pool", None)  # a psycopg connection names the pool it is in
        if getattr(pool, "name", None) == POOL_NAME:
            return True
    return False


def quiet_pool_log() -> None:
    """Install `QuietPool` on psycopg_pool's logger, once per process."""
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, QuietPool) for f in pool_log.filters):
        pool_log.addFilter(QuietPool())


class _CommitUnknown(Exception):
    """The connection was lost while COMMIT was in flight."""

    def __init__(self, xid: str | None, result: Any) -> None:
        super().__init__(f"connection lost during COMMIT of transaction {xid}")
        self.xid = xid
        self.result = result


class _TimestampLoader(psycopg.adapt.Loader):
    """psycopg's own timestamptz loader, except that a value Python cannot hold (past year
    9999, `infinity`) comes back as its text instead of failing the whole fetch: the row
    reader then shows that one row as damaged, and the listing goes on."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        fast = psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
        assert fast is not None
        self._fast = fast(oid, context)

    def load(self, data: Any) -> Any:
        try:
            return self._fast.load(data)
        except psycopg.DataError:
            return bytes(data).decode("utf-8", "replace")


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_loader("timestamptz", _TimestampLoader)
