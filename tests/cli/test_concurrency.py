"""`tenure concurrency`, `tenure concurrency set KEY N` and `tenure enqueue --priority
--concurrency-key` on each store, through the real executable (SPEC §22)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import Cli, one_line_error

SAY = [{"say": "done"}]


def listed(cli: Cli) -> dict[str, dict[str, Any]]:
    result = cli("concurrency", "--json")
    assert result.code == 0, result.err
    return {k["key"]: k for k in result.json()}


def enqueue(cli: Cli, *options: str) -> str:
    result = cli("enqueue", "--prompt", "p", "--script", cli.script(SAY), *options)
    assert result.code == 0, result.err
    return result.out.strip()


def test_a_key_held_at_zero_waits_and_is_listed_as_waiting(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    held = cli("concurrency", "set", "tenant-a", "0")
    assert held.code == 0 and held.out.strip() == "tenant-a: at most 0 running at once"
    waiting = enqueue(cli, "--concurrency-key", "tenant-a", "--priority", "7")
    free = enqueue(cli, "--concurrency-key", "tenant-b")
    assert cli("worker", "--burst", "--poll-interval", "0.05").code == 0
    assert cli("status", free, "--json").json()["status"] == "completed"
    run = cli("status", waiting, "--json").json()
    assert (run["status"], run["attempt"], run["lease_token"]) == ("queued", 0, 0)
    keys = listed(cli)
    assert keys["tenant-a"] == {
        "key": "tenant-a",
        "limit": 0,
        "running": 0,
        "queued": 1,
        "waiting_for_key": 1,
    }
    assert "tenant-b" not in keys  # no limit, nothing left queued or running
    header, line = cli("concurrency").out.strip().splitlines()
    assert header.split() == ["key", "limit", "running", "queued", "state"]
    assert line.split()[:5] == ["tenant-a", "0", "0", "1", "full:"]
    listing = cli("runs", "--status", "queued").out
    assert "waits for key tenant-a (at its limit)" in listing

    assert cli("concurrency", "set", "tenant-a", "none").out.strip() == "tenant-a: no limit"
    assert cli("worker", "--burst", "--poll-interval", "0.05").code == 0
    assert cli("status", waiting, "--json").json()["status"] == "completed"


def test_bad_limits_and_priorities_are_one_line_and_change_nothing(
    tmp_path: Path, db_url: str
) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    for bad in ("-1", "1.5", "many"):
        result = cli("concurrency", "set", "k", bad)
        assert result.code == 2
        assert "concurrency limit must be a whole number" in one_line_error(result)
    result = cli("enqueue", "--prompt", "p", "--priority", "101")
    assert result.code == 2 and "from -100 to 100" in one_line_error(result)
    assert listed(cli) == {}
    assert cli("runs", "--json").json() == []
