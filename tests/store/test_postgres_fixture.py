"""The PostgreSQL test cluster may be skipped on a laptop without PostgreSQL, never in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .._postgres import BINDIR_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
ONE_POSTGRES_TEST = "tests/store/test_transitions.py::test_database_clock_is_utc_and_current"


def pytest_without_postgres(ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env[BINDIR_VARIABLE] = str(ROOT / "no-postgres-here")
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "postgres",
         ONE_POSTGRES_TEST],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_missing_postgres_skips_locally() -> None:
    done = pytest_without_postgres(ci=False)
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout


@pytest.mark.slow
def test_missing_postgres_fails_in_ci() -> None:
    done = pytest_without_postgres(ci=True)
    assert done.returncode != 0, done.stdout
    assert "CI must test PostgreSQL" in done.stdout
