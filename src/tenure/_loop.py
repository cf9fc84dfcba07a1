"""The one event loop of a process, on one private daemon thread.

Async tools, async providers and MCP sessions all run their coroutines here; the engine is
synchronous, so a slot thread submits a coroutine with `asyncio.run_coroutine_threadsafe`
and waits for its result. One loop for everything (not a loop per call) lets a worker at
concurrency 200 keep 200 coroutines waiting on one thread, and keeps an MCP session's
streams and background tasks on the loop that opened them, which anyio requires.

The loop starts on first use and again in a child process after a fork, where the parent's
thread does not exist. A coroutine that blocks (a synchronous call inside `async def`)
stalls every other coroutine of the process: that is the price of one loop.
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

from tenure._errors import Cancelled

T = TypeVar("T")

# The waiting thread gives the loop this long past the timeout to deliver the cancellation.
MARGIN_SECONDS = 1.0
# The engine starts a step's deadline a moment before the coroutine starts: the coroutine is
# cancelled this much early (a tenth of a short timeout) so that its error reaches the step
# before the worker's deadline check gives the step up as hung.
DEADLINE_LEAD_SECONDS = 0.05
# How often the loop looks at the abort events of the calls in flight (one look for all).
ABORT_POLL_SECONDS = 0.05

_lock = threading.Lock()
_current: _LoopThread | None = None
_on_exit: list[Callable[[], None]] = []


class TimedOut(TimeoutError):
    """A coroutine ran past its timeout and was cancelled."""


class _Aborts:
    """The calls in flight that an abort event cancels, watched by one poller task.

    A `threading.Event` cannot wake a coroutine; one poller for every call costs the loop
    `1 / ABORT_POLL_SECONDS` wake-ups a second however many calls are waiting. Touched only
    on the loop thread."""

    def __init__(self) -> None:
        self.watched: dict[asyncio.Future[Any], threading.Event] = {}
        self.poller: asyncio.Task[None] | None = None

    def watch(self, task: asyncio.Future[Any], abort: threading.Event) -> None:
        self.watched[task] = abort
        if self.poller is None or self.poller.done():
            self.poller = asyncio.get_running_loop().create_task(self._poll())

    def unwatch(self, task: asyncio.Future[Any]) -> None:
        self.watched.pop(task, None)

    async def _poll(self) -> None:
        while self.watched:
            await asyncio.sleep(ABORT_POLL_SECONDS)
            for task, abort in list(self.watched.items()):
                if abort.is_set():
                    del self.watched[task]
                    task.cancel()


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.aborts = _Aborts()
        self.thread = threading.Thread(target=self._run, name="tenure-loop", daemon=True)
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


def _loop_thread() -> _LoopThread:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            if _current is None:
                atexit.register(_shutdown)
            _current = _LoopThread()
        return _current


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run a coroutine on the process's loop thread, started on first use."""
    return _loop_thread().submit(coro)


def loop_thread() -> threading.Thread:
    """The thread the loop runs on (started if it was not)."""
    return _loop_thread().thread


def run(
    coro: Coroutine[Any, Any, T],
    *,
    timeout: float | None,
    abort: threading.Event | None = None,
    what: str = "the coroutine",
) -> T:
    """Run `coro` on the loop and wait for its result in the calling thread.

    At `timeout` seconds (just before, see `DEADLINE_LEAD_SECONDS`) the coroutine is
    cancelled and `TimedOut` is raised; once `abort` is set it is cancelled and
    `tenure.Cancelled` is raised. Its own exceptions propagate."""
    owner = _loop_thread()
    if threading.current_thread() is owner.thread:
        coro.close()
        raise RuntimeError(f"{what} cannot wait for itself on the event loop's own thread")
    timed_out = f"{what} did not finish within {timeout or 0:g} s and was cancelled"
    lead = None if timeout is None else timeout - min(DEADLINE_LEAD_SECONDS, timeout / 10)
    future = owner.submit(_guarded(owner.aborts, coro, lead, abort, what, timed_out))
    try:
        return future.result(None if timeout is None else timeout + MARGIN_SECONDS)
    except concurrent.futures.CancelledError:
        raise Cancelled(f"{what} was cancelled") from None
    except BaseException as exc:
        if future.done():
            raise  # the coroutine's own exception, or its timeout
        # Not done: the loop did not deliver in time (something blocks it), or the caller
        # was interrupted (KeyboardInterrupt). Either way nothing is left running.
        future.cancel()
        if isinstance(exc, TimeoutError):
            raise TimedOut(timed_out) from None
        raise


async def _guarded(
    aborts: _Aborts,
    coro: Coroutine[Any, Any, T],
    timeout: float | None,
    abort: threading.Event | None,
    what: str,
    timed_out: str,
) -> T:
    task = asyncio.ensure_future(coro)
    if abort is not None:
        if abort.is_set():
            task.cancel()
        else:
            aborts.watch(task, abort)
    try:
        return await asyncio.wait_for(task, timeout)
    except asyncio.CancelledError:
        if abort is None or not abort.is_set():
            raise  # the caller cancelled the whole call
        raise Cancelled(f"{what} was aborted: the segment no longer holds its run") from None
    except TimeoutError:
        if not task.cancelled():
            raise  # the coroutine's own TimeoutError
        raise TimedOut(timed_out) from None
    finally:
        aborts.unwatch(task)


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
