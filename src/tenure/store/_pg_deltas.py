"""Deltas over PostgreSQL's NOTIFY/LISTEN (SPEC §18): one channel per run, so that a reader
hears only its run; a reader has a connection of its own that does nothing but LISTEN."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
from typing import Any

import psycopg
from psycopg import sql

from tenure.store import _sql
from tenure.store._deltas import StoredDelta
from tenure.store._pg_conn import Reachability, one_line

log = logging.getLogger("tenure.store.postgres")
Q = _sql.queries("postgres", now="clock_timestamp()")


def channel(run_id: str) -> str:
    """The run's channel: a name of fixed length (an identifier holds at most 63 bytes, a run
    id may be longer), the same in every process."""
    return "tenure_delta_" + hashlib.sha256(run_id.encode()).hexdigest()[:40]


def parse(payload: str) -> StoredDelta | None:
    sequence, chunk, text = [*payload.split("\t", 2), "", ""][:3]
    try:
        return StoredDelta(int(sequence), int(chunk), text)
    except ValueError:
        return None  # not ours: a stranger NOTIFYing on the channel


class NotifyFeed:
    """A run's deltas as they are notified. A lost connection is opened again at the next
    `take`; the deltas sent meanwhile are lost, which a reader survives (the call's `llm`
    event holds its whole text)."""

    def __init__(self, conninfo: str, run_id: str, reachability: Reachability) -> None:
        self._conninfo = conninfo
        self._reachability = reachability
        self._listen = sql.SQL(Q["listen_deltas"]).format(channel=sql.Identifier(channel(run_id)))
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._busy = False
        self._closed = False
        self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._conninfo, autocommit=True)
        conn.execute(self._listen)
        self._conn = conn
        return conn

    def take(self, timeout: float) -> list[StoredDelta]:
        with self._lock:
            if self._closed:
                return []
            self._busy = True
        found: list[StoredDelta] = []
        try:
            conn = self._conn or self._connect()
            for note in conn.notifies(timeout=timeout, stop_after=1):
                found.extend(_parsed(note.payload))
            if found:  # and whatever else has arrived already
                for note in conn.notifies(timeout=0):
                    found.extend(_parsed(note.payload))
        except psycopg.Error as exc:
            # An outage is told once by the store (every follower of a dashboard would
            # otherwise say it at each take).
            self._reachability.lost(functools.partial(one_line, exc))
            log.debug("delta listener connection lost (%s); listening again", exc)
            self._drop()
        finally:
            with self._lock:
                self._busy = False
                closing = self._closed
            if closing:
                self._drop()
        # The pieces of one publication may come out of its join in any order.
        return sorted(found, key=lambda d: (d.sequence, d.chunk))

    def close(self) -> None:
        """Closes the connection now, or, while a `take` is waiting on it in another thread
        (an HTTP stream whose client left), as soon as that `take` returns."""
        with self._lock:
            self._closed = True
            busy = self._busy
        if not busy:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def _parsed(payload: str) -> list[StoredDelta]:
    delta = parse(payload)
    return [] if delta is None else [delta]
