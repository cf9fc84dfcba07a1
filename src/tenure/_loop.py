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

import _thread
import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

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
# A call still running after this long has its abort watched (a shorter one ends first).
QUICK_SECONDS = 0.05

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
        # Tasks still pending when the loop closes are reported as destroyed: end them first.
        finishing = asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop)
        with contextlib.suppress(Exception):
            finishing.result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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
    `tenure.Cancelled` is raised. Its own exceptions propagate.

    The waiting thread keeps the clock, and the abort is watched only for a call still
    running after `QUICK_SECONDS`: a call that ends sooner (most tool calls) costs the loop
    one task and nothing else, no timer and no watch to set up and take down."""
    owner = _loop_thread()
    if threading.current_thread() is owner.thread:
        coro.close()
        raise RuntimeError(f"{what} cannot wait for itself on the event loop's own thread")
    call: _Call[T] = _Call(coro, timeout, abort, what)
    cancel_at = None if timeout is None else time.monotonic() + _lead(timeout)
    owner.loop.call_soon_threadsafe(call.start, owner)
    try:
        finished = call.wait(_remaining(cancel_at, QUICK_SECONDS))
        if not finished and abort is not None:
            owner.loop.call_soon_threadsafe(call.watch, owner)
        if not finished:
            finished = call.wait(_remaining(cancel_at, None))
        if not finished:  # the deadline: cancel, and give the loop a moment to deliver it
            owner.loop.call_soon_threadsafe(call.time_out)
            finished = call.wait(MARGIN_SECONDS)
    except BaseException:  # an interrupted caller (KeyboardInterrupt) leaves nothing behind
        owner.loop.call_soon_threadsafe(call.cancel)
        raise
    if not finished:
        # The loop did not deliver the cancellation in time: something blocks it.
        owner.loop.call_soon_threadsafe(call.cancel)
        raise TimedOut(call.timed_out_message)
    return call.outcome()


def _lead(timeout: float) -> float:
    return max(0.0, timeout - min(DEADLINE_LEAD_SECONDS, timeout / 10))


def _remaining(cancel_at: float | None, cap: float | None) -> float | None:
    """Seconds to wait: until `cancel_at` (None: no deadline), at most `cap`."""
    if cancel_at is None:
        return cap
    left = max(0.0, cancel_at - time.monotonic())
    return left if cap is None else min(left, cap)


class _Call(Generic[T]):
    """One coroutine run for a waiting thread: a task on the loop, and its abort.

    Built by hand rather than with `run_coroutine_threadsafe` and `asyncio.wait_for`, which
    wrap the coroutine in a second task and a second future: the hand-off is the whole cost
    of an async tool step, so it is kept to one task, no extra turn of the loop, and a bare
    lock (released once, when the call ends) for the waiting thread."""

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        timeout: float | None,
        abort: threading.Event | None,
        what: str,
    ) -> None:
        self.coro = coro
        self.timeout = timeout
        self.abort = abort
        self.what = what
        self._ended = _thread.allocate_lock()
        self._ended.acquire()
        self.task: asyncio.Task[None] | None = None
        self.timed_out = False
        self.dropped = False  # the waiting thread gave up
        self.started = False  # `_drive` has begun awaiting the coroutine
        self.ended = False
        self.result: T | None = None
        self.error: BaseException | None = None

    @property
    def timed_out_message(self) -> str:
        return f"{self.what} did not finish within {self.timeout or 0:g} s and was cancelled"

    def wait(self, seconds: float | None) -> bool:
        """Whether the call has ended, waiting at most `seconds` (None: for ever)."""
        return self._ended.acquire(True, -1 if seconds is None else seconds)

    def _end(self) -> None:
        self.ended = True
        self._ended.release()

    def start(self, owner: _LoopThread) -> None:
        if self.dropped or (self.abort is not None and self.abort.is_set()):
            # Not started at all: a task cancelled before its first step would never run
            # `_drive`, and the waiting thread would never be woken.
            self.coro.close()
            self.error = self._cancelled()
            self._end()
            return
        self.task = owner.loop.create_task(self._drive(owner))

    def watch(self, owner: _LoopThread) -> None:
        """The call outlasted `QUICK_SECONDS`: from now on its abort cancels it."""
        if self.task is not None and not self.ended and self.abort is not None:
            owner.aborts.watch(self.task, self.abort)

    async def _drive(self, owner: _LoopThread) -> None:
        # The waiting thread is woken from inside the task's last step, not from a done
        # callback, which would cost the loop one more turn.
        self.started = True
        try:
            self.result = await self.coro
        except asyncio.CancelledError:
            self.error = self._cancelled()
        except BaseException as exc:
            self.error = TimedOut(self.timed_out_message) if self.timed_out else exc
        finally:
            if self.task is not None:
                owner.aborts.unwatch(self.task)
            self._end()

    def _cancelled(self) -> BaseException:
        if self.timed_out:
            return TimedOut(self.timed_out_message)
        if self.abort is not None and self.abort.is_set():
            return Cancelled(f"{self.what} was aborted: the segment no longer holds its run")
        return Cancelled(f"{self.what} was cancelled")

    def time_out(self) -> None:
        if self.task is not None and not self.ended:
            self.timed_out = True
            self.task.cancel()

    def cancel(self) -> None:
        """The waiting thread gave up (it is gone): cancel, or never start."""
        self.dropped = True
        if self.task is not None:
            self.task.cancel()
            if not self.started:
                self.coro.close()  # its task is cancelled before `_drive` could await it

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


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
