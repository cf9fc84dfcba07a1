"""An OpenAI Agents SDK agent under `tenure crashtest`: real worker processes SIGKILLed after
its handoff and inside its write, on both stores. Every case
completes with the output of an uninterrupted run and the refund in the ledger once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import RunStatus
from tenure.testing import crashtest

from ..crashtest import _ledger
from . import agents_app

pytestmark = pytest.mark.slow

SCENARIO = {
    "name": "refund",
    "agent": "triage",
    "input": {"prompt": "refund order o7"},
    "script": agents_app.SCRIPT,
}
# Its steps: model, handoff-billing, model, lookup, model, refund, model. Killed after the
# handoff (the billing agent must come back from the journal, not triage again), inside the
# write before it ran and after it ran before its event (its probe finds it in the ledger).
POINTS = [
    "step 3 (step handoff-billing@1)",
    "write-before refund@5",
    "write-after refund@5",
]


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def test_an_openai_agents_run_killed_at_each_step_completes_once(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(
        agents_app.rt, [SCENARIO], points=POINTS, database=db_url, workdir=tmp_path / "w"
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
            assert _ledger.seen("refund", f"{result.run_id}:5") == 1, result.point
        finally:
            rt.close()
    assert outputs == {'"refunded o7"'}
