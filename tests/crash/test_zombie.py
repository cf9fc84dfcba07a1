"""A worker frozen past its lease while its runs are requeued and finished elsewhere, then
thawed: it writes nothing more; each of its segments stops on a refused write."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus, TerminationReason
from tenure.audit import audit, read_ledger

from ..apps import make_app
from ._workers import spawn, wait_for

LEASE = 1.0
STEP = 0.8  # shorter than the lease: the zombie held a live lease when it was frozen
pytestmark = pytest.mark.slow


def test_a_thawed_zombie_writes_nothing(db_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    rt = make_app(db_url, str(ledger), LEASE)
    read = {"call": [{"tool": "read"}]}
    in_model = RunRequest(
        prompt="z", model="scripted", tools=["read"], script=[read, {"sleep": STEP}, {"say": "ok"}]
    )
    in_write = RunRequest(
        prompt="z",
        model="scripted",
        tools=["read", "pay"],
        script=[
            read,
            {"call": [{"tool": "pay", "args": {"amount": 1, "hold": STEP}}]},
            {"say": "ok"},
        ],
    )
    model_ids = rt.enqueue_many([in_model, in_model])
    write_id = rt.enqueue(in_write)
    ids = [*model_ids, write_id]
    zombie = spawn(db_url, ledger, "--concurrency", "3", lease=LEASE)
    survivor = None
    try:
        # Freeze it while two runs wait for the model and one is inside its write.
        wait_for(
            lambda: (
                all(_tools(rt, i) == ["read"] for i in model_ids)
                and any(e.run_id == write_id for e in read_ledger(ledger))
            ),
            20,
            "every run at its point",
        )
        zombie.freeze()
        survivor = spawn(db_url, ledger, "--concurrency", "3", lease=LEASE)
        wait_for(lambda: all(rt.status(i).status.is_terminal for i in ids), 30, "runs ended")  # type: ignore[union-attr]
        before = {i: rt.events(i) for i in ids}
        ledger_before = read_ledger(ledger)
        zombie.thaw()
        wait_for(lambda: zombie.lease_lost() >= 3, 20, "the zombie saw its leases lost")
        zombie.stop()
        after = {i: rt.events(i) for i in ids}
    finally:
        zombie.stop()
        if survivor is not None:
            survivor.stop()
    assert after == before, "the thawed zombie wrote to a run it no longer held"
    assert read_ledger(ledger) == ledger_before
    for run_id in model_ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
    run = rt.status(write_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    report = audit(rt.store, ledger, worker_logs=[zombie.log], stranded_after=5)
    assert report.ok, report.summary()
    assert report.refused_writes == 3  # two heartbeats and one fence clear, all refused
    rt.close()


def _tools(rt: tenure.Runtime, run_id: str) -> list[str]:
    return [e.payload["name"] for e in rt.events(run_id) if e.kind is EventKind.TOOL]
