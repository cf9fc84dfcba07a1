"""PostgreSQL connections: URLs and their defaults, which errors can heal by waiting, how
timestamps are loaded, and the dialect's named queries. No store logic."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg.abc import AdaptContext

from tenure._errors import InvalidRequest
from tenure.store import _sql

# The database's clock, read at each use (not the transaction's start), and the named
# queries of this dialect with it.
NOW = "clock_timestamp()"
Q = _sql.queries("postgres", now=NOW)

URL_PREFIXES = ("postgresql://", "postgres://", "postgresql+psycopg://")
APPLICATION_NAME = "tenure"
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


def one_line(exc: BaseException) -> str:
    """libpq's message (one line per address it tried) as one line, without repeats."""
    parts: list[str] = []
    for line in str(exc).splitlines():
        line = " ".join(line.split())
        if line and line not in parts:
            parts.append(line)
    return "; ".join(parts)


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
