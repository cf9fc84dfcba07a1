"""A segment's abort signal (`_abort.Abort`): a threading.Event whose condition is made on
the first wait, that behaves as one."""

from __future__ import annotations

import threading

from tenure._abort import Abort


def test_it_is_an_event_that_answers_as_one() -> None:
    abort = Abort()
    assert isinstance(abort, threading.Event)
    assert not abort.is_set()
    assert abort.wait(0.01) is False  # times out: the condition is made here
    abort.set()
    assert abort.is_set() and abort.wait() is True and abort.wait(0) is True
    abort.clear()
    assert not abort.is_set() and abort.wait(0) is False


def test_a_set_from_another_thread_wakes_every_waiter() -> None:
    abort = Abort()
    started = threading.Barrier(4)
    woken: list[bool] = []

    def waiter() -> None:
        started.wait()
        woken.append(abort.wait(30))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait()
    abort.set()
    for thread in threads:
        thread.join(30)
    assert woken == [True, True, True]
