"""A pydantic-ai agent holding a real MCP server from the package registry (mcp-server-git,
through pydantic-ai's `MCPToolset`), made durable, for the crash tests: it writes a note (a
function tool), stages it and commits it through the server. Its `git_commit` is a
`non_idempotent_write`; the toolset's `process_tool_call` hook appends the step's
idempotency key to the commit message, so the repository's log (in `$TENURE_GIT_APP_REPO`)
is the ledger: `check` counts a key's commits there, and the probe asks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, RunContext
from pydantic_ai.mcp import CallToolFunc, MCPToolset

import tenure
from tenure.integrations import pydantic_ai as durable

REPO_VARIABLE = "TENURE_GIT_APP_REPO"
EFFECTS = {
    "write_note": "idempotent_write",
    "git_status": "read_only",
    "git_add": "idempotent_write",
    "git_commit": "non_idempotent_write",
}


async def keyed(ctx: RunContext[Any], call: CallToolFunc, name: str, args: dict[str, Any]) -> Any:
    """The write carries its step's idempotency key to the outside system (here: its log)."""
    step = durable.step_context()
    if step is None:
        return await call(name, args)
    if name == "git_commit":
        args = {**args, "message": f"{args['message']} [{step.idempotency_key}]"}
    return await call(name, args, metadata={"idempotency_key": step.idempotency_key})


git = MCPToolset(
    StdioTransport(sys.executable, ["-m", "mcp_server_git"]),
    process_tool_call=keyed,
    init_timeout=60,  # a loaded machine takes seconds to start a Python server
)
agent = Agent(name="committer", instructions="Commit what the user asks.", toolsets=[git])


@agent.tool_plain
def write_note(text: str) -> str:
    """Write this run's note into the work tree (the same file every time: idempotent)."""
    step = durable.step_context()
    assert step is not None
    name = f"{step.idempotency_key.rpartition(':')[0]}.txt"
    (Path(os.environ[REPO_VARIABLE]) / name).write_text(text, encoding="utf-8")
    return name


rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())


def commits_of(repo: str, key: str) -> int:
    log = subprocess.run(
        ["git", "-C", repo, "log", "--format=%s"], capture_output=True, text=True, check=False
    ).stdout
    return sum(line.endswith(f"[{key}]") for line in log.splitlines())


def check(name: str, idempotency_key: str) -> int:
    """How often the repository saw each write: a commit by its key in the log; the note
    (idempotent: at most one either way) by its file, written and staged."""
    repo = os.environ[REPO_VARIABLE]
    if name == "git_commit":
        return commits_of(repo, idempotency_key)
    note = f"{idempotency_key.rpartition(':')[0]}.txt"
    if name == "git_add":
        staged = subprocess.run(
            ["git", "-C", repo, "ls-files", note], capture_output=True, text=True, check=False
        ).stdout
        return int(bool(staged.strip()))
    return int((Path(repo) / note).exists())


def committed(ctx: tenure.ToolContext, arguments: dict[str, Any]) -> tenure.Probe:
    """Ask the repository's log whether the commit under this key was made."""
    if commits_of(arguments["repo_path"], ctx.idempotency_key):
        return tenure.Probe.done("committed")
    return tenure.Probe.not_done()


durable.register(rt, agent, effects=EFFECTS, probes={"git_commit": committed})


def script(repo: str) -> list[dict[str, Any]]:
    """What the scripted model answers: write the note and stage it (steps 1 and 2), commit
    (step 4), then say so."""
    return [
        {
            "call": [
                {"tool": "write_note", "args": {"text": "hello"}},
                {"tool": "git_add", "args": {"repo_path": repo, "files": ["."]}},
            ]
        },
        {"call": [{"tool": "git_commit", "args": {"repo_path": repo, "message": "hello"}}]},
        {"say": "committed"},
    ]
