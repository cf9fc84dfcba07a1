"""An OpenAI Agents SDK agent under `tenure crashtest`: real worker processes SIGKILLed after
its handoff and inside its write, on both stores. Every case
completes with the output of an uninterrupted run and the refund in the ledger once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.testing import crashtest

from . import agents_app
from .conftest import each_case_completed_once

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("refund_ledger")]

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


def test_an_openai_agents_run_killed_at_each_step_completes_once(
    db_url: str, tmp_path: Path
) -> None:
    report = crashtest(
        agents_app.rt, [SCENARIO], points=POINTS, database=db_url, workdir=tmp_path / "w"
    )
    assert each_case_completed_once(report, POINTS, 5) == {'"refunded o7"'}
