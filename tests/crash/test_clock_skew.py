"""A worker whose own clock is wrong by ten minutes neither steals a lease nor keeps one: the
database's clock decides (SPEC §4).

Three worker processes, each on its own queue: an honest one, one ten minutes ahead and one
ten minutes behind (their Python clock, `time.time`; see `tests.crash.skewed`
for why not `faketime`). Were a worker's clock used:
- the ahead worker's reaper would requeue the others' live leases (steal);
- the behind worker would stamp leases already expired, and lose its runs to the others;
- the ahead worker, frozen, would keep its lease for ten minutes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus
from tenure.audit import audit

from ..apps import make_app
from ._workers import WorkerProcess, spawn, wait_for

LEASE = 1.0
SKEW = 600.0
pytestmark = pytest.mark.slow


def _long_run(queue: str) -> RunRequest:
    # A heartbeat every ~0.4 s for ~2.5 s: the lease is always live by the database's clock.
    rounds: list[dict[str, object]] = []
    for _ in range(6):
        rounds += [{"sleep": 0.4}, {"call": [{"tool": "read"}]}]
    return RunRequest(
        prompt="tick",
        model="scripted",
        tools=["read"],
        queue=queue,
        script=[*rounds, {"say": "done"}],
        max_iterations=10,
    )


def _skewed(db_url: str, ledger: Path, offset: float, queue: str) -> WorkerProcess:
    return spawn(
        db_url,
        ledger,
        *("--concurrency", "1", "--queue", queue),
        lease=LEASE,
        module=("tests.crash.skewed", str(offset)),
    )


def _clock(worker: WorkerProcess) -> float:
    wait_for(lambda: "clock " in worker.log.read_text(), 20, "the worker's clock line")
    line = next(ln for ln in worker.log.read_text().splitlines() if ln.startswith("clock "))
    return float(line.split()[1])


def _events(rt: tenure.Runtime, run_id: str, kind: EventKind) -> list[tenure.Event]:
    return [e for e in rt.events(run_id) if e.kind is kind]


def test_a_skewed_worker_neither_steals_nor_keeps_a_lease(db_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger), LEASE)
    honest_id, ahead_id, behind_id = (rt.enqueue(_long_run(q)) for q in ("h", "a", "b"))
    workers = [
        spawn(db_url, ledger, "--concurrency", "1", "--queue", "h", lease=LEASE),
        _skewed(db_url, ledger, +SKEW, "a"),
        _skewed(db_url, ledger, -SKEW, "b"),
    ]
    _, ahead, behind = workers
    try:
        assert abs(_clock(ahead) - time.time() - SKEW) < 60
        assert abs(_clock(behind) - time.time() + SKEW) < 60
        # Freeze the ahead worker inside its run, with a live lease by the database's clock.
        wait_for(lambda: len(_events(rt, ahead_id, EventKind.TOOL)) >= 1, 20, "ahead at work")
        ahead.freeze()
        frozen_after = rt.events(ahead_id)[-1]
        wait_for(lambda: bool(_events(rt, ahead_id, EventKind.REQUEUED)), 20, "reaped")
        wait_for(
            lambda: all(rt.status(i).status.is_terminal for i in (honest_id, behind_id)),  # type: ignore[union-attr]
            30,
            "the others finished",
        )
        ahead.thaw()
        wait_for(lambda: rt.status(ahead_id).status.is_terminal, 30, "ahead finished")  # type: ignore[union-attr]
        wait_for(lambda: ahead.lease_lost() >= 1, 10, "the thawed worker's lease lost")
    finally:
        for worker in workers:
            worker.stop()
    # Nobody stole a live lease: the honest and the behind worker's runs, one claim each.
    for run_id in (honest_id, behind_id):
        assert len(_events(rt, run_id, EventKind.CLAIMED)) == 1
        assert _events(rt, run_id, EventKind.REQUEUED) == []
        assert rt.status(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    # The frozen ahead worker did not keep its lease: reaped after about one lease.
    (requeued,) = _events(rt, ahead_id, EventKind.REQUEUED)
    assert requeued.payload["cause"] == "stale"
    held_for = (requeued.created_at - frozen_after.created_at).total_seconds()
    assert held_for < LEASE + LEASE / 4 + 1.5, held_for
    assert rt.status(ahead_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    report = audit(rt.store, stranded_after=5)
    assert report.ok, report.summary()
    rt.close()
