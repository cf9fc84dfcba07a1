"""`tenure demo` at a small size: what it prints is what the database says afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunStatus, TerminationReason, ToolEffect
from tenure.demo._audit import audit

from .conftest import Cli, wait_for

pytestmark = pytest.mark.slow


def _number(pattern: str, text: str) -> tuple[int, ...]:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in the output:\n{text}"
    return tuple(int(g) for g in match.groups())


def _status_table(text: str) -> Counter[tuple[str, str]]:
    section = text.split("runs by status and reason", 1)[1].split("killed worker", 1)[0]
    rows = re.findall(r"^\s+([a-z_]+)\s+([a-z_]+)\s+(\d+)\s*$", section, re.MULTILINE)
    return Counter({(status, reason): int(n) for status, reason, n in rows})


def _recovered_from(runtime: tenure.Runtime, run_id: str, killed: str) -> bool:
    holder: dict[object, str] = {}
    for event in runtime.events(run_id):
        if event.kind is EventKind.CLAIMED:
            holder[event.payload["lease_token"]] = event.payload["worker"]
        stale = event.kind is EventKind.REQUEUED and event.payload["cause"] in (
            "stale",
            "in_doubt",  # killed inside an invoice: back for its probe
        )
        if stale and holder[event.payload["lease_token"]].startswith(killed):
            return True
    return False


def _journaled_writes(runtime: tenure.Runtime, run_id: str) -> set[str]:
    return {
        e.payload["idempotency_key"]
        for e in runtime.events(run_id)
        if e.kind is EventKind.TOOL and e.payload["effect"] == ToolEffect.NON_IDEMPOTENT_WRITE
    }


@dataclass(frozen=True)
class Demo:
    db: Path
    out: str


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One small demo run, shared by the tests of this module."""
    cli = Cli(tmp_path_factory.mktemp("demo"), "")
    db = cli.cwd / "demo.db"
    result = cli(
        "--database", f"sqlite:///{db}", "demo", "--runs", "40", database=False, timeout=120
    )
    assert result.code == 0, result.out + result.err
    assert "Traceback" not in result.out + result.err
    return Demo(db, result.out)


def test_demo_prints_an_audit_that_matches_the_database(demo: Demo) -> None:
    db, out = demo.db, demo.out
    (pid, held) = _number(r"^killed worker: pid (\d+), holding (\d+) runs", out)
    (recovered,) = _number(r"^recovered from the killed worker: (\d+) runs", out)
    (ended, total) = _number(r"^  runs ended: (\d+) of (\d+)$", out)
    (rows, pairs, repeated) = _number(
        r"^  non-idempotent writes: (\d+) ledger rows for (\d+) .* pairs, (\d+) repeated$", out
    )
    (interrupted,) = _number(r"^  interrupted writes \(.*\): (\d+),", out)
    (sent, not_sent, unknown) = _number(
        r"^  interrupted invoices resolved by the probe .*: (\d+) had happened, (\d+) had not "
        r"and ran once, (\d+) could not tell$",
        out,
    )
    (violations, audited_runs, audited_events) = _number(
        r"^  invariants \(tenure\.audit\): (\d+) violations in (\d+) runs and (\d+) events", out
    )
    assert re.search(r"^  result: passed$", out, re.MULTILINE)

    with tenure.Runtime(f"sqlite:///{db}") as runtime:
        runs = runtime.runs(limit=1000)
        assert (ended, total) == (44, 44) == (sum(r.status.is_terminal for r in runs), len(runs))
        assert (violations, audited_runs) == (0, 44)
        # Four of them ran interactively (`rt.run`): no `claimed` event, no queue.
        interactive = [
            r for r in runs if EventKind.CLAIMED not in {e.kind for e in runtime.events(r.id)}
        ]
        assert len(interactive) == 4 and all(r.lease_token == 1 for r in interactive)
        assert any(r.status is RunStatus.COMPLETED for r in interactive)
        assert audited_events == sum(len(runtime.events(r.id)) for r in runs)
        assert _status_table(out) == Counter(
            (str(r.status), str(r.termination_reason)) for r in runs
        )
        # Auth errors are in the mix, and they dead-letter their runs.
        assert any(r.termination_reason is TerminationReason.NOT_RETRYABLE for r in runs)

        killed = f"worker:{socket.gethostname()}:{pid}:"
        assert recovered == held >= 1
        assert recovered == sum(_recovered_from(runtime, r.id, killed) for r in runs)

        conn = sqlite3.connect(db)
        ledger = conn.execute(
            "SELECT run_id, idempotency_key, COUNT(*) FROM demo_ledger GROUP BY 1, 2"
        ).fetchall()
        conn.close()
        assert rows == sum(n for _, _, n in ledger) > 0
        assert pairs == len(ledger)
        assert repeated == sum(1 for *_, n in ledger if n > 1) == 0
        journaled = {key for r in runs for key in _journaled_writes(runtime, r.id)}
        assert interrupted == len({key for _, key, _ in ledger} - journaled) == 0
        # The worker was killed inside an invoice; its probe resolved it.
        probes = [e for r in runs for e in runtime.events(r.id) if e.kind is EventKind.PROBE]
        verdicts = Counter(e.payload["verdict"] for e in probes)
        assert (sent, not_sent, unknown) == (verdicts["done"], verdicts["not_done"], 0)
        assert sent + not_sent >= 1


