"""`tenure queues`, `tenure queues pause NAME`, `tenure queues resume NAME` on each store,
through the real executable: a worker claims nothing of a paused queue, and claims it again
once it is resumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import Cli, one_line_error

SAY = [{"say": "done"}]


def listed(cli: Cli) -> dict[str, dict[str, Any]]:
    result = cli("queues", "--json")
    assert result.code == 0, result.err
    return {q["queue"]: q for q in result.json()}


def enqueue(cli: Cli, queue: str) -> str:
    result = cli("enqueue", "--prompt", "p", "--queue", queue, "--script", cli.script(SAY))
    assert result.code == 0, result.err
    return result.out.strip()


def status(cli: Cli, run_id: str) -> str:
    result = cli("status", run_id, "--json")
    assert result.code == 0, result.err
    value: str = result.json()["status"]
    return value


def test_a_burst_worker_leaves_a_paused_queue_alone_until_it_is_resumed(
    tmp_path: Path, db_url: str
) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    paused = cli("queues", "pause", "mail", "--by", "alice")
    assert paused.code == 0, paused.err
    assert paused.out.startswith("paused mail")
    mail, other = enqueue(cli, "mail"), enqueue(cli, "other")

    worked = cli("worker", "--burst", "--poll-interval", "0.05")
    assert worked.code == 0, worked.err
    assert (status(cli, mail), status(cli, other)) == ("queued", "completed")
    queues = listed(cli)
    assert queues["mail"]["paused"] and queues["mail"]["paused_by"] == "alice"
    assert queues["mail"]["queued"] == 1
    table = cli("queues")
    assert table.code == 0
    header, *lines = table.out.strip().splitlines()
    assert header.split()[:3] == ["queue", "state", "queued"]
    assert [line.split()[:3] for line in lines] == [
        ["mail", "paused", "1"],
        ["other", "active", "0"],
    ]

    assert cli("queues", "pause", "mail").out.strip() == "mail was already paused"
    resumed = cli("queues", "resume", "mail")
    assert resumed.code == 0 and resumed.out.strip() == "resumed mail"
    assert cli("queues", "resume", "mail").out.strip() == "mail was not paused"
    assert cli("worker", "--burst", "--poll-interval", "0.05").code == 0
    assert status(cli, mail) == "completed"
    # Both queues' runs have ended: they are listed for what they spent in the last 24 h.
    queues = listed(cli)
    assert set(queues) == {"mail", "other"}
    assert (queues["mail"]["queued"], queues["mail"]["running"]) == (0, 0)
    assert queues["mail"]["input_tokens"] > 0 and queues["mail"]["cost"] == 0.0


def test_queues_show_tokens_and_cost_of_the_last_day(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    usage = {"input_tokens": 1200, "output_tokens": 34, "cost": 0.5}
    script = cli.script([{"say": "done", "usage": usage}])
    for _ in range(2):
        assert cli("enqueue", "--prompt", "p", "--queue", "mail", "--script", script).code == 0
    assert cli("worker", "--burst", "--poll-interval", "0.05").code == 0
    mail = listed(cli)["mail"]
    assert (mail["input_tokens"], mail["output_tokens"], mail["cost"]) == (2400, 68, 1.0)
    table = cli("queues")
    assert table.code == 0, table.err
    header, line = table.out.strip().splitlines()
    assert "tokens 24h" in header and "cost 24h" in header
    assert line.split()[:8] == ["mail", "active", "0", "0", "0", "0", "2468", "1.0000"]


def test_a_bad_queue_name_is_one_line_and_changes_nothing(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    result = cli("queues", "pause", "x" * 201)
    assert result.code == 2
    assert "queue must be a non-empty string" in one_line_error(result)
    assert cli("queues", "frob").code == 2
    assert listed(cli) == {}


def test_no_queues(tmp_path: Path, db_url: str) -> None:
    cli = Cli(tmp_path, db_url)
    assert cli("init").code == 0
    result = cli("queues")
    assert result.code == 0 and result.out.strip().startswith("no queues")
