"""A pydantic-ai agent under `tenure crashtest`: real worker processes SIGKILLed after each
of its steps and inside its write, on both stores. Every case completes with the output of
an uninterrupted run and the refund in the outside ledger exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.testing import crashtest

from . import pydantic_app
from .conftest import each_case_completed_once

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("refund_ledger")]

SCENARIO = {
    "name": "refund",
    "agent": "refunds",
    "input": {"prompt": "refund order o7", "deps": {"currency": "EUR"}},
    "script": pydantic_app.SCRIPT,
}
# Its steps: model, lookup, model, refund, model. Killed inside the write (before it ran,
# and after it ran but before its event: its probe finds it in the ledger), and after the
# refund's event (every step replayed, none repeated; the last model answer is recorded
# with the run's end, so there is no point after it).
POINTS = [
    "write-before refund@3",
    "write-after refund@3",
    "step 5 (step refund@3)",
]


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
    assert each_case_completed_once(report, POINTS, 3) == {
        '{"order_id": "o7", "refunded": 700, "currency": "EUR"}'
    }
