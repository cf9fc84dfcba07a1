"""`tenure serve` as a real process on loopback: it refuses to serve writes without a token,
serves the API and the dashboard with one, and stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import AUTH, TOKEN

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_API_TOKEN"}
    if token is not None:
        env["TENURE_API_TOKEN"] = token
    return env


def _serve(tmp_path: Path, token: str | None, *extra: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    database = f"sqlite:///{tmp_path / 'serve.db'}"
    # `tenure serve` refuses a SQLite file that does not exist (a misspelt path).
    subprocess.run(
        [sys.executable, "-m", "tenure", "--database", database, "init"], check=True, timeout=60
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tenure",
            "--database",
            database,
            "serve",
            "--port",
            str(port),
            *extra,
        ],
        env=_env(token),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _, err = proc.communicate(timeout=5)
            raise AssertionError(f"tenure serve did not come up ({proc.returncode}): {err}")
        time.sleep(0.1)


@pytest.fixture
def served_proc(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc, url = _serve(tmp_path, TOKEN)
    yield proc, url
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=15)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    proc, url = _serve(tmp_path, TOKEN)
    yield url
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err


def test_refuses_to_serve_writes_without_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tenure", "serve", "--port", str(_free_port())],
        env=_env(None),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "TENURE_API_TOKEN is not set" in lines[0]
    assert "Traceback" not in result.stderr


def test_serves_the_api_and_the_dashboard_with_a_token(served: str) -> None:
    assert httpx.get(f"{served}/api/runs").status_code == 401
    created = httpx.post(
        f"{served}/api/runs",
        json={"prompt": "hello", "script": [{"say": "hi"}]},
        headers=AUTH,
    )
    assert created.status_code == 201
    run_id = created.json()["id"]
    run = httpx.get(f"{served}/api/runs/{run_id}", headers=AUTH).json()
    assert run["status"] == "queued"
    assert httpx.get(f"{served}/api/openapi.json").json()["info"]["title"] == "tenure"
    login = httpx.get(f"{served}/login")
    assert login.status_code == 200 and "API token" in login.text
    assert httpx.get(f"{served}/static/tenure.css").status_code == 200
    metrics = httpx.get(f"{served}/metrics", headers=AUTH).text
    assert 'tenure_runs{status="queued"} 1.0' in metrics


def test_public_read_without_a_token_is_read_only(tmp_path: Path) -> None:
    proc, url = _serve(tmp_path, None, "--public-read")
    try:
        assert httpx.get(f"{url}/api/runs").status_code == 200
        assert httpx.get(f"{url}/").status_code == 200
        refused = httpx.post(f"{url}/api/reap", headers=AUTH)
        assert refused.status_code == 403 and "writes are disabled" in refused.json()["error"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert "read-only" in err


def test_work_in_the_server_process_shows_its_segments_on_metrics(tmp_path: Path) -> None:
    proc, url = _serve(tmp_path, TOKEN, "--work", "2")
    try:
        created = httpx.post(
            f"{url}/api/runs", json={"prompt": "p", "script": [{"say": "hi"}]}, headers=AUTH
        )
        run_id = created.json()["id"]
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH).json()["status"] != "completed":
            assert time.monotonic() < deadline, "the run was not worked"
            time.sleep(0.1)
        metrics = httpx.get(f"{url}/metrics", headers=AUTH).text
        assert "tenure_claims_total 1.0" in metrics
        assert 'tenure_step_seconds_count{kind="llm"} 1.0' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "in this process" in err


def test_a_stop_does_not_wait_for_a_followed_run(
    served_proc: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = served_proc
    created = httpx.post(
        f"{url}/api/runs", json={"prompt": "p", "script": [{"say": "hi"}]}, headers=AUTH
    )
    run_id = created.json()["id"]  # queued, and nobody works it: its stream stays open
    lines: list[str] = []

    def follow() -> None:
        try:
            with httpx.stream(
                "GET", f"{url}/api/runs/{run_id}/events/stream", headers=AUTH, timeout=30
            ) as response:
                for line in response.iter_lines():
                    lines.append(line)
        except httpx.HTTPError:
            pass

    import threading

    reader = threading.Thread(target=follow)
    reader.start()
    deadline = time.monotonic() + 10
    while not any(line.startswith("data:") for line in lines):
        assert time.monotonic() < deadline, "no event arrived"
        time.sleep(0.05)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert time.monotonic() - started < 15
    reader.join(10)


def test_a_foreign_host_is_refused_and_allowed_hosts_are_answered(tmp_path: Path) -> None:
    proc, url = _serve(tmp_path, None, "--public-read", "--allowed-host", "tenure.example.com")
    try:
        refused = httpx.get(f"{url}/api/runs", headers={"Host": "rebound.attacker.example"})
        assert refused.status_code == 400 and "unknown Host" in refused.text
        assert httpx.get(f"{url}/", headers={"Host": "rebound.attacker.example"}).status_code == 400
        assert httpx.get(f"{url}/api/runs", headers={"Host": "tenure.example.com"}).is_success
        assert httpx.get(f"{url}/api/runs", headers={"Host": "localhost"}).is_success
        assert httpx.get(f"{url}/api/runs").is_success  # 127.0.0.1:PORT
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_a_bad_allowed_host_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tenure", "serve", "--public-read", "--allowed-host", "a b/c"],
        env=_env(None),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["tenure: allowed host 'a b/c' is not a host name"]
