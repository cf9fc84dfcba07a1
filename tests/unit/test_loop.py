"""The process's event loop thread (`tenure._loop`): what a waiting thread gets back."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from typing import Any

import pytest

from tenure import Cancelled, _loop
from tests.loopkill import kill_loop


def test_a_coroutines_own_timeout_error_is_not_taken_for_its_timeout() -> None:
    async def fails() -> None:
        raise TimeoutError("the warehouse did not answer")

    with pytest.raises(TimeoutError, match="warehouse") as raised:
        _loop.run(fails(), timeout=5)
    assert not isinstance(raised.value, _loop.TimedOut)


def test_past_its_timeout_a_coroutine_is_cancelled() -> None:
    cancelled = threading.Event()

    async def hangs() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(_loop.TimedOut, match=r"within 0\.2 s"):
        _loop.run(hangs(), timeout=0.2, what="hangs")
    assert cancelled.is_set()


def test_an_abort_set_before_the_call_runs_nothing() -> None:
    ran = threading.Event()
    abort = threading.Event()
    abort.set()

    async def work() -> None:
        ran.set()

    with pytest.raises(Cancelled):
        _loop.run(work(), timeout=5, abort=abort)
    assert not ran.is_set()


def test_waiting_on_the_loop_from_the_loop_thread_is_refused() -> None:
    async def inner() -> int:
        return 1

    async def outer() -> str:
        try:
            _loop.run(inner(), timeout=1)
        except RuntimeError as exc:
            return str(exc)
        return "ran"

    assert "own thread" in _loop.run(outer(), timeout=5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_loop_thread_of_its_own() -> None:
    async def answer() -> int:
        return 42

    parent = _loop.loop_thread()
    assert _loop.run(answer(), timeout=5) == 42
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: the parent's loop thread does not exist here
        try:
            fresh = _loop.loop_thread() is not parent
            ok = _loop.run(answer(), timeout=5) == 42 and fresh
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)


@pytest.mark.parametrize("after", [0.0, _loop.QUICK_SECONDS * 3])
def test_an_abort_set_while_the_call_runs_cancels_it(after: float) -> None:
    """Set as soon as it runs (before the abort is watched) or once the call counts as
    long."""
    started, cancelled, abort = threading.Event(), threading.Event(), threading.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def set_abort() -> None:
        started.wait(5)
        time.sleep(after)
        abort.set()

    timer = threading.Thread(target=set_abort)
    timer.start()
    with pytest.raises(Cancelled, match="aborted"):
        _loop.run(work(), timeout=10, abort=abort)
    timer.join()
    assert cancelled.is_set()


def test_a_call_that_ends_quickly_arms_no_timer_and_no_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The timeout is kept by the waiting thread, and the abort is watched only for a call
    still running after `QUICK_SECONDS`: a quick call sets up neither on the loop."""

    async def answer() -> int:
        return 7

    owner = _loop._loop_thread()
    armed: list[float] = []
    call_later = owner.loop.call_later

    def counted(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(delay)
        return call_later(delay, *args, **kwargs)

    monkeypatch.setattr(owner.loop, "call_later", counted)
    abort = threading.Event()
    for _ in range(50):
        assert _loop.run(answer(), timeout=5, abort=abort) == 7
    assert armed == [] and not owner.aborts.watched


# -- a loop thread that stops -------------------------------------------------------------------


async def answer() -> int:
    await asyncio.sleep(0)
    return 42


def test_a_stopped_loop_thread_is_replaced_on_next_use() -> None:
    dead = kill_loop()
    assert _loop.run(answer(), timeout=5) == 42
    assert _loop.loop_thread() is not dead and _loop.loop_thread().is_alive()


def test_a_call_waiting_on_a_loop_that_stops_fails_at_once_as_in_doubt() -> None:
    """Its coroutine may have done what it was for (a write): the outcome is unknown, so the
    error is a `TimedOut` (never a plain exception, which would read as a known failure)."""
    started = threading.Event()
    got: list[BaseException] = []

    async def writes() -> None:
        started.set()
        await asyncio.sleep(60)

    def wait() -> None:
        try:
            _loop.run(writes(), timeout=120, what="the write")
        except BaseException as exc:
            got.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert started.wait(10)
    kill_loop()
    waiter.join(30)  # far less than the call's 120 s timeout
    assert not waiter.is_alive(), "the waiting thread was left waiting on a dead loop"
    (error,) = got
    assert isinstance(error, _loop.LoopDied) and isinstance(error, _loop.TimedOut)
    assert "the write" in str(error) and "event loop" in str(error)
    assert _loop.run(answer(), timeout=5) == 42  # and the next call gets a new loop


def test_a_loop_that_cannot_be_started_again_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kill_loop()

    def no_more_files() -> asyncio.AbstractEventLoop:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(asyncio, "new_event_loop", no_more_files)
    coro = answer()
    with pytest.raises(_loop.LoopUnavailable, match="Too many open files") as raised:
        _loop.run(coro, timeout=5)
    assert "\n" not in str(raised.value)
    assert coro.cr_frame is None  # closed, never left to warn "never awaited"
    assert _loop.unavailable() is not None
    monkeypatch.undo()
    assert _loop.run(answer(), timeout=5) == 42
    assert _loop.unavailable() is None