def test_demo_replaces_its_own_database_and_ignores_the_environment(cli: Cli) -> None:
    elsewhere = cli.cwd / "production.db"
    env = {"TENURE_DATABASE_URL": f"sqlite:///{elsewhere}"}
    for _ in range(2):
        result = cli("demo", "--runs", "12", database=False, timeout=120, **env)
        assert result.code == 0, result.out + result.err
    assert not elsewhere.exists()
    with tenure.Runtime(f"sqlite:///{cli.cwd / 'tenure-demo.db'}") as runtime:
        assert len(runtime.runs(limit=100)) == 12 + 4  # and the interactive ones


def test_the_audit_catches_a_repeated_or_unrecorded_write(demo: Demo, tmp_path: Path) -> None:
    copy = tmp_path / "tampered.db"
    with (
        contextlib.closing(sqlite3.connect(demo.db)) as source,
        contextlib.closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)
    with tenure.Runtime(f"sqlite:///{copy}") as runtime:
        assert audit(runtime, 44, []).passed
        completed = runtime.runs(status="completed", limit=1)[0].id
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            conn.execute(
                "INSERT INTO demo_ledger (run_id, idempotency_key, fencing_token, customer_id, "
                "amount_cents, written_at) SELECT run_id, idempotency_key, fencing_token, "
                "customer_id, amount_cents, written_at FROM demo_ledger LIMIT 1"
            )
            conn.commit()
        repeated = audit(runtime, 44, [])
        assert (repeated.repeated_writes, repeated.passed) == (1, False)
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            conn.execute(
                "INSERT INTO demo_ledger (run_id, idempotency_key, fencing_token, customer_id, "
                "amount_cents, written_at) VALUES (?, ?, 1, 'c1', 1, 0)",
                (completed, f"{completed}:99"),
            )
            conn.commit()
        unrecorded = audit(runtime, 44, [])
        assert (unrecorded.interrupted_writes, unrecorded.interrupted_not_fenced) == (1, 1)


def test_demo_stopped_by_sigterm_stops_its_workers(cli: Cli) -> None:
    db = cli.cwd / "tenure.db"
    demo = cli.popen("demo", "--runs", "300")
    wait_for(db.exists)  # the demo's own file: reading earlier would create another
    with tenure.Runtime(cli.url) as runtime:
        # A run held by a worker process: the interactive runs before them are running too.
        wait_for(
            lambda: any(
                (r.claimed_by or "").startswith("worker:")
                for r in runtime.runs(status="running", limit=50)
            )
        )
    demo.send_signal(signal.SIGTERM)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 130, out + err
    assert err.strip() == "tenure: interrupted"
    pids = [int(p) for p in re.findall(r"^started worker \d+ \(pid (\d+)\)$", out, re.MULTILINE)]
    assert len(pids) >= 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
