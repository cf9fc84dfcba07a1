"""The integration examples run as a user starts them (`python examples/NAME.py`), on each
store, offline and against an OpenAI-compatible endpoint; the pydantic-ai example's
crash-test scenario file passes `tenure crashtest` with its worker killed inside the refund."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.conftest import ChatServer, completion

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TENURE_"))}
    return subprocess.run(
        args,
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize(
    ("name", "output"),
    [
        ("pydantic_ai_agent", '{"order_id": "A-7", "refunded": 700, "currency": "EUR"}'),
        ("openai_agents_handoff", '"Order A-7 is refunded: 7.00 EUR."'),
    ],
)
def test_the_example_refunds_once_offline(
    tmp_path: Path, db_url: str, name: str, output: str
) -> None:
    done = _run(
        [sys.executable, str(EXAMPLES / f"{name}.py")], tmp_path, TENURE_DATABASE_URL=db_url
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [output, "refunds made: 1"]
    assert "no declared effect" not in done.stderr


def test_the_pydantic_ai_example_on_an_openai_compatible_endpoint(
    tmp_path: Path, db_url: str, chat_server: ChatServer
) -> None:
    endpoint = chat_server.endpoint()
    endpoint.push(
        completion(calls=[("lookup", {"order_id": "A-7"})], model="local"),
        completion(calls=[("refund", {"order_id": "A-7", "amount": 700})], model="local"),
        completion(
            calls=[("final_result", {"order_id": "A-7", "refunded": 700, "currency": "EUR"})],
            model="local",
        ),
    )
    done = _run(
        [sys.executable, str(EXAMPLES / "pydantic_ai_agent.py")],
        tmp_path,
        TENURE_DATABASE_URL=db_url,
        OPENAI_BASE_URL=endpoint.url,
        OPENAI_API_KEY="test-key",
        TENURE_MODEL="local",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "refunds made: 1"
    assert [r["body"]["model"] for r in endpoint.requests] == ["local"] * 3


@pytest.mark.slow
def test_the_pydantic_ai_examples_crashtest_scenarios_pass(tmp_path: Path) -> None:
    done = _run(
        [
            sys.executable,
            "-m",
            "tenure",
            "--app",
            "examples.pydantic_ai_agent:rt",
            "crashtest",
            "--scenarios",
            str(EXAMPLES / "pydantic_ai_agent.crash.json"),
            "--points",
            "write-after refund@3,step 5 (step refund@3)",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 cases" in done.stdout and "no violation" in done.stdout
