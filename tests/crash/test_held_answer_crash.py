"""SIGKILL between an agent function's last model answer and the run's end (SPEC §20): the
answer is held there, to be recorded with the end in one transaction, as the built-in
loop's last answer is. A crash loses it as it loses the loop's: the next attempt asks the
model again, records exactly one model step, and counts the tokens as the loop does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure import EventKind, RunRequest, RunStatus
from tenure.audit import audit

from ..apps import make_app
from ._workers import kill_then_resume

LEASE = 1.0
USAGE = {"input_tokens": 7, "output_tokens": 3}
pytestmark = pytest.mark.slow


def test_sigkill_while_an_answer_is_held_asks_the_model_again_once(
    db_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    marks = Path(f"{ledger}.marks")
    rt = make_app(db_url, str(ledger), LEASE)
    run_id = rt.enqueue(
        RunRequest(
            agent="answered",
            input={},
            model="scripted",
            script=[{"say": "forty-two", "usage": USAGE}],
            max_tokens=1000,  # a budget: the call goes through the tree's ledger
        )
    )

    def nothing_recorded() -> None:
        # Nothing of the answer was recorded: it was held for the run's end.
        assert [e.kind for e in rt.events(run_id) if e.kind is EventKind.LLM] == []

    kill_then_resume(
        db_url,
        ledger,
        LEASE,
        lambda: marks.exists() and "answered" in marks.read_text(),
        "the answer",
        ended=lambda: rt.status(run_id).status.is_terminal,  # type: ignore[union-attr]
        after_kill=nothing_recorded,
    )
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    assert run.output == '"forty-two"'
    events = rt.events(run_id)
    models = [e for e in events if e.kind is EventKind.LLM]
    assert [(e.payload["position"], e.payload["step"]) for e in models] == [(0, "model")]
    # It rode with the end: the same transaction as the completion's own events.
    kinds = [e.kind for e in events]
    assert kinds[-2:] == [EventKind.LLM, EventKind.ASSEMBLED], kinds
    # The loop's accounting of a crash between an answer and its record: the run's own usage
    # (and so its budget on the next attempt) counts the recorded answer; the tree's ledger
    # counts every call made, settled when the call returned (the lost one too).
    assert (run.input_tokens, run.output_tokens) == (7, 3)
    assert models[0].payload["usage"]["input_tokens"] == 7
    budget = rt.budget(run_id)
    assert budget is not None and (budget.spent_tokens, budget.reserved_tokens) == (20, 0)
    report = audit(rt.store, ledger)
    assert report.ok, report.summary()
    rt.close()
