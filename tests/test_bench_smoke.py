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

from ._postgres import Cluster

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
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| system" in done.stdout and "| tenure" in done.stdout, done.stdout[-4000:]
    assert not list(tmp_path.iterdir()), "a benchmark left files behind"


@pytest.mark.slow
def test_instructions_per_step_of_the_loop_and_of_an_agent_function(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "instructions.py"), "--steps", "--quick"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    counted = "| this/SQLite | agent function step" in done.stdout
    assert counted or "valgrind not installed" in done.stdout, done.stdout[-4000:]
    assert not list(tmp_path.iterdir()), "a benchmark left files behind"
