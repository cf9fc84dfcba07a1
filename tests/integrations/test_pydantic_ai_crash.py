"""A pydantic-ai agent under `tenure crashtest`: real worker processes SIGKILLed after each
of its steps and inside its write, on both stores. Every case completes with the output of
an uninterrupted run and the refund in the outside ledger exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import RunStatus
from tenure.testing import crashtest

from ..crashtest import _ledger
from . import pydantic_app

pytestmark = pytest.mark.slow

SCENARIO = {
    "name": "refund",
    "agent": "refunds",
    "input": {"prompt": "refund order o7", "deps": {"currency": "EUR"}},
    "script": pydantic_app.SCRIPT,
}
# Its steps: model, lookup, model, refund, model. Killed inside the write (before it ran,
# and after it ran but before its event: its probe finds it in the ledger), and after the
# last model request (every step replayed, none repeated).
POINTS = [
    "write-before refund@3",
    "write-after refund@3",
    "step 6 (model default@4)",
]


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def test_a_pydantic_ai_agent_killed_at_each_step_completes_once(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(
        pydantic_app.rt,
        [SCENARIO],
        points=POINTS,
        database=db_url,
        workdir=tmp_path / "w",
    )
    assert report.ok, report.violations()
    assert sorted(r.point for r in report.results if r.point != "reference") == sorted(POINTS)
    outputs = set()
    for result in report.results:
        rt = tenure.Runtime(result.database)
        try:
            run = rt.status(result.run_id)
            assert run is not None and run.status is RunStatus.COMPLETED, (result.point, run)
            outputs.add(run.output)
            assert _ledger.seen("refund", f"{result.run_id}:3") == 1, result.point
        finally:
            rt.close()
    assert outputs == {'{"order_id": "o7", "refunded": 700, "currency": "EUR"}'}
