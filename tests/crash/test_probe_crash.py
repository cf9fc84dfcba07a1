"""SIGKILL inside a write whose tool has a probe (SPEC §16), with real worker processes: the
run goes back in doubt instead of to a person, the probe tells, and the ledger has the
payment exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenure import EventKind, RunRequest, RunStatus
from tenure.audit import audit, read_ledger

from ..apps import make_app
from ._workers import kill_then_resume, spawn, wait_for

LEASE = 1.0
pytestmark = pytest.mark.slow


def _payment(args: dict[str, Any]) -> RunRequest:
    return RunRequest(
        prompt="pay",
        model="scripted",
        tools=["pay_probed"],
        script=[{"call": [{"tool": "pay_probed", "args": args}]}, {"say": "paid"}],
    )


def _marks(ledger: Path) -> list[str]:
    marks = Path(f"{ledger}.marks")
    return marks.read_text().splitlines() if marks.exists() else []


@pytest.mark.parametrize("paid_before_the_kill", [True, False], ids=["done", "not_done"])
def test_sigkill_inside_a_probed_write_is_resolved_by_its_probe(
    db_url: str, tmp_path: Path, paid_before_the_kill: bool
) -> None:
    ledger = tmp_path / "ledger"
    gate = tmp_path / "gate"
    rt = make_app(db_url, str(ledger), LEASE)
    # done: the payment is made, then the worker holds (and is killed) before its event;
    # not_done: the worker is killed while the payment waits for its gate.
    args = {"amount": 9, "hold": 30.0} if paid_before_the_kill else {"amount": 9, "gate": str(gate)}
    run_id = rt.enqueue(_payment(args))
    if paid_before_the_kill:
        reached, what = (lambda: len(read_ledger(ledger)) == 1), "the payment"
    else:
        reached, what = (lambda: any("started" in m for m in _marks(ledger))), "the write"
    kill_then_resume(
        db_url,
        ledger,
        LEASE,
        reached,
        what,
        ended=lambda: rt.status(run_id).status.is_terminal,  # type: ignore[union-attr]
        after_kill=gate.touch,  # the retried write, if any, goes through at once
    )
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    entries = read_ledger(ledger)
    assert len(entries) == 1, entries  # exactly once, either way
    probes = [e.payload for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    assert [p["verdict"] for p in probes] == ["done" if paid_before_the_kill else "not_done"]
    assert probes[0]["idempotency_key"] == entries[0].idempotency_key
    causes = [e.payload.get("cause") for e in rt.events(run_id) if e.kind is EventKind.REQUEUED]
    assert causes == ["in_doubt"]
    report = audit(rt.store, ledger)
    assert report.ok, report.summary()
    rt.close()


def test_a_worker_frozen_inside_a_probed_write_cannot_pay_after_the_probe(
    db_url: str, tmp_path: Path
) -> None:
    """A probe's `not_done` holds only if the interrupted call can no longer land. A worker
    frozen inside the payment (before its effect) wakes after the probe said `not_done` and
    the payment was made again: the outside system refuses it, because the probe raised the
    key's floor to its own fencing token (tests/apps.py `FencedLedger`, the pattern the
    docs recommend). The payment is in the ledger once, and the audit passes."""
    ledger = tmp_path / "ledger"
    gate = tmp_path / "gate"
    rt = make_app(db_url, str(ledger), LEASE)
    args = {"amount": 9, "gate": str(gate)}
    run_id = rt.enqueue(_payment(args))
    zombie = spawn(db_url, ledger, "--concurrency", "1", lease=LEASE)
    survivor = None
    try:
        wait_for(lambda: any("started" in m for m in _marks(ledger)), 20, "the write")
        zombie.freeze()
        gate.touch()  # the frozen payment will go through its gate as soon as it wakes
        survivor = spawn(db_url, ledger, "--concurrency", "1", lease=LEASE)
        wait_for(lambda: rt.status(run_id).status.is_terminal, 30, "the run ended")  # type: ignore[union-attr]
        assert len(read_ledger(ledger)) == 1
        zombie.thaw()
        wait_for(lambda: zombie.lease_lost() >= 1, 20, "the zombie saw its lease lost")
    finally:
        zombie.stop()
        if survivor is not None:
            survivor.stop()
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert len(read_ledger(ledger)) == 1, read_ledger(ledger)  # the thawed payment was refused
    probes = [e.payload["verdict"] for e in rt.events(run_id) if e.kind is EventKind.PROBE]
    assert probes == ["not_done"]
    report = audit(rt.store, ledger, worker_logs=[zombie.log])
    assert report.ok, report.summary()
    rt.close()
