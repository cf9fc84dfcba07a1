"""The audit itself: silent on what tenure writes, loud on each kind of broken promise."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tenure
from tenure import RunRequest, ToolContext, ToolEffect
from tenure.audit import LedgerEntry, audit
from tenure.store import open_store
from tests._raw import raw_execute


def _app(make_runtime: Callable[..., tenure.Runtime], ledger: list[LedgerEntry]) -> tenure.Runtime:
    rt = make_runtime(max_requeues=1)

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def charge(ctx: ToolContext, amount: int) -> int:
        ledger.append(LedgerEntry(ctx.run_id, ctx.idempotency_key, ctx.fencing_token))
        return amount

    @rt.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def save(ctx: ToolContext) -> str:
        return ctx.idempotency_key

    return rt


def _request(*turns: dict[str, Any]) -> RunRequest:
    return RunRequest(prompt="p", model="scripted", tools=["charge", "save"], script=list(turns))


CHARGE: dict[str, Any] = {"call": [{"tool": "charge", "args": {"amount": 5}}, {"tool": "save"}]}


def _workload(rt: tenure.Runtime) -> list[str]:
    ids = rt.enqueue_many(
        [
            _request(CHARGE, {"say": "done"}),
            _request(CHARGE, {"fail": "server_error", "attempts": [0]}, {"say": "ok"}),
            _request({"fail": "auth"}, {"say": "never"}),
            _request({"fail": "rate_limit"}, {"say": "never"}),  # budget of 1 spent
            _request({"say": "later"}),
        ]
    )
    rt.cancel(ids[4])
    _drain(rt, ids)
    assert rt.redrive(ids[2])
    _drain(rt, ids)
    return ids


def _drain(rt: tenure.Runtime, ids: list[str]) -> None:
    deadline = time.monotonic() + 20
    while not all(rt.status(i).status.is_terminal for i in ids):  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        rt.work(concurrency=2, burst=True, poll_interval=0.05)
        time.sleep(0.05)


def test_the_audit_passes_what_tenure_writes(
    make_runtime: Callable[..., tenure.Runtime],
) -> None:
    ledger: list[LedgerEntry] = []
    rt = _app(make_runtime, ledger)
    _workload(rt)
    report = audit(rt.store, ledger, max_requeues=1, stranded_after=5)
    assert report.ok, report.summary()
    assert report.runs == 5 and report.ledger_entries == 2
    assert report.outcomes == {
        "completed": 2,
        "failed/not_retryable": 1,
        "failed/retries_exhausted": 1,
        "cancelled": 1,
    }


def test_the_audit_passes_interactive_runs_and_catches_a_stale_write_in_one(
    make_runtime: Callable[..., tenure.Runtime], db_url: str
) -> None:
    # An interactive run is held from its first write under token 1, with no `claimed`
    # event: its `request` event is under token 1, and so is each of its steps.
    ledger: list[LedgerEntry] = []
    rt = _app(make_runtime, ledger)
    results = [
        rt.run(RunRequest(prompt="hi", model="scripted", script=[{"say": "hello"}])),
        rt.run(_request(CHARGE, {"say": "done"})),
        rt.run(_request({"fail": "auth"})),
        rt.run(_request(CHARGE, {"fail": "server_error"})),
    ]
    assert [r.outcome for r in results] == ["completed", "completed", "failed", "failed"]
    report = audit(rt.store, ledger, max_requeues=1)
    assert report.ok, report.summary()
    assert report.runs == 4 and report.ledger_entries == 2
    command = [sys.executable, "-m", "tenure", "--database", db_url, "audit"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "violations 0" in done.stdout, done.stdout + done.stderr

    # A write under a token the run never held is still a violation in an interactive run,
    # and so is a `request` event under any token but a queued (0) or interactive (1) one.
    run_id = results[1].run_id
    raw_execute(
        db_url,
        "UPDATE tenure_events SET lease_token = 2 WHERE run_id = ? AND kind = 'tool'",
        run_id,
    )
    report = audit(rt.store, ledger, max_requeues=1)
    text = "\n".join(report.violations)
    assert f"run {run_id} event" in text and "written under token 2, the run's token was 1" in text
    other = results[0].run_id
    raw_execute(
        db_url,
        "UPDATE tenure_events SET lease_token = 3 WHERE run_id = ? AND kind = 'request'",
        other,
    )
    report = audit(rt.store, ledger, max_requeues=1)
    text = "\n".join(report.violations)
    assert f"run {other} event 0 (request): written under token 3" in text, text


def test_the_audit_finds_each_broken_promise(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audited.db'}"
    ledger: list[LedgerEntry] = []
    rt = _app(lambda **kw: tenure.Runtime(url, backoff_base=0.05, backoff_cap=0.1, **kw), ledger)
    ids = _workload(rt)
    rt.close()
    store = open_store(url)
    try:
        assert audit(store, ledger, max_requeues=1).ok
        # A repeated write, a recorded write missing from the ledger, a ledger token that no
        # segment held.
        doubled = [*ledger, ledger[0]]
        report = audit(store, doubled, max_requeues=1)
        assert any("happened 2 times" in v for v in report.violations), report.summary()
        report = audit(store, ledger[1:], max_requeues=1)
        assert any("expected once" in v for v in report.violations), report.summary()
        forged = [LedgerEntry(e.run_id, e.idempotency_key, 99) for e in ledger]
        report = audit(store, forged, max_requeues=1)
        assert any("which no segment held" in v for v in report.violations)
        # Budget: the same database audited with a smaller budget.
        report = audit(store, ledger, max_requeues=0)
        assert any("beyond the budget" in v for v in report.violations), report.summary()
        # Tampering with the events themselves (what a broken guard would have left).
        with sqlite3.connect(tmp_path / "audited.db") as conn:
            conn.execute(
                "UPDATE tenure_events SET lease_token = lease_token - 1 "
                "WHERE run_id = ? AND kind = 'tool'",
                (ids[0],),
            )
            conn.execute(
                "DELETE FROM tenure_events WHERE run_id = ? AND kind = 'claimed'", (ids[1],)
            )
            conn.execute(
                "UPDATE tenure_events SET payload = json_set(payload, '$.error_class', "
                "'server_error') WHERE run_id = ? AND kind = 'dead_lettered'",
                (ids[2],),
            )
        conn.close()
        report = audit(store, ledger, max_requeues=1)
        text = "\n".join(report.violations)
        assert f"run {ids[0]} event" in text and "written under token" in text
        assert f"run {ids[1]}: event sequences" in text
        assert "dead-lettered not_retryable (failure, class server_error)" in text
    finally:
        store.close()


def test_tenure_audit_on_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    entries: list[LedgerEntry] = []
    rt = _app(lambda **kw: tenure.Runtime(url, backoff_base=0.05, backoff_cap=0.1, **kw), entries)
    _workload(rt)
    rt.close()
    ledger = tmp_path / "ledger"
    ledger.write_text("".join(f"{e.run_id} {e.idempotency_key} {e.token}\n" for e in entries))

    def tenure_audit(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tenure", "--database", url, "audit", *extra]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    done = tenure_audit("--ledger", str(ledger), "--max-requeues", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs 5, events" in done.stdout and "violations 0" in done.stdout
    with ledger.open("a") as f:
        f.write(f"{entries[0].run_id} {entries[0].idempotency_key} {entries[0].token}\n")
    done = tenure_audit("--ledger", str(ledger), "--max-requeues", "1")
    assert done.returncode == 1
    assert "VIOLATION" in done.stdout and "happened 2 times" in done.stdout
    done = tenure_audit("--ledger", str(tmp_path / "missing"))
    assert done.returncode == 2 and "no such file" in done.stderr
