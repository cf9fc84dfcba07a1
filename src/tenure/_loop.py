"""The one event loop of a process, on one private daemon thread.

Async tools, async providers and MCP sessions all run their coroutines here; the engine is
synchronous, so a slot thread submits a coroutine with `asyncio.run_coroutine_threadsafe`
and waits for its result. One loop for everything (not a loop per call) lets a worker at
concurrency 200 keep 200 coroutines waiting on one thread, and keeps an MCP session's
streams and background tasks on the loop that opened them, which anyio requires.

The loop starts on first use and again in a child process after a fork, where the parent's
thread does not exist. A coroutine that blocks (a synchronous call inside `async def`)
stalls every other coroutine of the process: that is the price of one loop.

The loop is supervised. A background task that raises `SystemExit` or `KeyboardInterrupt`
ends `run_forever`, and with it the thread: every call waiting on it then fails at once
with `LoopDied` (a `TimedOut`: what the coroutine did is unknown, a write may have happened),
what was still running on it is cancelled, and the next use starts a new loop thread. When
no new one can be started, the call fails with `LoopUnavailable` and `unavailable()` says
why, which a worker reads to stop claiming.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tenure._errors import Cancelled, ProviderError
from tenure._types import FailureClass

# asyncio is imported where the loop is used: most processes (every `tenure` command that
# runs no async tool) never start it, and importing it was a fifth of importing tenure.
if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("tenure.loop")

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
# A stopped loop gets this long to cancel what was still running on it (an HTTP request is
# closed, an MCP session's subprocess told to end); a coroutine that blocks cannot hold more.
CLEANUP_SECONDS = 5.0

_lock = threading.Lock()
_current: _LoopThread | None = None
_registered = False  # `_shutdown` registered with atexit
_unavailable: str | None = None  # why the last start of a loop thread failed
_on_exit: list[Callable[[], None]] = []


class TimedOut(TimeoutError):
    """A coroutine ran past its timeout and was cancelled: what it did is unknown."""


class LoopDied(TimedOut):
    """The loop thread stopped while the coroutine ran (or waited to run) on it. Its outcome
    is unknown, as for a coroutine cut off by its timeout: a write stays in doubt."""


class LoopUnavailable(ProviderError):
    """No event loop thread could be started: the coroutine did not run. Retryable (another
    worker's loop may be fine); the worker that sees it stops claiming."""

    def __init__(self, message: str) -> None:
        super().__init__(FailureClass.CONNECTION, message)


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
            import asyncio

            self.poller = asyncio.get_running_loop().create_task(self._poll())

    def unwatch(self, task: asyncio.Future[Any]) -> None:
        self.watched.pop(task, None)

    async def _poll(self) -> None:
        import asyncio

        while self.watched:
            await asyncio.sleep(ABORT_POLL_SECONDS)
            for task, abort in list(self.watched.items()):
                if abort.is_set():
                    del self.watched[task]
                    task.cancel()


class _LoopThread:
    def __init__(self) -> None:
        import asyncio

        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.aborts = _Aborts()
        # The calls waiting on this loop, failed by `_stopped` if it stops under them.
        self.lock = threading.Lock()
        self.calls: set[_Call[Any]] = set()
        # What was made for this loop (`PerLoop`), closed on it when it stops.
        self.per_loop: weakref.WeakSet[PerLoop[Any]] = weakref.WeakSet()
        self.dead = False
        self.stopping = False  # stopped on purpose (interpreter exit), not by a failure
        self.thread = threading.Thread(target=self._run, name="tenure-loop", daemon=True)
        try:
            self.thread.start()
        except BaseException:
            self.loop.close()
            raise

    @property
    def alive(self) -> bool:
        return not self.dead and self.thread.is_alive()

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)
        cause: BaseException | None = None
        try:
            self.loop.run_forever()
        except BaseException as exc:  # a task's SystemExit or KeyboardInterrupt ends the loop
            cause = exc
        self._stopped(cause)

    def _stopped(self, cause: BaseException | None) -> None:
        """On the loop's thread once `run_forever` has returned: nothing runs the loop now."""
        with self.lock:
            self.dead = True
            calls, self.calls = list(self.calls), set()
        if not self.stopping:
            said = f"{type(cause).__name__}({cause})" if cause is not None else "loop.stop()"
            log.error(
                "the event loop thread stopped (%s): %d call(s) waiting on it fail in doubt; "
                "a new loop thread starts on next use",
                said,
                len(calls),
            )
        # The waiting threads first: they must not wait for the clean-up below.
        for call in calls:
            call.lost()
        with contextlib.suppress(BaseException):
            self.loop.run_until_complete(_end_tasks(CLEANUP_SECONDS))
        with contextlib.suppress(BaseException):
            self.loop.run_until_complete(_close_all(list(self.per_loop), self.loop))
        with contextlib.suppress(BaseException):
            self.loop.close()

    def admit(self, call: _Call[Any]) -> bool:
        """Count `call` as waiting on this loop; False once it has stopped."""
        with self.lock:
            if self.dead:
                return False
            self.calls.add(call)
            return True

    def done(self, call: _Call[Any]) -> None:
        with self.lock:
            self.calls.discard(call)

    def schedule(self, callback: Callable[..., object], *args: Any) -> None:
        try:  # on every hand-off: a bare try costs nothing, unlike a context manager
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            return  # a loop that stopped and closed refuses it; its calls were failed already

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.stopping = True
        if not self.dead:
            self.schedule(self.loop.stop)
        self.thread.join(timeout=CLEANUP_SECONDS + 1)


