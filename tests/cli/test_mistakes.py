"""Every user mistake ends in a one-line message and exit code 1 or 2, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import INVOICE_SCRIPT, Cli, no_runs, one_line_error

MISSING = "0b0e7a5c-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["events"],
        ["events", "--follow"],
        ["cancel"],
        ["redrive"],
        ["redrive", "--force"],
    ],
)
def test_unknown_run_id(cli: Cli, command: list[str]) -> None:
    assert cli("init").code == 0
    result = cli(*command, MISSING)
    assert result.code == 1
    assert one_line_error(result) == f"tenure: no run with id {MISSING!r}"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[{"say": ', "not valid JSON"),
        ('{"say": "hi"}', "a script must be a JSON array of turns"),
        ('[{"shout": "hi"}]', "script turn 0: expected exactly one of say, call, fail, sleep"),
        ('[{"fail": "sometimes"}]', "script turn 0 (fail)"),
        ('[{"sleep": -1}]', "script turn 0 (sleep)"),
    ],
)
def test_malformed_script_file(cli: Cli, content: str, expected: str) -> None:
    path = cli.cwd / "bad.json"
    path.write_text(content)
    for command in ("enqueue", "run"):
        result = cli(command, "--prompt", "p", "--script", str(path))
        assert result.code == 2
        line = one_line_error(result)
        assert line.startswith(f"tenure: --script {path}: ") and expected in line
    assert no_runs(cli)


def test_missing_script_file(cli: Cli) -> None:
    result = cli("enqueue", "--prompt", "p", "--script", "nowhere.json")
    assert result.code == 2
    assert "nowhere.json: cannot read it" in one_line_error(result)


@pytest.mark.parametrize(
    ("option", "name", "kind"),
    [("--tool", "launch_rockets", "tool"), ("--model", "gpt-17", "model")],
)
def test_unknown_tool_or_model(cli: Cli, option: str, name: str, kind: str) -> None:
    script = cli.script(INVOICE_SCRIPT)
    for command in ("enqueue", "run"):
        result = cli(command, "--prompt", "p", option, name, "--script", script)
        assert result.code == 2
        assert one_line_error(result).startswith(f"tenure: unknown {kind} {name!r}")
    assert no_runs(cli)


def _not_a_database(tmp: Path) -> str:
    (tmp / "notes.txt").write_text("these are not the tables you are looking for\n" * 100)
    return f"sqlite:///{tmp / 'notes.txt'}"


@pytest.mark.parametrize(
    ("make_url", "code", "expected"),
    [
        (lambda tmp: "sqlite:////no/such/directory/t.db", 1, "does not exist"),
        (lambda tmp: f"sqlite:///{tmp}", 1, "cannot open database"),
        (_not_a_database, 1, "not a database"),
        (lambda tmp: "mysql://localhost/db", 2, "unsupported database URL"),
        (lambda tmp: "sqlite:///", 2, "not a SQLite URL"),
    ],
    ids=["missing-directory", "a-directory", "not-a-database", "unsupported", "no-path"],
)
def test_unreachable_or_unwritable_database(
    cli: Cli, tmp_path: Path, make_url: Callable[[Path], str], code: int, expected: str
) -> None:
    url = make_url(tmp_path)
    for command in (["runs"], ["init"], ["enqueue", "--prompt", "p"], ["reap"]):
        result = cli("--database", url, *command, database=False)
        assert result.code == code
        assert expected in one_line_error(result)


@pytest.mark.parametrize("duration", ["3x", "30", "d", "-5d", "5 days", ""])
def test_bad_duration(cli: Cli, duration: str) -> None:
    result = cli("purge", f"--older-than={duration}")
    assert result.code == 2
    assert "bad duration" in one_line_error(result)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module:app", "no module named 'no_such_module'"),
        ("slow_app:missing", "has no 'missing'"),
        ("slow_app:not_a_runtime", "not a tenure.Runtime"),
        (":rt", "expected MODULE:ATTR"),
    ],
)
def test_bad_app(cli: Cli, slow_app: str, spec: str, expected: str) -> None:
    result = cli("--app", spec, "runs")
    assert result.code == 2
    assert expected in one_line_error(result)


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue"],
        ["enqueue", "--prompt", "p", "--delay", "soon"],
        ["frobnicate"],
        ["runs", "--status", "lost"],
        ["worker", "--concurrency", "0"],
        ["run", "--prompt", "p", "--delay", "5"],
        ["redrive"],
    ],
)
def test_bad_usage(cli: Cli, args: list[str]) -> None:
    result = cli(*args)
    assert result.code == 2
    one_line_error(result)


def test_demo_leaves_a_database_that_is_not_its_own(cli: Cli) -> None:
    cli.enqueue(INVOICE_SCRIPT, "send_invoice")
    result = cli("demo", "--runs", "5")
    assert result.code == 1
    assert "is not a demo database" in one_line_error(result)
    assert len(cli("runs", "--json").json()) == 1


@pytest.mark.parametrize(
    "url", ["postgresql://localhost/demo", "postgres://u@h/d", "mysql://h/d", "sqlite:/relative"]
)
def test_demo_says_it_needs_sqlite_first(cli: Cli, url: str) -> None:
    result = cli("--database", url, "demo", database=False)
    assert result.code == 2
    line = one_line_error(result)
    assert line == (
        f"tenure: tenure demo needs a SQLite database (--database sqlite:///FILE), got {url}"
    )
    assert list(cli.cwd.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "code"),
    [("sqlite:////no/such/directory/demo.db", 1), ("postgresql://localhost/demo", 2)],
)
def test_demo_on_a_database_it_cannot_use(cli: Cli, url: str, code: int) -> None:
    result = cli("--database", url, "demo", "--runs", "5", database=False)
    assert result.code == code
    one_line_error(result)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--prompt", "\udcff"), ("--queue", "q\udcff"), ("--idempotency-key", "\udcffk")],
)
def test_text_that_is_not_utf8(cli: Cli, option: str, value: str) -> None:
    """An argument with bytes that are not UTF-8 (Python sees a lone surrogate)."""
    args = ["--prompt", "p", option, value] if option != "--prompt" else [option, value]
    for command in ("enqueue", "run"):
        result = cli(command, *args, "--script", cli.script([{"say": "hi"}]))
        assert result.code == 2
        assert "not valid UTF-8" in one_line_error(result)
    assert no_runs(cli)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[{"say": "\\udcff"}]', "not valid UTF-8"),
        ('[{"say": "hi", "x": ' + "[" * 100_000 + "]" * 100_000 + "}]", "nested too deeply"),
        (
            '[{"call": [{"tool": "t", "args": {"x": ' + "[" * 500 + "]" * 500 + "}}]}]",
            "nested more than 64 levels",
        ),
    ],
)
def test_script_text_or_depth_refused(cli: Cli, content: str, expected: str) -> None:
    path = cli.cwd / "bad.json"
    path.write_text(content)
    for command in ("enqueue", "run"):
        result = cli(command, "--prompt", "p", "--script", str(path))
        assert result.code == 2
        assert expected in one_line_error(result)
    assert no_runs(cli)


@pytest.mark.parametrize(
    "args",
    [
        ["events", MISSING, "--after", "99999999999999999999"],
        ["runs", "--limit", "99999999999999999999"],
        ["pending", "--limit", "99999999999999999999"],
        ["reap", "--limit", "99999999999999999999"],
        ["enqueue", "--prompt", "p", "--delay", "1e12"],
        ["enqueue", "--prompt", "p", "--delay", "inf"],
        ["purge", "--older-than", "40000d"],
        ["worker", "--lease-seconds", "1e300"],
    ],
)
def test_numbers_beyond_what_is_stored(cli: Cli, args: list[str]) -> None:
    result = cli(*args)
    assert result.code == 2
    one_line_error(result)
    assert not (cli.cwd / "tenure.db").exists()


@pytest.fixture
def cli_on(tmp_path: Path, db_url: str) -> Cli:
    """The real executable on either store."""
    return Cli(tmp_path, db_url)


def test_a_damaged_row_is_shown_and_every_command_goes_on(cli_on: Cli, db_url: str) -> None:
    from tests._raw import raw_execute

    far: object = 1e12 + 1.7e9 if db_url.startswith("sqlite") else "33715-01-01 00:00:00+00"
    good = cli_on.enqueue([{"say": "hi"}])
    bad = cli_on.enqueue([{"say": "hi"}])
    raw_execute(db_url, "UPDATE tenure_runs SET updated_at = ? WHERE id = ?", far, bad)
    raw_execute(
        db_url, "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = 0", "[1]", bad
    )

    for args in (["runs"], ["status", bad], ["events", bad], ["events", bad, "--json"]):
        result = cli_on(*args)
        assert result.code == 0, result.err
        assert "Traceback" not in result.err
        assert "DAMAGED" in result.out or '"damaged"' in result.out or "damaged" in result.out
    listed = {r["id"]: r for r in cli_on("runs", "--json").json()}
    assert set(listed) == {good, bad}
    assert "updated_at" in listed[bad]["damaged"] and listed[good]["damaged"] is None
    (event,) = cli_on("events", bad, "--json").json()
    assert "payload" in event["damaged"]

    result = cli_on("audit")
    assert result.code == 1 and "Traceback" not in result.err
    assert f"run {bad}: damaged row" in result.out
    assert "runs 2" in result.out
