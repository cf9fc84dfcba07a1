"""Stopping the process's event loop thread the way user code can: a background task on the
loop that raises `SystemExit` ends `run_forever`, and with it the thread."""

from __future__ import annotations

import threading

from tenure import _loop


def kill_loop() -> threading.Thread:
    """Stop the current loop thread; returns it, ended."""
    thread = _loop.loop_thread()

    async def exits() -> None:
        raise SystemExit(3)

    _loop.submit(exits())
    thread.join(10)
    assert not thread.is_alive(), "the loop thread did not stop"
    return thread
