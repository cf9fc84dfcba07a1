"""Fixtures for the command-line tests: the real `tenure` executable in subprocesses, on a
temporary SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tenure

INVOICE_SCRIPT = [
    {"call": [{"tool": "send_invoice", "args": {"customer_id": "42", "amount_cents": 1999}}]},
    {"say": "Invoice sent."},
]

# A user's app, loaded with `--app slow_app:rt` from the current directory like `celery -A`.
SLOW_APP = '''
import time
import tenure
from tenure import ToolContext, ToolEffect

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())

@rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=5)
def slow_charge(ctx: ToolContext, seconds: float) -> dict:
    """Charge, slowly."""
    time.sleep(seconds)
    return {"charged": True}

not_a_runtime = 42
'''


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Cli:
    cwd: Path
    url: str

    def command(self, *args: str, database: bool = True) -> list[str]:
        prefix = ["--database", self.url] if database else []
        return [sys.executable, "-m", "tenure", *prefix, *args]

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("TENURE_DATABASE_URL", "COLUMNS")}
        env.pop("FORCE_COLOR", None)
        return {**env, **extra}

    def __call__(
        self,
        *args: str,
        database: bool = True,
        timeout: float = 60,
        input: str | None = None,
        **env: str,
    ) -> Result:
        """Run the command; `input` is what it reads on standard input (none: nothing)."""
        done = subprocess.run(
            self.command(*args, database=database),
            cwd=self.cwd,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input if input is not None else "",
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def popen(self, *args: str, database: bool = True) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args, database=database),
            cwd=self.cwd,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def script(self, turns: list[dict[str, Any]], name: str = "script.json") -> str:
        path = self.cwd / name
        path.write_text(json.dumps(turns))
        return str(path)

    def enqueue(self, turns: list[dict[str, Any]], *tools: str) -> str:
        options = [a for t in tools for a in ("--tool", t)]
        result = self("enqueue", "--prompt", "demo", *options, "--script", self.script(turns))
        assert result.code == 0, result.err
        return result.out.strip()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path, f"sqlite:///{tmp_path / 'tenure.db'}")


@pytest.fixture
def runtime(cli: Cli) -> Iterator[tenure.Runtime]:
    """The test's own view of the database (the built-in demo app is not needed to read)."""
    rt = tenure.Runtime(cli.url)
    yield rt
    rt.close()


@pytest.fixture
def slow_app(cli: Cli) -> str:
    (cli.cwd / "slow_app.py").write_text(SLOW_APP)
    return "slow_app:rt"


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def no_runs(cli: Cli) -> bool:
    """Nothing was enqueued: no database file (a command that writes creates it), or one
    without runs."""
    return not (cli.cwd / "tenure.db").exists() or cli("runs", "--json").json() == []


def one_line_error(result: Result) -> str:
    """A user mistake: a one-line message on stderr, nothing on stdout, no traceback."""
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert result.out == ""
    return lines[0]
