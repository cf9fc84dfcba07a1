"""`tenure crashtest` on agent functions (SPEC §20): real worker processes SIGKILLed after
every step of the function and inside each of its writes, on both stores. Every case must
complete with each write in the outside ledger exactly once, the replayed `ctx.now` and
`ctx.uuid` giving every write the values recorded first, and the audit clean."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import EventKind, RunStatus
from tenure.audit import LedgerEntry, audit
from tenure.testing import CrashReport, crashtest

from . import _ledger, agent_app

pytestmark = pytest.mark.slow

SETTLE: dict[str, Any] = {
    "name": "settle",
    "agent": "settle",
    "input": {"order_id": "o7", "amount": 700},
    "script": [{"say": "pay it"}],
}
GIVE_BACK: dict[str, Any] = {
    "name": "give back",
    "agent": "give_back",
    "input": {"order_id": "o8", "amount": 300},
}
SHIP: dict[str, Any] = {
    "name": "ship",
    "agent": "ship",
    "input": {"order_id": "o9"},
    "submit": {"city": "Oslo"},
}
# settle's steps: now, uuid, lookup, model, pay, book, note.
SETTLE_STEPS = ["now", "uuid", "tool lookup", "model default", "tool pay", "step book", "step note"]


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def killed(report: CrashReport) -> list[str]:
    """The labels of the points whose worker was really SIGKILLed there."""
    return [
        r.point
        for r in report.results
        if r.point != "reference" and r.verdicts["prefix continuation"].ok is not None
    ]


def runs_of(report: CrashReport) -> Iterator[tuple[tenure.Runtime, str]]:
    """(a Runtime on the case's database, the case's run id) for every case."""
    opened: dict[str, tenure.Runtime] = {}
    try:
        for r in report.results:
            if r.database not in opened:
                opened[r.database] = tenure.Runtime(r.database)
            yield opened[r.database], r.run_id
    finally:
        for rt in opened.values():
            rt.close()


def test_every_step_and_write_of_an_agent_function_survives_a_kill(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(agent_app.rt, [SETTLE], database=db_url, workdir=tmp_path / "w")
    assert report.ok, report.violations()
    points = killed(report)
    # A step point after each of the function's steps, named by its position and kind.
    steps = sorted(
        (int(m[2]), m[1])
        for p in points
        if (m := re.fullmatch(r"step \d+ \((.+)@(\d+)\)", p)) is not None
    )
    assert steps == list(enumerate(SETTLE_STEPS))
    # Inside each write: the tool's (key RUN_ID:4) and both ctx.step writes (5, 6).
    for where in ("pay@4", "book@5", "note@6"):
        for kind in ("write-before", "write-after", "write-timeout"):
            assert f"{kind} {where}" in points
    assert any(p.startswith("drain ") for p in points)

    entries = _ledger.entries()
    seen = Counter((e["tool"], e["key"]) for e in entries)
    for rt, run_id in runs_of(report):
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, (run_id, run)
        assert run.output == '{"order_id": "o7", "outcome": "paid"}'
        values = {
            e.payload["step"]: e.payload["result"]
            for e in rt.events(run_id)
            if e.kind is EventKind.STEP and e.payload["step"] in ("now", "uuid")
        }
        for tool, position in (("pay", 4), ("book", 5), ("note", 6)):
            key = f"{run_id}:{position}"
            assert seen[(tool, key)] == 1, f"{tool} {key} written {seen[(tool, key)]} times"
            (entry,) = [e for e in entries if e["key"] == key]
            assert entry["ref"] == values["uuid"], f"{tool} got another uuid after a replay"
        (booked,) = [e for e in entries if e["key"] == f"{run_id}:5"]
        assert booked["at"] == values["now"]
    # The audit, with the ledger of the non-idempotent writes as the outside system saw
    # them, each with the fencing token of the segment that made it (an idempotent write
    # may run again under a later token, and converge: `note` is checked above).
    ledger = [
        LedgerEntry(e["key"].rpartition(":")[0], e["key"], e["token"])
        for e in entries
        if e["tool"] in ("pay", "book")
    ]
    for database in {r.database for r in report.results}:
        rt = tenure.Runtime(database)
        try:
            mine = [e for e in ledger if rt.status(e.run_id) is not None]
            found = audit(rt.store, mine)
            assert found.violations == [], found.violations
            assert found.ledger_entries == len(mine) > 0
        finally:
            rt.close()


def test_a_person_decides_an_agent_function_once(db_url: str, tmp_path: Path) -> None:
    """`ctx.approve`, then a tool that needs its own approval: two holds, each decided by
    three deciders at once; killed while waiting, after the resume, and after each step."""
    report = crashtest(
        agent_app.rt,
        [GIVE_BACK],
        points="waiting,resume,step",
        database=db_url,
        workdir=tmp_path / "w",
    )
    assert report.ok, report.violations()
    points = killed(report)
    assert {"waiting 0", "resume 0", "waiting 1", "resume 1"} <= set(points)
    assert all(r.verdicts["consume-once"].ok for r in report.results)
    for rt, run_id in runs_of(report):
        run = rt.status(run_id)
        assert run is not None and run.output == '"refunded"'
        assert _ledger.seen("refund", f"{run_id}:1") == 1


def test_a_step_that_is_not_idempotent_is_caught(db_url: str, tmp_path: Path) -> None:
    """Killed after a `ctx.step` write returned, before its event: declared idempotent, the
    step runs again under the same key, and the ledger sees it twice."""
    scenario = {"name": "careless", "agent": "careless", "input": {"text": "hi"}}
    report = crashtest(
        agent_app.rt, [scenario], points="write-after", database=db_url, workdir=tmp_path / "w"
    )
    (caught,) = report.violated("effects")
    assert caught.point == "write-after careless_note@0"
    assert "written 2 times" in caught.verdicts["effects"].detail


def test_an_agent_function_that_begins_by_asking_a_person(db_url: str, tmp_path: Path) -> None:
    """`ctx.input` first: every step after it runs in the winning decider's inline
    continuation, never in a worker; the deciders are killed at those points (a decider
    does not drain: the drain point is a worker's, and this run has none)."""
    report = crashtest(agent_app.rt, [SHIP], database=db_url, workdir=tmp_path / "w")
    assert report.ok, report.violations()
    points = killed(report)
    assert {"waiting 0", "resume 0", "write-after note@1"} <= set(points)
    assert not any(p.startswith("drain") for p in report_points(report))
    for rt, run_id in runs_of(report):
        run = rt.status(run_id)
        assert run is not None and run.output == '"Oslo"'
        assert _ledger.seen("note", f"{run_id}:1") == 1


def report_points(report: CrashReport) -> list[str]:
    return [r.point for r in report.results]


FAN_OUT: dict[str, Any] = {
    "name": "fan out",
    "agent": "fan_out",
    "input": {"orders": ["o1", "o2", "o3"]},
}


def test_a_kill_between_creating_a_child_and_recording_it_leaves_one_child(
    db_url: str, tmp_path: Path
) -> None:
    """SPEC §21: a worker SIGKILLed after the commit that created a child (`ctx.child`) or
    the children of a `ctx.map`, before the step that records them: the next segment finds
    them under their keys PARENT_ID:POSITION; no child is created twice, and the run
    completes."""
    report = crashtest(
        agent_app.rt, [FAN_OUT], points="child", database=db_url, workdir=tmp_path / "w"
    )
    assert report.ok, report.violations()
    points = killed(report)
    assert "child 0" in points and "child 1" in points, points
    cases = 0
    for rt, run_id in runs_of(report):
        cases += 1
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, (run_id, run)
        assert run.output == '["picked o1", "picked o2", "picked o3"]'
        children = rt.runs(parent=run_id)
        keys = sorted(c.idempotency_key or "" for c in children)
        assert keys == [f"{run_id}:{p}" for p in range(3)], keys
        assert all(c.status is RunStatus.COMPLETED for c in children)
        assert audit(rt.store).ok
    assert cases >= 3
