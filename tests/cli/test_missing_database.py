"""A SQLite file that is not there: a command that only reads says so in one line and leaves
no file behind (connecting would create an empty one: a misspelt path read as "no runs");
a command that writes creates it."""

from __future__ import annotations

import pytest

from .conftest import INVOICE_SCRIPT, Cli, one_line_error

RUN = "0b0e7a5c-0000-4000-8000-000000000000"

READ_ONLY = [
    ["runs"],
    ["runs", "--json"],
    ["status", RUN],
    ["events", RUN],
    ["events", RUN, "--follow"],
    ["audit"],
    ["pending"],
    ["models"],
    ["workers"],
    ["serve", "--public-read", "--port", "1"],
]


@pytest.mark.parametrize("command", READ_ONLY, ids=[" ".join(c) for c in READ_ONLY])
def test_a_read_only_command_refuses_a_missing_file(cli: Cli, command: list[str]) -> None:
    missing = cli.cwd / "tenrue.db"
    result = cli("--database", f"sqlite:///{missing}", *command, database=False)
    assert result.code == 1
    line = one_line_error(result)
    assert str(missing) in line and "does not exist" in line and "tenure init" in line, line
    assert not missing.exists()
    assert sorted(p.name for p in cli.cwd.iterdir()) == []


def test_the_default_file_and_the_environment_are_checked_too(cli: Cli) -> None:
    result = cli("runs", database=False)
    assert "'tenure.db' does not exist" in one_line_error(result)
    result = cli("runs", database=False, TENURE_DATABASE_URL="sqlite:///other.db")
    assert "'other.db' does not exist" in one_line_error(result)
    assert sorted(p.name for p in cli.cwd.iterdir()) == []


def test_an_existing_file_is_read(cli: Cli) -> None:
    run_id = cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    assert cli("runs", "--json").json()[0]["id"] == run_id
    assert cli("status", run_id).code == 0


@pytest.mark.parametrize(
    "command", [["init"], ["enqueue", "--prompt", "p"], ["worker", "--burst"], ["reap"]]
)
def test_a_writing_command_creates_the_file(cli: Cli, command: list[str]) -> None:
    database = cli.cwd / "tenure.db"
    assert not database.exists()
    result = cli(*command)
    assert result.code == 0, result.err
    assert database.exists()
    assert cli("runs").code == 0
