"""Every option of every command: a range that refuses what it cannot mean in one line, and
help text that says what it does and what it defaults to."""

from __future__ import annotations

import re

import pytest

from .conftest import Cli, one_line_error

SCENARIOS = ["--scenarios", "scenarios.json"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["serve", "--port", "70000"], "--port"),
        (["serve", "--port", "65536"], "--port"),
        (["serve", "--port", "0"], "--port"),
        (["serve", "--port", "-1"], "--port"),
        (["serve", "--work", "0"], "--work"),
        (["worker", "--concurrency", "-3"], "--concurrency"),
        (["worker", "--concurrency", "0"], "--concurrency"),
        (["worker", "--concurrency", "1000000"], "--concurrency"),
        (["worker", "--lease-seconds", "0"], "--lease-seconds"),
        (["worker", "--lease-seconds", "-5"], "--lease-seconds"),
        (["worker", "--backoff-base", "0"], "--backoff-base"),
        (["worker", "--poll-interval", "0"], "--poll-interval"),
        (["worker", "--grace-seconds", "-1"], "--grace-seconds"),
        (["enqueue", "--prompt", "p", "--max-iterations", "0"], "--max-iterations"),
        (["enqueue", "--prompt", "p", "--max-iterations", "21"], "--max-iterations"),
        (["run", "--prompt", "p", "--max-iterations", "-1"], "--max-iterations"),
        (["enqueue", "--prompt", "p", "--delay", "-1"], "--delay"),
        (["runs", "--limit", "0"], "--limit"),
        (["runs", "--limit", "10000001"], "--limit"),
        (["workers", "--limit", "-1"], "--limit"),
        (["pending", "--limit", "0"], "--limit"),
        (["reap", "--limit", "0"], "--limit"),
        (["events", "RUN", "--after", "-2"], "--after"),
        (["audit", "--max-requeues", "-1"], "--max-requeues"),
        (["audit", "--stranded-after", "-1"], "--stranded-after"),
        (["crashtest", *SCENARIOS, "--deciders", "0"], "--deciders"),
        (["crashtest", *SCENARIOS, "--deciders", "100000"], "--deciders"),
        (["demo", "--runs", "0"], "--runs"),
        (["demo", "--concurrency", "0"], "--concurrency"),
        (["demo", "--seed", "-1"], "--seed"),
    ],
)
def test_a_number_out_of_range_is_refused_in_one_line(
    cli: Cli, args: list[str], option: str
) -> None:
    result = cli(*args)
    assert result.code == 2
    line = one_line_error(result)
    assert f"argument {option}" in line and repr(args[-1]) in line, line
    assert not (cli.cwd / "tenure.db").exists()


def _commands(cli: Cli) -> list[str]:
    result = cli("--help", database=False, COLUMNS="200")
    assert result.code == 0
    listed = result.out.partition("COMMAND\n")[2].partition("\n\n")[0]
    return [line.split()[0] for line in listed.splitlines() if line.startswith("    ")]


# An entry of an argparse help listing: its invocation, then (after two spaces, or on the
# lines below) its help.
_ENTRY = re.compile(r"^  (\S.*?)(?:  +(\S.*))?$")


def _entries(help_text: str) -> dict[str, str]:
    """Each argument's invocation -> its help text, from the sections after the usage."""
    found: dict[str, str] = {}
    current = ""
    for section in help_text.split("\n\n")[1:]:
        lines = section.splitlines()
        if not lines or not lines[0].endswith(":"):
            continue  # the description, the epilog
        for line in lines[1:]:
            match = _ENTRY.match(line)
            if match:
                current = match.group(1)
                found[current] = match.group(2) or ""
            else:
                found[current] = (found[current] + " " + line.strip()).strip()
    return found


def test_every_option_of_every_command_has_help_and_its_default(cli: Cli) -> None:
    commands = _commands(cli)
    assert {"serve", "worker", "runs", "demo", "crashtest", "pending"} <= set(commands)
    for command in [None, *commands]:
        args = ["--help"] if command is None else [command, "--help"]
        result = cli(*args, database=False, COLUMNS="200")
        assert result.code == 0, result.err
        entries = _entries(result.out)
        if command is not None:
            assert "-h, --help" in entries
        for invocation, text in entries.items():
            assert text, f"tenure {command or ''} {invocation}: no help text"
    # A default is shown where there is one to show.
    worker = _entries(cli("worker", "--help", database=False, COLUMNS="200").out)
    assert worker["--concurrency N"].endswith("(default: 4)")
    assert "(default: 1.0)" in worker["--poll-interval S"]
    serve = _entries(cli("serve", "--help", database=False, COLUMNS="200").out)
    assert serve["--port N"].endswith("(default: 8000)")
    assert serve["--host HOST"].endswith("(default: 127.0.0.1)")
