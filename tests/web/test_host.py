"""DNS rebinding: a request whose Host names no host this server serves is refused (400)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from tenure.web._security import served_hosts


@pytest.fixture
def public(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(
        token=None,
        public_read=True,
        allowed_hosts=served_hosts("127.0.0.1", ["tenure.example.com"]),
    )


@pytest.mark.parametrize("path", ["/api/runs", "/", "/metrics", "/api/health"])
def test_a_foreign_host_is_refused_before_anything_is_read(public: TestClient, path: str) -> None:
    refused = public.get(path, headers={"Host": "rebound.attacker.example"})
    assert refused.status_code == 400
    assert refused.headers["content-type"].startswith("text/plain")
    assert refused.text.startswith("unknown Host 'rebound.attacker.example'")
    assert "--allowed-host" in refused.text
    assert refused.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8000",
        "localhost:8000",
        "LOCALHOST",
        "tenure.example.com",
        "tenure.example.com.:443",
        "[::1]:8000",
        "192.0.2.7:8000",
    ],
)
def test_served_names_and_ip_addresses_are_answered(public: TestClient, host: str) -> None:
    assert public.get("/api/runs", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["", "localhost:http", "[::1", "evil.example:8000"])
def test_a_missing_or_malformed_host_is_refused(public: TestClient, host: str) -> None:
    assert public.get("/api/runs", headers={"Host": host}).status_code == 400


def test_a_server_bound_to_every_interface_answers_to_the_machines_names() -> None:
    names = served_hosts("0.0.0.0")
    assert "localhost" in names and len(names) > 2
    assert "rebound.attacker.example" not in names


def test_without_allowed_hosts_the_app_checks_nothing(
    make_client: Callable[..., TestClient],
) -> None:
    # An app embedded in a user's own server leaves the Host to that server.
    client = make_client(token=None, public_read=True)
    assert client.get("/api/runs", headers={"Host": "anything.example"}).status_code == 200
