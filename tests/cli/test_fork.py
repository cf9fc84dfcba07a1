"""`tenure fork RUN --at SEQUENCE [--dry-run] [--allow-repeat-writes]` (SPEC §23)."""

from __future__ import annotations

import tenure
from tenure import EventKind, RunStatus

from .conftest import INVOICE_SCRIPT, Cli, one_line_error


def _invoiced(cli: Cli, runtime: tenure.Runtime) -> tuple[str, int]:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    assert cli("worker", "--burst").code == 0
    sent = next(e.sequence for e in runtime.events(run_id) if e.kind is EventKind.TOOL)
    return run_id, sent


def test_fork_dry_run_prints_the_plan_and_stores_nothing(cli: Cli, runtime: tenure.Runtime) -> None:
    run_id, sent = _invoiced(cli, runtime)
    result = cli("fork", run_id, "--at", str(sent - 1), "--dry-run")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"fork of run {run_id} (completed) at {sent - 1}"
    assert any(
        line.startswith("would repeat: send_invoice") and f"{run_id}:{sent - 1}" in line
        for line in lines
    ), lines
    assert lines[-1].startswith("refused: ")
    plan = cli("fork", run_id, "--at", str(sent + 1), "--dry-run", "--json").json()
    assert plan["repeated_writes"] == [] and plan["refused"] is None
    assert [k["sequence"] for k in plan["kept"]] == list(range(sent + 1))
    assert len(runtime.runs()) == 1


def test_fork_refuses_a_repeated_write_unless_allowed(cli: Cli, runtime: tenure.Runtime) -> None:
    run_id, sent = _invoiced(cli, runtime)
    refused = cli("fork", run_id, "--at", str(sent - 1))
    assert refused.code == 1
    assert "send_invoice" in one_line_error(refused)
    assert len(runtime.runs()) == 1

    forked = cli("fork", run_id, "--at", str(sent - 1), "--allow-repeat-writes")
    assert forked.code == 0, forked.err
    fork_id = forked.out.strip()
    fork = runtime.status(fork_id)
    assert fork is not None and fork.status is RunStatus.QUEUED
    assert fork.forked_from == tenure.ForkedFrom(run_id, sent - 1)
    shown = cli("status", fork_id)
    assert "forked_from" in shown.out and f"{run_id} at {sent - 1}" in shown.out


def test_fork_bad_input_is_one_line(cli: Cli, runtime: tenure.Runtime) -> None:
    unknown = cli("fork", "nope", "--at", "1")
    assert unknown.code == 1 and "nope" in one_line_error(unknown)
    queued = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    not_ended = cli("fork", queued, "--at", "1")
    assert not_ended.code == 2 and "is queued" in one_line_error(not_ended)
    assert cli("fork", queued, "--at", "0").code == 2
    assert cli("fork", queued).code == 2  # --at is required
    assert len(runtime.runs()) == 1
