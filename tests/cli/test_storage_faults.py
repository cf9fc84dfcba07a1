"""`tenure worker` against storage faults of its SQLite file, with real processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tenure
from tenure import RunStatus

from .conftest import Cli, wait_for

pytestmark = pytest.mark.slow


def _completed(runtime: tenure.Runtime, run_id: str) -> bool:
    run = runtime.status(run_id)
    return run is not None and run.status is RunStatus.COMPLETED


@pytest.mark.parametrize("fault", ["deleted", "replaced"])
def test_a_worker_whose_database_file_goes_away_stops_with_one_error_line(
    cli: Cli, runtime: tenure.Runtime, tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "tenure.db"
    worker = cli.popen("worker", "--poll-interval", "0.1")
    run_id = cli.enqueue([{"say": "ok"}])
    wait_for(lambda: _completed(runtime, run_id))
    runtime.close()
    if fault == "deleted":
        path.unlink()
    else:
        other = tenure.Runtime(f"sqlite:///{tmp_path / 'other.db'}")
        other.status(run_id)  # creates its schema
        other.close()
        os.replace(tmp_path / "other.db", path)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 1, err
    assert "Traceback" not in err
    message = f"database file {str(path)!r} was deleted or replaced while open"
    assert [line for line in err.splitlines() if "deleted or replaced" in line] == [
        f"tenure: {message}"
    ]
    assert path.exists() == (fault == "replaced"), "the worker created a new database file"
