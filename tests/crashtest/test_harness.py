"""`tenure.testing.crashtest` on real worker processes SIGKILLed at every crash point: it
passes a correct app and names the violated property of each deliberately broken one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.testing import POINT_KINDS, PROPERTIES, CrashReport, crashtest

from . import _ledger, broken_app, good_app

pytestmark = pytest.mark.slow

CHARGE: dict[str, Any] = {
    "name": "charge",
    "prompt": "charge the customer",
    "tools": ["charge"],
    "script": [{"call": [{"tool": "charge", "args": {"amount": 5}}]}, {"say": "charged"}],
}
REFUND: dict[str, Any] = {
    "name": "refund",
    "prompt": "refund the customer",
    "tools": ["refund"],
    "script": [{"call": [{"tool": "refund", "args": {"amount": 3}}]}, {"say": "refunded"}],
}


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def killed_kinds(report: CrashReport) -> set[str]:
    """The kinds of the points whose worker was really SIGKILLed there."""
    return {
        r.point.split(" ")[0]
        for r in report.results
        if r.point != "reference" and r.verdicts["prefix continuation"].ok is not None
    }


def test_a_correct_app_passes_every_point(db_url: str, tmp_path: Path) -> None:
    report = crashtest(good_app.rt, [CHARGE, REFUND], database=db_url, workdir=tmp_path / "w")
    assert report.ok, report.violations()
    # Every point a built-in loop run reaches (it creates no child run: `child` is tested
    # with an agent function in test_agent.py).
    assert killed_kinds(report) == set(POINT_KINDS) - {"child"}
    refund_cases = [r for r in report.results if r.scenario == "refund"]
    assert all(r.verdicts["consume-once"].ok for r in refund_cases)
    assert {p for r in report.results for p in r.verdicts} == set(PROPERTIES)


def test_a_charge_that_ignores_its_idempotency_key_is_caught(db_url: str, tmp_path: Path) -> None:
    """Killed after the charge returned, before its event: the run is requeued (an
    idempotent write) and charges again under the same key, which the ledger ignores."""
    report = crashtest(
        broken_app.rt, [CHARGE], points="write-after", database=db_url, workdir=tmp_path / "w"
    )
    assert not report.ok
    (caught,) = report.violated("effects")
    assert caught.point == "write-after charge@2"
    assert "written 2 times" in caught.verdicts["effects"].detail
    reference = report.results[0]
    assert reference.point == "reference" and reference.ok


def test_an_approval_flow_outside_tenure_fires_once_per_decider(
    db_url: str, tmp_path: Path
) -> None:
    """The handler refunds before tenure's decision; its first click decides before the
    others have even read the run. The harness holds each decider just before its decision
    is written until all three are there, so every click reads "waiting" and refunds: the
    reference and the case killed while waiting are both caught, three refunds each."""
    report = crashtest(
        broken_app.rt, [REFUND], points="waiting", database=db_url, workdir=tmp_path / "w"
    )
    caught = report.violated("consume-once")
    assert [r.point for r in caught] == ["reference", "waiting 2"], report.violations()
    for case in caught:
        detail = case.verdicts["consume-once"].detail
        assert "the held call refund ran 3 times for 3 deciders" in detail, detail
