"""PostgreSQL LISTEN: one thread per store that listens while anyone is subscribed, on a
connection of its own, and wakes its subscribers on every notification."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo

from tenure.store._pg_conn import (
    LISTEN_HEALTH_SECONDS,
    LISTEN_KEEPALIVES,
    LISTEN_RECONNECT_MAX_DELAY,
    RETRY_FIRST_DELAY,
    Q,
    Reachability,
    one_line,
)

log = logging.getLogger("tenure.store.postgres")


class Listening:
    """One listener thread's life: its stop signal (an Event, and a socket to interrupt
    `select`) and whether its LISTEN is in place."""

    def __init__(self, run: Callable[[Listening], None]) -> None:
        self.stop = threading.Event()
        self.listening = threading.Event()
        self.stop_r, self.stop_w = socket.socketpair()
        self.thread = threading.Thread(target=run, args=(self,), name="tenure-listen", daemon=True)

    def end(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.stop_w.send(b"x")
        self.thread.join()
        self.stop_r.close()
        self.stop_w.close()


class Listener:
    """One thread per store that LISTENs while anyone is subscribed."""

    def __init__(self, conninfo: str, reachability: Reachability) -> None:
        self.conninfo = pg_conninfo.make_conninfo(conninfo, **LISTEN_KEEPALIVES)
        self._reachability = reachability
        self._wakes: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._current: Listening | None = None

    @property
    def listening(self) -> threading.Event:
        current = self._current
        return current.listening if current else threading.Event()

    def add(self, wake: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            key = next(self._keys)
            self._wakes[key] = wake
            if self._current is None:
                self._current = Listening(self._run)
                self._current.thread.start()

        def remove() -> None:
            # Checked and taken under one lock: a subscriber arriving meanwhile either keeps
            # this thread or starts its own.
            with self._lock:
                self._wakes.pop(key, None)
                ending = None if self._wakes else self._current
                if ending is not None:
                    self._current = None
            if ending is not None:
                ending.end()

        return remove

    def close(self) -> None:
        with self._lock:
            ending, self._current = self._current, None
        if ending is not None:
            ending.end()

    def _fire(self) -> None:
        with self._lock:
            wakes = list(self._wakes.values())
        for wake in wakes:
            try:
                wake()
            except Exception:
                log.exception("a wake callback failed")

    def _run(self, life: Listening) -> None:
        delay = RETRY_FIRST_DELAY
        first = True
        while not life.stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute(Q["listen"])
                    life.listening.set()
                    delay = RETRY_FIRST_DELAY
                    if not first:
                        self._fire()
                    first = False
                    self._pump(conn, life.stop_r)
            except psycopg.Error as exc:
                if life.stop.is_set():
                    break
                # Told once per outage; that it is over, the store's next operation tells (a
                # listener back while the pool still waits to reconnect would say it too soon).
                self._reachability.lost(functools.partial(one_line, exc))
                log.debug("listener connection lost (%s); reconnecting in %.2fs", exc, delay)
            finally:
                life.listening.clear()
            life.stop.wait(delay)
            delay = min(delay * 2, LISTEN_RECONNECT_MAX_DELAY)

    def _pump(self, conn: psycopg.Connection[Any], stop_r: socket.socket) -> None:
        stop_fd = stop_r.fileno()
        while True:
            # timeout=0 hands over what has arrived (or was buffered by the health check).
            if any(True for _ in conn.notifies(timeout=0)):
                self._fire()
            readable, _, _ = select.select([conn.fileno(), stop_fd], [], [], LISTEN_HEALTH_SECONDS)
            if stop_fd in readable:
                return
            if not readable:
                conn.execute(Q["now"])  # raises if the connection died silently
