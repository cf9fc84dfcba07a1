"""The loopback model server of tests/providers, for the integrations' tests; and what the
crash tests of both frameworks share: the outside ledger, and the audit of each case."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import RunStatus
from tenure.testing import CrashReport
from tests.crashtest import _ledger
from tests.providers.conftest import chat_server, endpoint, make_provider

__all__ = ["chat_server", "endpoint", "make_provider"]


@pytest.fixture
def refund_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The outside ledger every worker process of a crash test writes its refunds to."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(_ledger.LEDGER_VARIABLE, str(path))
    yield path


def each_case_completed_once(
    report: CrashReport, points: list[str], refund_position: int
) -> set[str | None]:
    """Every point was killed at, every case's run completed and refunded exactly once (by
    its idempotency key, RUN_ID:POSITION); the outputs the cases ended with."""
    assert report.ok, report.violations()
    assert sorted(r.point for r in report.results if r.point != "reference") == sorted(points)
    outputs = set()
    for result in report.results:
        rt = tenure.Runtime(result.database)
        try:
            run = rt.status(result.run_id)
            assert run is not None and run.status is RunStatus.COMPLETED, (result.point, run)
            outputs.add(run.output)
            key = f"{result.run_id}:{refund_position}"
            assert _ledger.seen("refund", key) == 1, result.point
        finally:
            rt.close()
    return outputs
