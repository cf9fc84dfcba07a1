"""A process SIGKILLed while a fork copies the journal leaves no fork at all; the next
fork is whole (SPEC §23: a fork is stored in one transaction). Both stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import tenure
from tenure import EventKind, Outcome, RunRequest
from tenure.audit import audit

from ._workers import ROOT, wait_for

# A journal long enough that its copy is one long statement: 10 turns of 20 calls each.
TURNS, CALLS = 10, 20


def _long_run(rt: tenure.Runtime) -> str:
    @rt.tool
    def look(n: int) -> int:
        return n

    script: list[dict[str, object]] = [
        {"call": [{"tool": "look", "args": {"n": i * CALLS + j}} for j in range(CALLS)]}
        for i in range(TURNS)
    ]
    run_id = rt.enqueue(
        RunRequest(
            prompt="look",
            model="scripted",
            tools=["look"],
            script=[*script, {"say": "done"}],
            max_iterations=TURNS + 1,
        )
    )
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    return run_id


def _child(url: str, run_id: str, at: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crash.fork_child", url, run_id, str(at)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _blocked_copies(url: str) -> list[int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%INSERT INTO tenure_events%'"
        ).fetchall()
    return [int(r[0]) for r in rows]


def _backend_gone(url: str, pid: int) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is None


def test_a_fork_killed_while_it_copies_the_journal_leaves_nothing(
    db_url: str, tmp_path: Path
) -> None:
    with tenure.Runtime(db_url) as rt:
        original = _long_run(rt)
        before = rt.events(original)
        at = len(before) - 2  # everything but the answer and its end
        if db_url.startswith("sqlite"):
            child = _child(db_url, original, at)
            out, err = child.communicate(timeout=60)
            assert child.returncode == -signal.SIGKILL, (out, err)
            assert out.strip() == "forking", (out, err)  # killed inside the fork
        else:
            import psycopg

            with psycopg.connect(db_url) as holder:
                holder.execute("LOCK TABLE tenure_events IN SHARE MODE")
                child = _child(db_url, original, at)
                wait_for(lambda: bool(_blocked_copies(db_url)), what="the copy waits")
                (backend,) = _blocked_copies(db_url)
                child.send_signal(signal.SIGKILL)
                out, _ = child.communicate(timeout=30)
                assert out.strip() == "forking"
                holder.rollback()  # the copy may go on now: its client is dead
            wait_for(lambda: _backend_gone(db_url, backend), what="the killed fork's end")
            assert child.returncode == -signal.SIGKILL

        # Either no fork or a whole one: here, none — no row, no copied event.
        runs = rt.runs(limit=100)
        assert [r.id for r in runs] == [original]
        assert rt.events(original) == before  # the original untouched
        report = audit(rt.store)
        assert report.violations == [] and report.events == len(before), report.summary()

        # The same fork, not killed, is whole.
        fork_id = rt.fork(original, at)
        copied = rt.events(fork_id)
        assert len(copied) == at + 1 and copied[at].kind is EventKind.FORKED
        result = rt.run_queued(fork_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
        report = audit(rt.store)
        assert report.violations == [], report.violations
