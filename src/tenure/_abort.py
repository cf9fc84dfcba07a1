"""A segment's abort signal: a `threading.Event` whose condition is made on the first wait.

Every segment has one, and most are never waited on (a trivial run asks `is_set` at most):
building an Event's `Condition` was a measurable part of a trivial run's CPU. The flag and
the condition share one lock, so a `set` between a waiter's look at the flag and its wait
cannot be missed.
"""

from __future__ import annotations

import threading


class Abort(threading.Event):
    def __init__(self) -> None:  # no super().__init__(): its Condition is made on demand
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None
        self._flag = False

    def _at_fork_reinit(self) -> None:
        self._lock._at_fork_reinit()  # type: ignore[attr-defined]
        if self._cond is not None:
            self._cond = threading.Condition(self._lock)

    def set(self) -> None:
        with self._lock:
            self._flag = True
            if self._cond is not None:
                self._cond.notify_all()

    def clear(self) -> None:
        with self._lock:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._lock:
            if self._flag:
                return True
            if self._cond is None:
                self._cond = threading.Condition(self._lock)
            return self._cond.wait(timeout)
