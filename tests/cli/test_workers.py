"""`tenure workers` on each store, through the real executable: every worker process from its
own heartbeat row; a SIGKILLed one reads dead; a stopped one only with --all; --json."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from .conftest import Cli, one_line_error, wait_for


def listed(cli: Cli, *options: str) -> list[dict[str, Any]]:
    result = cli("workers", "--json", *options)
    assert result.code == 0, result.err
    found: list[dict[str, Any]] = result.json()
    return found


def test_no_workers_yet(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    result = cli("workers")
    assert result.code == 0 and result.out.strip() == "no workers (--all shows the stopped ones)"
    assert listed(cli) == []


def test_a_worker_that_stopped_is_listed_only_with_all(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    done = cli("worker", "--burst", "--concurrency", "3", "--queue", "emails")
    assert done.code == 0, done.err
    assert listed(cli) == []
    (stopped,) = listed(cli, "--all")
    assert (stopped["state"], stopped["queues"], stopped["slots"]) == ("stopped", ["emails"], 3)
    assert stopped["stopped_at"] and stopped["runs_held"] == 0
    table = cli("workers", "--all")
    assert table.code == 0
    header, line = table.out.strip().splitlines()
    assert header.split()[:5] == ["id", "host", "pid", "state", "queues"]
    assert stopped["id"] in line and " stopped " in line and " emails " in line


def test_a_killed_worker_reads_dead(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0  # `workers` refuses a SQLite file the worker has yet to make
    proc = cli.popen("worker", "--concurrency", "2", "--lease-seconds", "1.5")
    try:
        wait_for(lambda: len(listed(cli)) == 1)
        (alive,) = listed(cli)
        assert alive["pid"] == proc.pid and alive["state"] == "running"
        assert (alive["queues"], alive["slots"], alive["slots_in_use"]) == (None, 2, 0)
        assert alive["heartbeat_seconds"] == 0.5
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_for(lambda: listed(cli)[0]["state"] == "dead", timeout=10)
        line = cli("workers").out.strip().splitlines()[1]
        assert f" {proc.pid} " in line and " dead " in line and " all " in line
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_a_bad_limit_is_a_usage_error(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    result = cli("workers", "--limit", "0")
    assert result.code == 2
    assert "--limit" in one_line_error(result)


def test_slots_in_use_agree_with_the_runs_held_before_the_next_round(
    tmp_path: Path, db_url: str
) -> None:
    """The row's slots in use were written only at a heartbeat round (a third of a lease):
    right after a claim `tenure workers` showed `slots 0/2` beside `runs 2`."""
    cli = Cli(tmp_path, db_url)
    for _ in range(2):
        cli.enqueue([{"sleep": 120}, {"say": "done"}])
    # A 300 s lease: the next round is 100 s away, far past this test's wait.
    proc = cli.popen("worker", "--concurrency", "2", "--lease-seconds", "300")
    try:

        def held_and_in_use() -> list[tuple[int, int]]:
            return [(w["runs_held"], w["slots_in_use"]) for w in listed(cli)]

        wait_for(lambda: held_and_in_use() == [(2, 2)], timeout=30)
        row = cli("workers").out.strip().splitlines()[1].split()
        assert "2/2" in row and row[row.index("2/2") + 1] == "2", row
    finally:
        proc.kill()
        proc.communicate()
