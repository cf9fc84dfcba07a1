"""Runs recorded by the version before agent functions resume unchanged under this one.

`tests/fixtures/runs_before_agent_functions.sql` is a SQLite database written by tenure at
commit 0238807 (before agent functions), dumped as SQL: a run requeued after its first tool
step, a run waiting for approval, a run in doubt with its probe-able fence standing, and a
run never started. This version opens it (migrating it if it must), and each run goes on
from where its journal stands, with no step repeated.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import tenure
from tenure import EventKind, Probe, RunStatus, ToolEffect
from tenure.audit import audit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs_before_agent_functions.sql"


def old_database(tmp_path: Path) -> str:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(FIXTURE.read_text(encoding="utf-8"))
    con.close()
    return f"sqlite:///{path}"


def test_runs_in_flight_from_the_previous_version_resume(tmp_path: Path) -> None:
    rt = tenure.Runtime(old_database(tmp_path), backoff_base=0.01, backoff_cap=0.01)
    looked_up: list[str] = []
    paid: list[int] = []

    @rt.tool
    def lookup(order: str) -> dict:
        """Look an order up."""
        looked_up.append(order)
        return {"order": order, "total": 10}

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    def was_paid(ctx: tenure.ToolContext, amount: int) -> Probe:
        return Probe.done({"paid": amount})

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, probe=was_paid)
    def pay(ctx: tenure.ToolContext, amount: int) -> dict:
        """Pay."""
        paid.append(amount)
        return {"paid": amount}

    by_key = {r.idempotency_key: r for r in rt.runs(limit=10)}
    assert set(by_key) == {"old-resume", "old-approve", "old-doubt", "old-fresh"}
    assert by_key["old-approve"].status is RunStatus.WAITING_FOR_APPROVAL
    assert by_key["old-doubt"].pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    rt.approve(by_key["old-approve"].id, True, decided_by="ana")
    rt.work(concurrency=2, burst=True)
    outputs = {key: rt.status(run.id) for key, run in by_key.items()}
    for key, run in outputs.items():
        assert run is not None and run.status is RunStatus.COMPLETED, (key, run)
    assert {k: r.output for k, r in outputs.items()} == {  # type: ignore[union-attr]
        "old-resume": "resumed",
        "old-approve": "approved and refunded",
        "old-doubt": "paid",
        "old-fresh": "fresh",
    }
    assert looked_up == []  # the recorded tool step was not run again
    assert paid == []  # the in-doubt write was settled by its probe, not repeated
    probes = [e for e in rt.events(by_key["old-doubt"].id) if e.kind is EventKind.PROBE]
    assert [p.payload["verdict"] for p in probes] == ["done"]
    report = audit(rt.store)
    assert report.ok, report.summary()
    rt.close()
