"""The test MCP server (crm_server.py), over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure.mcp
from mcp import StdioServerParameters

SERVER = Path(__file__).with_name("crm_server.py")
EFFECTS = {"find_customer": "read_only", "upsert_note": "idempotent_write"}


@pytest.fixture
def crm_log(tmp_path: Path) -> Path:
    return tmp_path / "crm.log"


def writes(log: Path) -> list[dict[str, Any]]:
    """What the server logged, one entry per write it received."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def stdio_server(crm_log: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER), "stdio"],
        env={**os.environ, "CRM_LOG": str(crm_log)},
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(port: int, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the MCP test server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the MCP test server did not start listening")


@pytest.fixture
def http_server(crm_log: Path) -> Iterator[str]:
    """The URL of the server on a loopback port, run by the SDK's own HTTP server."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**os.environ, "CRM_LOG": str(crm_log)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process, time.monotonic() + 30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def register() -> Iterator[Callable[..., tenure.mcp.Registration]]:
    """tenure.mcp.tools(), with every session closed at the end of the test."""
    made: list[tenure.mcp.Registration] = []

    def make(*args: Any, **kwargs: Any) -> tenure.mcp.Registration:
        registration = tenure.mcp.tools(*args, **kwargs)
        made.append(registration)
        return registration

    yield make
    for registration in made:
        registration.close()
