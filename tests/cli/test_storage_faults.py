"""`tenure worker` against storage faults of its SQLite file, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure import RunRequest, RunStatus

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


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB file system (tmpfs): mounting one needs root, so elsewhere this skips."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_worker_recovers_from_a_full_disk_and_its_wal_shrinks_back(
    tiny_disk: Path, tmp_path: Path
) -> None:
    db = tiny_disk / "tenure.db"
    cli = Cli(tmp_path, f"sqlite:///{db}")
    assert cli("init").code == 0
    worker = cli.popen("worker", "--poll-interval", "0.1")
    lines: list[str] = []  # the worker's stderr, read as it comes
    reader = threading.Thread(target=lambda: lines.extend(iter(worker.stderr.readline, "")))  # type: ignore[union-attr]
    reader.start()
    rt = tenure.Runtime(cli.url)
    try:
        first = cli.enqueue([{"say": "ok"}])
        wait_for(lambda: _completed(rt, first))  # the worker is at work
        # A run whose end the worker will try to write while the disk is full (an idle
        # worker writes nothing, so nothing of its own would fail).
        cli.enqueue([{"sleep": 1.0}, {"say": "ok"}])
        free = os.statvfs(tiny_disk).f_bavail * os.statvfs(tiny_disk).f_frsize
        filler = tiny_disk / "filler"
        filler.write_bytes(b"\0" * (free - 3_000_000))
        big = RunRequest(prompt="x" * 250_000, model="scripted", script=[{"say": "ok"}])
        enqueued: list[str] = []
        with pytest.raises(tenure.StoreError, match="full"):
            for _ in range(200):
                enqueued.append(rt.enqueue(big))
        # The disk stays full until a write of the worker's own has failed on it.
        wait_for(lambda: any("full" in line for line in lines), timeout=30)
        filler.unlink()  # space is back
        wait_for(lambda: all(_completed(rt, r) for r in enqueued), timeout=60)
        # On this small disk the runs enqueued around the episode can only complete once
        # the WAL gave its space back (without the truncation they never do); the WAL's
        # size afterwards depends on the work done since, so the log line says it happened.
        assert worker.poll() is None, "the worker did not survive the full disk"
    finally:
        rt.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        reader.join(10)
        for pipe in (worker.stdout, worker.stderr):
            if pipe is not None:
                pipe.close()
    err = "".join(lines)
    assert "Traceback" not in err
    assert "the WAL was truncated after the disk filled" in err
