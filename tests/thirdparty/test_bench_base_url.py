"""bench/base_url.py runs the demo workload against a server given by base URL: here llmock
(its answers include tool calls, which the runs carry out). No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_the_workload_runs_against_a_base_url(llmock: object, tmp_path: Path) -> None:
    base_url = llmock.base_url("openai")  # type: ignore[attr-defined]
    argv = [sys.executable, str(BENCH / "base_url.py"), "--base-url", base_url]
    argv += ["--model", "gpt-4o-mini", "--runs", "6", "--stream"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("| tenure"))
    assert "| 6 | completed 6 |" in row, done.stdout
    assert not list(tmp_path.iterdir()), "the benchmark left files behind"
    assert len(llmock.requests) >= 6  # type: ignore[attr-defined]
