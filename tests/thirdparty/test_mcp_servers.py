"""Real MCP servers from the package registry behind tenure.mcp: mcp-server-time's tools run
in a run; mcp-server-git's `git_commit` is a fenced write, and a worker SIGKILLed around the
commit never commits twice (the repository's log is the ledger)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import tenure
import tenure.mcp
from mcp import StdioServerParameters
from tenure import Outcome, RunRequest, RunStatus, ToolEffect
from tenure.testing import crashtest

from . import git_app


def make_repo(path: Path) -> Path:
    path.mkdir()
    for command in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "tests@example.invalid"],
        ["config", "user.name", "tests"],
        ["commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", "-C", str(path), *command], check=True)
    return path


def test_the_time_servers_tools_run_as_read_only_steps(
    make_runtime: Callable[..., tenure.Runtime],
) -> None:
    rt = make_runtime()
    rt.add_model("default", tenure.providers.Scripted())
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    )
    with tenure.mcp.tools(
        rt, server, effects={"get_current_time": "read_only", "convert_time": "read_only"}
    ) as registered:
        assert {t.name: t.effect for t in registered} == {
            "get_current_time": ToolEffect.READ_ONLY,
            "convert_time": ToolEffect.READ_ONLY,
        }
        args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        result = rt.run(
            RunRequest(
                prompt="noon UTC in Tokyo?",
                tools=["convert_time"],
                script=[{"call": [{"tool": "convert_time", "args": args}]}, {"say": "21:00"}],
            )
        )
    assert result.outcome is Outcome.COMPLETED, result.error
    (tool,) = [e for e in rt.events(result.run_id) if e.kind is tenure.EventKind.TOOL]
    assert tool.payload["error"] is None
    assert "21:00" in json.dumps(tool.payload["result"])


@pytest.mark.slow
def test_git_commit_is_fenced_and_never_committed_twice(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv(git_app.REPO_VARIABLE, str(repo))
    assert git_app.git["git_commit"].effect is ToolEffect.NON_IDEMPOTENT_WRITE
    scenario = {
        "name": "commit",
        "agent": "record_change",
        "input": {"repo": str(repo), "note": "hello"},
    }
    # Killed after the commit returned but before its event (the write is in doubt: the run
    # is stopped, never repeated), and after its event (the run completes from the journal).
    points = ["write-after git_commit@2", "step 4 (tool git_commit@2)"]
    report = crashtest(
        git_app.rt, [scenario], points=points, database=db_url, workdir=tmp_path / "w"
    )
    assert report.ok, report.violations()
    statuses = {}
    for result in report.results:
        rt = tenure.Runtime(result.database)
        try:
            run = rt.status(result.run_id)
            assert run is not None
            statuses[result.point] = run.status
        finally:
            rt.close()
        assert git_app.commits_of(str(repo), result.run_id) == 1, result.point
    assert statuses == {
        "reference": RunStatus.COMPLETED,
        "write-after git_commit@2": RunStatus.FAILED,
        "step 4 (tool git_commit@2)": RunStatus.COMPLETED,
    }
