"""The one event loop, on one private thread, that every MCP session of a process runs on.

The `mcp` SDK is asynchronous and tenure's tools are synchronous: a tool submits its
coroutine here with `asyncio.run_coroutine_threadsafe` and waits for the result with the
tool's timeout. One loop for all sessions and calls (not a loop per call) keeps a session's
streams and background tasks on the loop that opened them, which anyio requires.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_current: _LoopThread | None = None
_on_exit: list[Callable[[], None]] = []


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="tenure-mcp", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run a coroutine on the MCP loop thread, started on first use (and again in a child
    process, where the parent's thread does not exist)."""
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            if _current is None:
                atexit.register(_shutdown)
            _current = _LoopThread()
        loop = _current
    return loop.submit(coro)


def on_exit(close: Callable[[], None]) -> None:
    """Call `close` at interpreter exit, before the loop stops (sessions end cleanly, and a
    stdio server is not left waiting for a parent that is gone)."""
    with _lock:
        _on_exit.append(close)


def forget(close: Callable[[], None]) -> None:
    with _lock:
        if close in _on_exit:
            _on_exit.remove(close)


def _shutdown() -> None:
    global _current
    with _lock:
        closers = list(_on_exit)
        _on_exit.clear()
    for close in closers:
        with contextlib.suppress(Exception):  # exiting: nothing left to report to
            close()
    with _lock:
        loop, _current = _current, None
    if loop is not None and loop.pid == os.getpid():
        loop.stop()
