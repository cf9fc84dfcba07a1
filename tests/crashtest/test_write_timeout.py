"""The `write-timeout` crash point: a write that ran but did not answer within its timeout,
and a worker killed right after it recorded what it made of that. On both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure import EventKind, RunStatus
from tenure.store import open_store
from tenure.testing import crashtest

from . import _ledger, good_app

pytestmark = pytest.mark.slow

PAY: dict[str, Any] = {
    "name": "pay",
    "prompt": "pay the supplier",
    "tools": ["pay"],
    "script": [{"call": [{"tool": "pay", "args": {"amount": 9}}]}, {"say": "paid"}],
}
CHARGE: dict[str, Any] = {
    "name": "charge",
    "prompt": "charge the customer",
    "tools": ["charge"],
    "script": [{"call": [{"tool": "charge", "args": {"amount": 5}}]}, {"say": "charged"}],
}


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def test_an_async_write_that_timed_out_is_settled_by_its_probe_after_the_kill(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(
        good_app.rt, [PAY], points="write-timeout", database=db_url, workdir=tmp_path
    )
    assert report.ok, report.violations()
    reference, case = report.results
    assert reference.ok and reference.point == "reference"
    assert case.point == "write-timeout pay@2"
    assert case.verdicts["prefix continuation"].ok is True  # the worker was really killed
    store = open_store(case.database)
    try:
        run = store.get_run(case.run_id)
        events = store.events(case.run_id)
    finally:
        store.close()
    assert run is not None and run.status is RunStatus.COMPLETED
    # Sent back in doubt by the worker that saw the time-out, then asked of the ledger by
    # the next one: the payment is recorded from the probe, never made twice.
    requeued = [e.payload for e in events if e.kind is EventKind.REQUEUED]
    assert [r["cause"] for r in requeued] == ["in_doubt"]
    (probe,) = [e.payload for e in events if e.kind is EventKind.PROBE]
    assert probe["verdict"] == "done"
    (tool,) = [e.payload for e in events if e.kind is EventKind.TOOL]
    assert tool["resolved_by"] == "probe" and tool["error"] is None
    payments = [e for e in _ledger.entries() if e["tool"] == "pay"]
    assert len(payments) == 2  # one for the reference run, one for the crashed case
    assert len({p["key"] for p in payments}) == 2


def test_a_sync_write_held_past_its_timeout_dies_and_is_continued(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(
        good_app.rt, [CHARGE], points="write-timeout", database=db_url, workdir=tmp_path
    )
    assert report.ok, report.violations()
    (case,) = report.results[1:]
    assert case.point == "write-timeout charge@2"
    assert case.verdicts["prefix continuation"].ok is True
    assert case.verdicts["effects"].ok is True
