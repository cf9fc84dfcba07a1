"""An OpenAI Agents SDK agent holding a real MCP server from the package registry
(mcp-server-git, in its `mcp_servers`), made durable, for the crash tests: the script of
mcp_pydantic_app (write the run's note, stage it, commit). The SDK has no hook to carry the
step's idempotency key to the server, so the ledger is the log of the run's note file: the
commits that touch `RUN_ID.txt`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.mcp import MCPServerStdio

import tenure
from tenure.integrations import openai_agents as durable

from .mcp_pydantic_app import EFFECTS, REPO_VARIABLE
from .mcp_pydantic_app import check as _check_note

git = MCPServerStdio(
    params={"command": sys.executable, "args": ["-m", "mcp_server_git"]},
    name="git",
    client_session_timeout_seconds=60,  # a loaded machine takes seconds to start a server
)


@function_tool
def write_note(text: str) -> str:
    """Write this run's note into the work tree (the same file every time: idempotent)."""
    step = durable.step_context()
    assert step is not None
    name = f"{step.idempotency_key.rpartition(':')[0]}.txt"
    (Path(os.environ[REPO_VARIABLE]) / name).write_text(text, encoding="utf-8")
    return name


agent = Agent(
    name="committer",
    instructions="Commit what the user asks.",
    tools=[write_note],
    mcp_servers=[git],
)


def commits_of(repo: str, run_id: str) -> int:
    log = subprocess.run(
        ["git", "-C", repo, "log", "--format=%H", "--", f"{run_id}.txt"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return len(log.split())


def check(name: str, idempotency_key: str) -> int:
    if name == "git_commit":
        return commits_of(os.environ[REPO_VARIABLE], idempotency_key.rpartition(":")[0])
    return _check_note(name, idempotency_key)


def committed(ctx: tenure.ToolContext, arguments: dict[str, Any]) -> tenure.Probe:
    """Ask the repository's log whether this run's note was committed."""
    if commits_of(arguments["repo_path"], ctx.run_id):
        return tenure.Probe.done("committed")
    return tenure.Probe.not_done()


rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())
durable.register(rt, agent, effects=EFFECTS, probes={"git_commit": committed})


def script(repo: str, message: str = "hello") -> list[dict[str, Any]]:
    return [
        {
            "call": [
                {"tool": "write_note", "args": {"text": "hello"}},
                {"tool": "git_add", "args": {"repo_path": repo, "files": ["."]}},
            ]
        },
        {"call": [{"tool": "git_commit", "args": {"repo_path": repo, "message": message}}]},
        {"say": "committed"},
    ]
