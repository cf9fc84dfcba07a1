"""What a newcomer runs into first: a base install, a busy port, options in the wrong place, a
database URL that can never work. Each ends in one line that says what to do."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._postgres import Cluster

from .conftest import Cli, one_line_error

TOKEN = "a-long-enough-token-for-serving-0123456789"

# Installed as sitecustomize: the web extra's packages fail to import, as on a base install
# (nothing is uninstalled from the test environment).
HIDE_WEB_EXTRA = """
import sys

HIDDEN = {"fastapi", "starlette", "uvicorn", "jinja2", "prometheus_client", "multipart",
          "python_multipart"}


class HideWebExtra:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, HideWebExtra())
"""


def test_serve_on_a_base_install_names_the_extra_to_install(cli: Cli, tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE_WEB_EXTRA)
    check = subprocess.run(
        [sys.executable, "-c", "import fastapi"],
        env=cli.env(PYTHONPATH=str(shim)),
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1 and "No module named 'fastapi'" in check.stderr

    result = cli("serve", PYTHONPATH=str(shim), TENURE_API_TOKEN=TOKEN)
    assert result.code == 1
    line = one_line_error(result)
    assert "tenure serve needs the web extra" in line
    assert "pip install 'tenure[web]'" in line


def test_serve_on_a_port_in_use_is_one_line_and_exit_1(cli: Cli) -> None:
    assert cli("init").code == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("serve", "--port", str(port), TENURE_API_TOKEN=TOKEN)
    assert result.code == 1
    line = one_line_error(result)
    assert line.startswith(f"tenure: cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in line


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--database", "sqlite:///other.db"],
        ["runs", "--app", "tenure.demo:app"],
        ["runs", "--database=sqlite:///other.db"],
    ],
)
def test_a_global_option_after_the_command_says_where_it_goes(cli: Cli, args: list[str]) -> None:
    result = cli(*args, database=False)
    assert result.code == 2
    line = one_line_error(result)
    assert "unrecognized arguments" in line
    assert "global options go before the command" in line


def test_an_unrecognized_option_that_is_not_global_gets_no_hint(cli: Cli) -> None:
    result = cli("runs", "--colour")
    assert result.code == 2
    assert "global options" not in one_line_error(result)


@pytest.mark.parametrize("value", ["-5d", "-1h", "-0.5m"])
def test_a_negative_duration_says_so(cli: Cli, value: str) -> None:
    result = cli("purge", "--older-than", value)
    assert result.code == 2
    line = one_line_error(result)
    assert f"bad duration {value!r}: it cannot be negative" in line
    assert "expected one argument" not in line


def test_a_negative_number_still_reaches_its_option(cli: Cli) -> None:
    result = cli("runs", "--limit", "-5")
    assert result.code == 2
    assert "expected a whole number from 1" in one_line_error(result)


def test_worker_concurrency_has_help_text(cli: Cli) -> None:
    result = cli("worker", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert "--concurrency N how many runs this worker executes at once" in text


def test_app_without_attribute_says_that_app_was_assumed(cli: Cli, slow_app: str) -> None:
    result = cli("--app", "slow_app", "runs")
    assert result.code == 2
    line = one_line_error(result)
    assert "module 'slow_app' has no 'app'" in line
    assert "the attribute looked for when none is named; use slow_app:ATTR" in line


def _postgres_url_that_cannot_heal(kind: str, cluster: Cluster) -> tuple[str, str]:
    if kind == "missing-database":
        return cluster.url("no_such_database"), 'database "no_such_database" does not exist'
    return "postgresql://postgres@no-such-host.invalid/tenure", "no-such-host.invalid"


@pytest.mark.parametrize("kind", ["missing-database", "unknown-host"])
@pytest.mark.parametrize("command", [["runs"], ["worker", "--burst"]])
def test_a_postgres_error_that_cannot_heal_fails_at_once_in_one_line(
    cli: Cli, pg_cluster: Cluster, kind: str, command: list[str]
) -> None:
    url, says = _postgres_url_that_cannot_heal(kind, pg_cluster)
    started = time.monotonic()
    result = cli("--database", url, *command, database=False)
    # The retry window is 30 s; an error that cannot heal does not wait for it.
    assert time.monotonic() - started < 10
    assert result.code == 1
    line = one_line_error(result)
    assert says in line and "unavailable for" not in line
