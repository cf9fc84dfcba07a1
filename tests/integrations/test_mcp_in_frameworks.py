"""MCP servers held by a framework agent, made durable: real servers from the package
registry (mcp-server-time, mcp-server-git) behind pydantic-ai's `MCPToolset`. A tool call is
a step with its declared effect; a tool effects= does not name is said at registration and
at its first listing; a worker SIGKILLed around `git_commit` never commits twice (the
repository's log is the ledger).

Before: the server's session was opened on the segment's event loop while its tools were
called from tenure's step loop, and every call hung until the step's 60 s timeout."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from agents import Agent as SdkAgent
from agents.mcp import MCPServerStdio
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus
from tenure.integrations import openai_agents as durable_agents
from tenure.integrations import pydantic_ai as durable
from tenure.testing import crashtest

from . import mcp_agents_app
from . import mcp_pydantic_app as git_app

MakeRuntime = Callable[..., tenure.Runtime]


def time_server() -> StdioTransport:
    return StdioTransport(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"])


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


def test_an_mcp_read_in_a_pydantic_ai_agent_is_a_step(
    make_runtime: MakeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure.integrations")
    rt = make_runtime()
    rt.add_model("default", tenure.providers.Scripted())
    toolset = MCPToolset(time_server(), init_timeout=60)
    agent = Agent(name="clock", instructions="Tell the time.", toolsets=[toolset])
    durable.register(rt, agent, effects={"convert_time": "read_only"})
    said = [r.message for r in caplog.records]
    assert any("lists its tools at run time" in m and "convert_time" in m for m in said), said

    the_time_read_is_a_step(rt, caplog)


@pytest.mark.slow
def test_a_git_commit_through_a_pydantic_ai_agents_mcp_toolset_is_made_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv(git_app.REPO_VARIABLE, str(repo))
    scenario = {
        "name": "commit",
        "agent": "committer",
        "input": {"prompt": "Commit."},
        "script": git_app.script(str(repo)),
    }
    # Its steps: model, write_note, git_add, model, git_commit, model. Killed before the
    # commit ran, and after it ran but before its event (its probe finds it in the log).
    points = ["write-before git_commit@4", "write-after git_commit@4"]
    report = crashtest(
        git_app.rt, [scenario], points=points, database=db_url, workdir=tmp_path / "w"
    )
    assert report.ok, report.violations()
    assert sorted(r.point for r in report.results if r.point != "reference") == sorted(points)
    for result in report.results:
        rt = tenure.Runtime(result.database)
        try:
            run = rt.status(result.run_id)
            assert run is not None and run.status is RunStatus.COMPLETED, (result.point, run)
        finally:
            rt.close()
        assert git_app.commits_of(str(repo), f"{result.run_id}:4") == 1, result.point


def test_an_mcp_read_in_an_openai_agents_sdk_agent_is_a_step(
    make_runtime: MakeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure.integrations")
    rt = make_runtime()
    rt.add_model("default", tenure.providers.Scripted())
    server = MCPServerStdio(
        params={"command": sys.executable, "args": ["-m", "mcp_server_time"]},
        name="time",
        client_session_timeout_seconds=60,
    )
    agent = SdkAgent(name="clock", instructions="Tell the time.", mcp_servers=[server])
    durable_agents.register(rt, agent, effects={"convert_time": "read_only"})
    said = [r.message for r in caplog.records]
    assert any("MCP server time lists its tools at run time" in m for m in said), said

    the_time_read_is_a_step(rt, caplog)


@pytest.mark.slow
def test_a_git_commit_through_an_openai_agents_sdk_agents_mcp_server_is_made_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv(git_app.REPO_VARIABLE, str(repo))
    scenario = {
        "name": "commit",
        "agent": "committer",
        "input": {"prompt": "Commit."},
        "script": mcp_agents_app.script(str(repo)),
    }
    # Killed after the commit ran but before its event: the probe finds the commit. (Before
    # it ran is pydantic-ai's test's case above; each case here starts the SDK and the server
    # in two worker processes, seconds each.)
    points = ["write-after git_commit@4"]
    report = crashtest(
        mcp_agents_app.rt, [scenario], points=points, database=db_url, workdir=tmp_path / "w"
    )
    assert report.ok, report.violations()
    assert sorted(r.point for r in report.results if r.point != "reference") == sorted(points)
    for result in report.results:
        rt = tenure.Runtime(result.database)
        try:
            run = rt.status(result.run_id)
            assert run is not None and run.status is RunStatus.COMPLETED, (result.point, run)
        finally:
            rt.close()
        assert mcp_agents_app.commits_of(str(repo), result.run_id) == 1, result.point


def the_time_read_is_a_step(rt: tenure.Runtime, caplog: pytest.LogCaptureFixture) -> None:
    """The agent "clock" asks mcp-server-time's convert_time once: a journaled step of the
    declared effect with the server's answer; the tool it did not declare
    (get_current_time) is said by name once the server has listed it."""
    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    result = rt.run(
        RunRequest(
            agent="clock",
            input={"prompt": "Noon UTC in Tokyo?"},
            script=[{"call": [{"tool": "convert_time", "args": args}]}, {"say": "21:00"}],
        )
    )

    assert result.outcome is Outcome.COMPLETED, result.error
    (step,) = [e.payload for e in rt.events(result.run_id) if e.kind is EventKind.STEP]
    assert (step["name"], step["effect"], step["error"]) == ("convert_time", "read_only", None)
    assert "21:00" in json.dumps(step["result"])
    undeclared = [r.message for r in caplog.records if "'get_current_time'" in r.message]
    assert len(undeclared) == 1 and "non_idempotent_write" in undeclared[0]
