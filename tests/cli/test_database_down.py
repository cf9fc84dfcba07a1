"""A PostgreSQL server that does not answer: a command run by a person or by cron gives up
within seconds in one line; a worker rides the outage out, saying so once when it starts and
once when it ends."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests._postgres import Cluster, free_port

from .conftest import Cli, one_line_error, wait_for

RUN = "0192a0de-0000-7000-8000-000000000000"
PASSWORD = "pw-never-shown-4721"
# The store's retry window for a database it has reached (src/tenure/store/_pg_conn.py).
RETRY_WINDOW_SECONDS = 30

ONE_SHOT_COMMANDS = [
    ["init"],
    ["runs"],
    ["status", RUN],
    ["events", RUN],
    ["events", RUN, "--follow"],
    ["enqueue", "--prompt", "hello"],
    ["run", "--prompt", "hello"],
    ["audit"],
    ["pending"],
    ["approve", RUN, "--by", "ops"],
    ["cancel", RUN],
    ["redrive", RUN],
]


def _unreachable_url() -> tuple[str, str]:
    """A URL whose port nothing listens on (a server that is down), with a password."""
    port = free_port()
    return f"postgresql://tenure:{PASSWORD}@127.0.0.1:{port}/tenure", f"127.0.0.1:{port}"


@pytest.mark.parametrize("args", ONE_SHOT_COMMANDS, ids=" ".join)
def test_a_one_shot_command_gives_up_at_once_in_one_line(cli: Cli, args: list[str]) -> None:
    url, where = _unreachable_url()
    started = time.monotonic()
    result = cli("--database", url, *args, database=False, timeout=120)
    # Gave up instead of retrying for the whole window that a reached database gets.
    assert time.monotonic() - started < RETRY_WINDOW_SECONDS / 2
    assert result.code == 1
    line = one_line_error(result)
    assert line.startswith(f"tenure: cannot reach PostgreSQL database tenure at {where}"), line
    assert "Connection refused" in line
    assert PASSWORD not in result.err


@pytest.mark.slow
def test_a_worker_started_while_postgres_is_down_retries_and_says_so_once(cli: Cli) -> None:
    url, where = _unreachable_url()
    started = time.monotonic()
    result = cli("--database", url, "worker", "--burst", database=False, timeout=120)
    assert result.code == 1
    assert time.monotonic() - started > RETRY_WINDOW_SECONDS * 2 / 3
    lines = result.err.strip().splitlines()
    assert [line for line in lines if "unreachable" in line] == [lines[0]], result.err
    assert f"{where} unreachable" in lines[0]
    assert "error connecting" not in result.err and "transiently" not in result.err
    assert lines[-1].startswith(f"tenure: cannot reach PostgreSQL database tenure at {where}")
    assert len(lines) == 2, result.err
    assert PASSWORD not in result.err


@pytest.mark.slow
def test_a_worker_says_once_that_postgres_is_unreachable_and_once_that_it_is_back(
    tmp_path: Path, spare_pg_cluster: Cluster
) -> None:
    cli = Cli(tmp_path, spare_pg_cluster.url("tenure"))
    assert cli("init").code == 0
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            cli.command("worker", "--poll-interval", "0.2"),
            cwd=tmp_path,
            env=cli.env(),
            stdout=subprocess.DEVNULL,
            stderr=sink,
            text=True,
        )
    try:
        wait_for(lambda: "started: concurrency" in log.read_text())
        spare_pg_cluster.stop()
        wait_for(lambda: "unreachable" in log.read_text())
        # Long enough for the claim loop, the listener and the pool to try again many times.
        time.sleep(8)
        spare_pg_cluster.start()
        wait_for(lambda: "reachable again" in log.read_text(), timeout=60)
        run_id = cli.enqueue([{"say": "after the outage"}])
        wait_for(lambda: cli("status", run_id, "--json").json()["status"] == "completed")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    text = log.read_text()
    lines = text.splitlines()
    assert len([line for line in lines if "unreachable" in line]) == 1, text
    assert len([line for line in lines if "reachable again" in line]) == 1, text
    assert "error connecting" not in text and "transiently" not in text, text
    assert "listener connection lost" not in text, text
    assert "Traceback" not in text, text
