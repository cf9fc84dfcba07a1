"""A model call that stalls (before the answer, or mid-stream) in a real worker, and what
freeing its slot takes (SPEC §15: the step in flight is aborted within `lease / 3`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import tenure
from tenure import Outcome, RunRequest, RunStatus

# How long a stalling server holds the call; everything asserted ends well before it.
STALL_SECONDS = 30.0
LEASE_SECONDS = 1.5


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> float:
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < timeout, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - began


def established_to(port: int) -> int:
    """TCP connections of this machine in state ESTABLISHED whose remote end is `port`
    (the client side of a loopback server's connections; /proc/net/tcp, IPv4)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[2].split(":")[1], 16) == port and row[3] == "01")


def cancel_while_stalled(
    rt: tenure.Runtime, model: str, in_flight: Callable[[], bool]
) -> tuple[float, tenure.Runtime, str]:
    """Run one request on a worker, cancel it once `in_flight()` (the server holds the call),
    and return how long the slot took to be free again."""
    run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=model))
    worker = rt.worker(concurrency=1, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(in_flight)
        assert rt.cancel(run_id)
        took = wait_for(
            lambda: worker.stats.outcomes.get(str(Outcome.CANCELLED)) == 1,
            timeout=STALL_SECONDS * 2,
        )
        assert worker.inflight == 0  # the slot is free again
    finally:
        worker.stop()
        thread.join(10)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED
    return took, rt, run_id
