"""Provider capacity (SPEC §17) across real processes, on every store: worker processes share
one limit against the fake OpenAI-compatible service in a process of its own; a call of a
SIGKILLed worker holds its model's concurrency no longer than its lease; limits outlive the
database server's restart."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import tenure
from tenure import Limits, RunStatus

from ..fakes._app import Latency
from ..fakes.capacity_app import make_app, request
from ..fakes.openai_service import ServiceProcess
from ._workers import WorkerProcess, start, wait_for

POLICY = "tests.fakes.capacity_app:three_calls"


def spawn(db_url: str, base_url: str, log: Path, *args: str) -> WorkerProcess:
    return start([sys.executable, "-m", "tests.fakes.capacity_app", db_url, base_url, *args], log)


def finished(rt: tenure.Runtime, ids: list[str]) -> bool:
    runs = [rt.status(run_id) for run_id in ids]
    return all(r is not None and r.status.is_terminal for r in runs)


def test_two_worker_processes_share_one_limit_and_hear_no_429(db_url: str, tmp_path: Path) -> None:
    # The service allows 120 requests a minute (12 at once, then 2 a second). The workers are
    # told a tenth less: with exactly the same limit a call now and then arrives more than the
    # engine's second of headroom after its grant on a loaded two-core machine (1 call in 25
    # was refused, in 1 run out of 4), which a provider across a network would see as well.
    rpm, ours, runs = 120, 108, 8
    with ServiceProcess(rpm=rpm, latency=Latency.uniform(0.05, 0.3), policy=POLICY) as service:
        with make_app(db_url, service.url, Limits(requests_per_minute=ours)) as rt:
            ids = rt.enqueue_many([request(i) for i in range(runs)])
            started = time.monotonic()
            # Two slots each: neither process can take the whole queue before the other starts.
            args = ("--rpm", str(ours), "--slots", "2")
            workers = [spawn(db_url, service.url, tmp_path / f"w{i}.log", *args) for i in (1, 2)]
            try:
                wait_for(lambda: finished(rt, ids), timeout=120, what="every run finished")
            finally:
                for worker in workers:
                    worker.stop()
            elapsed = time.monotonic() - started
            statuses = {rt.status(i).status for i in ids}  # type: ignore[union-attr]
            claimers = {
                e.payload["worker"].rsplit(":", 1)[0]
                for run_id in ids
                for e in rt.events(run_id)
                if e.kind is tenure.EventKind.CLAIMED
            }
        stats = service.stats()
    assert statuses == {RunStatus.COMPLETED}
    assert stats.rate_limited == 0, stats
    assert stats.answered == 3 * runs
    assert len(claimers) == 2  # both processes worked the queue
    # 24 calls: at most 10.8 at once, then 1.8 a second.
    assert elapsed >= 0.8 * (3 * runs - ours / 10) / (ours / 60)


def test_a_killed_workers_call_holds_the_model_no_longer_than_its_lease(
    db_url: str, tmp_path: Path
) -> None:
    lease = 1.0
    args = ("--concurrency", "1", "--lease", str(lease), "--slots", "1")
    with (
        ServiceProcess(latency=Latency.fixed(60), policy=POLICY) as service,
        make_app(db_url, service.url, Limits(concurrency=1)) as rt,
    ):
        rt.enqueue(request(0))
        worker = spawn(db_url, service.url, tmp_path / "w.log", *args)
        try:
            wait_for(lambda: service.stats().in_flight == 1, what="a call in flight")
            assert [m.in_use for m in rt.models()] == [1]
            worker.kill()
            killed = time.monotonic()
            wait_for(lambda: [m.in_use for m in rt.models()] == [0], timeout=10)
            assert time.monotonic() - killed <= lease + 1.0
        finally:
            worker.stop()


def test_limits_and_circuits_outlive_a_server_restart(
    db_url: str, request: pytest.FixtureRequest
) -> None:
    with tenure.Runtime(db_url) as rt:
        rt.add_model("m", tenure.providers.Scripted(), limits=Limits(30, 60_000, 3))
        rt.run(tenure.RunRequest(prompt="p", model="m", script=[{"say": "ok"}]))
        rt.store.open_circuit("m", 600)
        if db_url.startswith("postgresql"):
            request.getfixturevalue("pg_cluster").restart()
    # A fresh process's view: a runtime that registered nothing reads the rows.
    with tenure.Runtime(db_url) as fresh:
        (state,) = fresh.models()
    assert state.name == "m" and state.limits == Limits(30, 60_000, 3)
    assert state.requests is not None and state.requests < 3.0  # the call was counted
    assert state.circuit_open_until is not None
