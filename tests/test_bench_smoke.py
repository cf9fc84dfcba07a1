"""Every benchmark script runs once at a tiny size, so none of them rots. No timing is
asserted: the machine is shared and noisy. Peers are left out unless TENURE_BENCH_PEERS=1
(their start-up alone takes seconds); without them installed a script prints
"not installed" rows, which this also covers when they are absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._postgres import Cluster, _bindir

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = [
    "drain", "steps", "recovery", "growth", "limit", "memory", "concurrency", "paths", "capacity",
    "stream", "startup", "profile_run", "children", "claim_cost", "instructions",
]  # fmt: skip
TIMEOUT_SECONDS = 240


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_and_prints_a_table(script: str, tmp_path: Path, pg_cluster: Cluster) -> None:
    # The session's cluster (its databases are made by the script): one start for all.
    argv = [
        sys.executable,
        str(BENCH / f"{script}.py"),
        "--quick",
        "--postgres",
        pg_cluster.url("postgres"),
    ]
    if os.environ.get("TENURE_BENCH_PEERS") != "1":
        argv.append("--no-peers")
    out = _bench(argv, tmp_path)
    assert "| system" in out and "| tenure" in out, out[-4000:]


def _bench(argv: list[str], tmp_path: Path) -> str:
    """What a benchmark printed, run in `tmp_path`: it succeeds and leaves no file there."""
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert not list(tmp_path.iterdir()), "a benchmark left files behind"
    return done.stdout


@pytest.mark.slow
def test_instructions_per_step_of_the_loop_and_of_an_agent_function(tmp_path: Path) -> None:
    out = _bench([sys.executable, str(BENCH / "instructions.py"), "--steps", "--quick"], tmp_path)
    counted = "| this/SQLite | agent function step" in out
    assert counted or "valgrind not installed" in out, out[-4000:]


@pytest.mark.slow
def test_instructions_per_enqueue(tmp_path: Path) -> None:
    out = _bench([sys.executable, str(BENCH / "instructions.py"), "--enqueue", "--quick"], tmp_path)
    counted = "| this/SQLite | enqueue" in out
    assert counted or "valgrind not installed" in out, out[-4000:]


@pytest.mark.slow
def test_instructions_per_step_on_postgresql_client_and_server(tmp_path: Path) -> None:
    _bindir()  # the script starts a cluster of its own, its server under valgrind
    argv = [sys.executable, str(BENCH / "instructions.py"), "--steps", "--quick"]
    out = _bench([*argv, "--store", "postgres"], tmp_path)
    counted = all(
        f"| this/PostgreSQL | agent function step, {side}" in out
        for side in ("client", "server", "total")
    )
    assert counted or "valgrind not installed" in out, out[-4000:]
