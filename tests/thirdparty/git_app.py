"""A real MCP server from the package registry (mcp-server-git) behind tenure.mcp, for the
crash tests: an agent function writes a file, stages it and commits it through the server's
`git_add` and `git_commit`. The commit message carries the run id, so the repository's log
(in `$TENURE_GIT_APP_REPO`) is the ledger: `check` counts a run's commits there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import tenure
import tenure.mcp
from mcp import StdioServerParameters
from tenure import ToolContext, ToolEffect

REPO_VARIABLE = "TENURE_GIT_APP_REPO"
EFFECTS = {
    "git_status": "read_only",
    "git_log": "read_only",
    "git_diff": "read_only",
    "git_diff_staged": "read_only",
    "git_diff_unstaged": "read_only",
    "git_show": "read_only",
    "git_add": "idempotent_write",
    "git_commit": "non_idempotent_write",
}

rt = tenure.Runtime()
rt.add_model("default", tenure.providers.Scripted())
git = tenure.mcp.tools(
    rt,
    StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_git"]),
    effects=EFFECTS,
    timeout=10,
)


def write_file(ctx: ToolContext, repo: str, name: str, text: str) -> str:
    """Write a file in the work tree (the same content every time: idempotent)."""
    (Path(repo) / name).write_text(text, encoding="utf-8")
    return name


@rt.agent
def record_change(ctx: tenure.AgentContext, repo: str, note: str) -> Any:
    """Write a note into the repository and commit it.

    Args:
        repo: the repository's path
        note: what to write
    """
    name = f"{ctx.run_id}.txt"
    ctx.step(write_file, repo, name, note, effect=ToolEffect.IDEMPOTENT_WRITE)
    ctx.tool("git_add", repo_path=repo, files=[name])
    ctx.tool("git_commit", repo_path=repo, message=f"{note} [{ctx.run_id}]")
    return {"committed": name.removesuffix(".txt") == ctx.run_id}


def commits_of(repo: str, run_id: str) -> int:
    log = subprocess.run(
        ["git", "-C", repo, "log", "--format=%s"], capture_output=True, text=True, check=False
    ).stdout
    return sum(line.endswith(f"[{run_id}]") for line in log.splitlines())


def check(name: str, idempotency_key: str) -> int:
    repo = os.environ[REPO_VARIABLE]
    run_id = idempotency_key.rpartition(":")[0]
    if name == "git_commit":
        return commits_of(repo, run_id)
    tracked = subprocess.run(
        ["git", "-C", repo, "ls-files", f"{run_id}.txt"], capture_output=True, text=True
    ).stdout
    if name == "git_add":
        return int(bool(tracked.strip()))
    return int((Path(repo) / f"{run_id}.txt").exists())
