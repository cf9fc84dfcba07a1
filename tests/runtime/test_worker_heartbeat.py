"""A worker's own heartbeat (its `tenure_workers` row), on both stores: written when it starts,
moved in every lease keeper round even while idle, `stopping` during a drain, `stopped` after
a clean shutdown, and read as dead soon after a SIGKILL, before its leases expire."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tenure
from tenure import RunRequest, RunStatus
from tenure._heartbeat import DEAD_AFTER_BEATS, WorkerState, worker_state
from tenure._worker import Worker
from tenure.store._base import WorkerRow

from ..apps import make_app
from ..crash._workers import spawn

MakeRuntime = Callable[..., tenure.Runtime]
LEASE = 0.6  # a heartbeat every 0.2 s


def start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout}s: {what}"
        time.sleep(0.02)


def row(rt: tenure.Runtime, worker_id: str) -> WorkerRow | None:
    return next((w for w in rt.store.workers() if w.id == worker_id), None)


def napping(rt: tenure.Runtime) -> tenure.Runtime:
    @rt.tool
    def nap(seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    return rt


def nap_request(seconds: float) -> RunRequest:
    return RunRequest(
        prompt="nap",
        model="scripted",
        tools=["nap"],
        script=[{"call": [{"tool": "nap", "args": {"seconds": seconds}}]}, {"say": "rested"}],
    )


def test_a_worker_is_listed_with_its_queues_and_slots_before_any_run(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(lease_seconds=LEASE)
    worker = rt.worker(concurrency=3, queues=["emails", "reports"], poll_interval=0.05)
    thread = start(worker)
    try:
        wait_for(lambda: row(rt, worker.identity) is not None, what="the worker's row")
        mine = row(rt, worker.identity)
        assert mine is not None
        assert (mine.host, mine.pid) == (socket.gethostname(), os.getpid())
        assert (mine.queues, mine.slots, mine.slots_in_use) == (["emails", "reports"], 3, 0)
        assert mine.state == "running" and mine.stopped_at is None
        assert abs(mine.heartbeat_seconds - LEASE / 3) < 1e-9
    finally:
        worker.stop()
        thread.join(10)


def test_the_heartbeat_advances_while_the_worker_is_idle(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=LEASE)
    worker = rt.worker(concurrency=2, poll_interval=0.05)
    thread = start(worker)
    try:
        wait_for(lambda: row(rt, worker.identity) is not None, what="the worker's row")
        seen = []
        for _ in range(3):
            current = row(rt, worker.identity)
            assert current is not None
            seen.append(current.last_seen)
            wait_for(
                lambda last=current.last_seen: (
                    (r := row(rt, worker.identity)) is not None and r.last_seen > last
                ),
                timeout=5,
                what="the next heartbeat",
            )
        assert seen == sorted(seen) and len(set(seen)) == 3
        assert not rt.runs(RunStatus.RUNNING), "nothing was in flight"
        idle = row(rt, worker.identity)
        assert idle is not None and worker_state(idle, rt.store.now()) is WorkerState.RUNNING
        assert worker.heartbeat.beats >= 3
    finally:
        worker.stop()
        thread.join(10)


def test_slots_in_use_follow_the_runs_in_flight_and_a_drain_says_stopping(
    make_runtime: MakeRuntime,
) -> None:
    rt = napping(make_runtime(lease_seconds=LEASE))
    rt.enqueue_many([nap_request(1.5), nap_request(1.5)])
    worker = rt.worker(concurrency=3, poll_interval=0.05, grace_seconds=10)
    thread = start(worker)
    try:
        wait_for(
            lambda: (r := row(rt, worker.identity)) is not None and r.slots_in_use == 2,
            what="two slots in use",
        )
        worker.stop()  # a drain: the two naps finish within the grace period
        wait_for(
            lambda: (r := row(rt, worker.identity)) is not None and r.state == "stopping",
            what="the row says stopping",
        )
    finally:
        worker.stop()
        thread.join(15)
    assert not thread.is_alive()
    stopped = row(rt, worker.identity)
    assert stopped is not None and stopped.state == "stopped"
    assert stopped.stopped_at is not None and stopped.slots_in_use == 0
    assert {r.status for r in rt.runs()} == {RunStatus.COMPLETED}


def test_a_burst_worker_ends_stopped(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=LEASE)
    rt.enqueue(RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]))
    worker = rt.worker(concurrency=1, burst=True, poll_interval=0.05)
    worker.run()
    done = row(rt, worker.identity)
    assert done is not None and done.state == "stopped"


def test_a_busy_worker_beats_once_per_round_not_once_per_run(make_runtime: MakeRuntime) -> None:
    """Every segment kept wakes the keeper for an early round; the heartbeat must not ride
    each of them (one statement per round at most)."""
    rt = make_runtime(lease_seconds=30)  # a round every 10 s
    rt.enqueue_many(
        [RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]) for _ in range(40)]
    )
    worker = rt.worker(concurrency=2, burst=True, poll_interval=0.05)
    started = time.monotonic()
    worker.run()
    assert worker.stats.outcomes.get("completed") == 40
    rounds = (time.monotonic() - started) / 10
    assert worker.heartbeat.beats <= int(rounds) + 1, worker.heartbeat.beats


def test_a_sigkilled_worker_shows_dead_before_its_lease_expires(
    tmp_path: Path, db_url: str
) -> None:
    lease = 3.0  # a heartbeat (and a renewal) every second; dead 2.5 s after the last one
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger), lease)
    run_id = rt.enqueue(nap_request(20))
    victim = spawn(db_url, ledger, "--concurrency", "2", lease=lease)
    try:
        wait_for(
            lambda: rt.store.run_status(run_id) is RunStatus.RUNNING,
            timeout=30,
            what="the victim holds the run",
        )
        (holder,) = [w for w in rt.store.workers() if w.pid == victim.pid]
        assert holder.state == "running" and holder.slots == 2
        wait_for(
            lambda: (r := row(rt, holder.id)) is not None and r.slots_in_use == 1,
            what="its slot in use",
        )
        victim.kill()
        killed_at = rt.store.now()
        wait_for(
            lambda: (
                (r := row(rt, holder.id)) is not None
                and worker_state(r, rt.store.now()) is WorkerState.DEAD
            ),
            timeout=10,
            what="the killed worker shows dead",
        )
        dead_at = rt.store.now()
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.RUNNING
        assert run.claimed_by == holder.id
        assert run.lease_expires is not None and dead_at < run.lease_expires, (
            f"dead at {dead_at}, but its lease had already expired at {run.lease_expires}"
        )
        # Within a few heartbeats of the kill.
        assert (dead_at - killed_at).total_seconds() < (DEAD_AFTER_BEATS + 1) * lease / 3
    finally:
        victim.stop()
        rt.close()


def test_a_sigtermed_worker_process_ends_stopped(tmp_path: Path, db_url: str) -> None:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger))
    worker = spawn(db_url, ledger, "--concurrency", "1", "--queue", "emails")
    try:
        wait_for(
            lambda: any(w.pid == worker.pid for w in rt.store.workers()),
            timeout=30,
            what="the worker's row",
        )
        (mine,) = [w for w in rt.store.workers() if w.pid == worker.pid]
        assert mine.queues == ["emails"] and mine.state == "running"
        worker.stop()  # SIGTERM: a drain, then a clean shutdown
        assert worker.proc.returncode == 0
        stopped = row(rt, mine.id)
        assert stopped is not None and stopped.state == "stopped"
        assert worker_state(stopped, rt.store.now()) is WorkerState.STOPPED
    finally:
        worker.stop()
        rt.close()