_closing: set[asyncio.Task[None]] = set()  # closes under way (the loop keeps tasks weakly)


def _close_soon(
    loop: asyncio.AbstractEventLoop, value: Any, close: Callable[[Any], Coroutine[Any, Any, None]]
) -> None:
    """Close `value` on `loop` if it still runs (from whatever thread dropped its owner)."""

    def start() -> None:
        task = loop.create_task(close(value))
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # it closed meanwhile: nothing to close on
            loop.call_soon_threadsafe(start)


async def _close_all(things: list[PerLoop[Any]], loop: asyncio.AbstractEventLoop) -> None:
    import asyncio

    closing = [asyncio.ensure_future(thing.close_on(loop)) for thing in things]
    if closing:
        await asyncio.wait(closing, timeout=CLEANUP_SECONDS)


async def _end_tasks(seconds: float) -> None:
    """Cancel every other task of the loop and give them `seconds` to end."""
    import asyncio

    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=seconds)


def _loop_thread() -> _LoopThread:
    """The process's live loop thread: started on first use, after a fork, and in place of
    one that stopped."""
    global _current, _registered, _unavailable
    with _lock:
        current = _current
        if current is not None and current.pid == os.getpid() and current.alive:
            return current
        if not _registered:
            atexit.register(_shutdown)
            _registered = True
        try:
            _current = _LoopThread()
        except Exception as exc:
            _unavailable = (
                f"no event loop thread could be started in this process: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            )
            raise LoopUnavailable(_unavailable) from exc
        _unavailable = None
        if current is not None and current.pid == os.getpid():
            log.warning("a new event loop thread started in place of the one that stopped")
        return _current


def unavailable() -> str | None:
    """Why the last attempt to start a loop thread failed; None once one runs."""
    return _unavailable


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run a coroutine on the process's loop thread, started on first use. Its future is not
    failed if the loop stops: a caller that waits for it waits with a timeout (`run` is
    what steps use: it fails at once)."""
    return _loop_thread().submit(coro)


def loop_thread() -> threading.Thread:
    """The thread the loop runs on (started if it was not)."""
    return _loop_thread().thread


def run(
    coro: Coroutine[Any, Any, T],
    *,
    timeout: float,
    abort: threading.Event | None = None,
    what: str = "the coroutine",
) -> T:
    """Run `coro` on the loop and wait for its result in the calling thread.

    At `timeout` seconds (just before, see `DEADLINE_LEAD_SECONDS`) the coroutine is
    cancelled and `TimedOut` is raised; once `abort` is set it is cancelled and
    `tenure.Cancelled` is raised; if the loop thread stops meanwhile, `LoopDied` (a
    `TimedOut`) is raised at once. Its own exceptions propagate. Every way out whose outcome
    is unknown is a `TimedOut`.

    The waiting thread keeps the clock, and the abort is watched only for a call still
    running after `QUICK_SECONDS`: a call that ends sooner (most tool calls) costs the loop
    one task and nothing else, no timer and no watch to set up and take down."""
    call: _Call[T] = _Call(coro, timeout, abort, what)
    owner = _admit(call)
    cancel_at = time.monotonic() + _lead(timeout)
    try:
        owner.schedule(call.start, owner)
        finished = call.wait(_remaining(cancel_at, QUICK_SECONDS))
        if not finished and abort is not None:
            owner.schedule(call.watch, owner)
        if not finished:
            finished = call.wait(_remaining(cancel_at, None))
        if not finished:  # the deadline: cancel, and give the loop a moment to deliver it
            owner.schedule(call.time_out)
            finished = call.wait(MARGIN_SECONDS)
    except BaseException:  # an interrupted caller (KeyboardInterrupt) leaves nothing behind
        owner.schedule(call.cancel)
        raise
    finally:
        owner.done(call)
    if not finished:
        # The loop did not deliver the cancellation in time: something blocks it.
        owner.schedule(call.cancel)
        raise TimedOut(call.timed_out_message)
    return call.outcome()


def _admit(call: _Call[Any]) -> _LoopThread:
    """The live loop thread, with `call` counted as waiting on it."""
    try:
        for _ in range(3):  # a loop that stops between the two steps is replaced
            owner = _loop_thread()
            if threading.current_thread() is owner.thread:
                raise RuntimeError(
                    f"{call.what} cannot wait for itself on the event loop's own thread"
                )
            if owner.admit(call):
                return owner
        raise LoopUnavailable(f"{call.what}: the event loop thread keeps stopping")
    except BaseException:
        call.coro.close()
        raise


def _lead(timeout: float) -> float:
    return max(0.0, timeout - min(DEADLINE_LEAD_SECONDS, timeout / 10))


def _remaining(cancel_at: float, cap: float | None) -> float:
    """Seconds to wait: until `cancel_at`, at most `cap`."""
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
        timeout: float,
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
        return f"{self.what} did not finish within {self.timeout:g} s and was cancelled"

    def wait(self, seconds: float) -> bool:
        """Whether the call has ended, waiting at most `seconds`."""
        return self._ended.acquire(True, seconds)

    def _end(self) -> None:
        # On the loop thread only; a call failed by `lost` is not ended a second time.
        if not self.ended:
            self.ended = True
            self._ended.release()

    def lost(self) -> None:
        """The loop stopped under the call (on the loop thread, after `run_forever`)."""
        if self.ended:
            return
        if not self.started:
            # Never awaited (its task, if any, is cancelled before its first step): closed
            # so that it is not reported as never awaited.
            self.coro.close()
        self.error = LoopDied(
            f"{self.what} was cut off: the event loop thread stopped while it ran, "
            "so what it did is unknown"
        )
        self._end()

    def start(self, owner: _LoopThread) -> None:
        if self.ended:  # failed by `lost` before the stopped loop ran this callback
            return
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
        import asyncio

        self.started = True
        try:
            result = await self.coro
        except asyncio.CancelledError:
            if not self.ended:
                self.error = self._cancelled()
        except BaseException as exc:
            if not self.ended:
                self.error = TimedOut(self.timed_out_message) if self.timed_out else exc
        else:
            if not self.ended:
                self.result = result
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


class PerLoop(Generic[R]):
    """A thing that belongs to the loop it was made on (an async HTTP client, whose pooled
    connections are that loop's): made again on the loop that replaced a stopped one, never
    used from another loop, where it would wait for ever on a selector that nobody runs.
    `close` ends it on its own loop when that loop stops. Touched on the loop thread only."""

    def __init__(
        self, make: Callable[[], R], close: Callable[[R], Coroutine[Any, Any, None]]
    ) -> None:
        self._make = make
        self._close = close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._value: R | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def get(self) -> R:
        """The running loop's own, made if it has none yet."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._value is None or self._loop is not loop:
            self._forget()
            value = self._value = self._make()
            self._loop = loop
            # Dropped unclosed (a provider nobody closes), it is closed on its loop rather
            # than left to the garbage collector with its connections open.
            self._finalizer = weakref.finalize(self, _close_soon, loop, value, self._close)
            self._finalizer.atexit = False  # the loop's own stop closes what is left
            owner = _current
            if owner is not None and owner.loop is loop:
                owner.per_loop.add(self)
        return self._value

    async def close_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close the one made on `loop` (the running loop), if any."""
        value = self._value if self._loop is loop else None
        if value is not None:
            self._forget()
            await self._close(value)

    def _forget(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._value = self._loop = self._finalizer = None

    @property
    def made(self) -> bool:
        return self._value is not None


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
