"""Who may read and write, cross-site forms, hidden content, and errors without traces."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunStatus
from tenure.web import WritesNeedToken, create_app

from .conftest import AUTH, SECRET, TOKEN, Seeded, csrf_of, login

READS = ["/api/runs", "/api/counts", "/api/leases", "/metrics"]


def test_reads_and_writes_need_the_token(client: TestClient, seeded: Seeded) -> None:
    for path in [*READS, f"/api/runs/{seeded.dead}", f"/api/runs/{seeded.dead}/events"]:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"] == "Bearer"
        assert client.get(path, headers=AUTH).status_code == 200, path
    wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
    assert client.get("/api/runs", headers=wrong).status_code == 401
    assert client.get("/api/runs", headers={"Authorization": TOKEN}).status_code == 401
    write = client.post(f"/api/runs/{seeded.dead}/redrive")
    assert write.status_code == 401 and write.json() == {"error": "a bearer token is required"}
    assert client.get("/api/health").status_code == 200  # says nothing about runs


def test_the_token_is_compared_in_constant_time(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert client.get("/api/runs", headers={"Authorization": "Bearer guess"}).status_code == 401
    assert (b"guess", TOKEN.encode()) in compared


def test_public_read_lets_anyone_read_but_not_write_or_reveal(
    make_client: Callable[..., TestClient], seeded: Seeded
) -> None:
    client = make_client(public_read=True)
    for path in READS:
        assert client.get(path).status_code == 200, path
    events = client.get(f"/api/runs/{seeded.completed}/events")
    assert events.status_code == 200 and SECRET not in events.text
    assert client.get(f"/api/runs/{seeded.completed}/events?reveal=true").status_code == 401
    revealed = client.get(f"/api/runs/{seeded.completed}/events?reveal=true", headers=AUTH)
    assert SECRET in revealed.text
    assert client.post(f"/api/runs/{seeded.dead}/redrive").status_code == 401
    assert client.get("/").status_code == 200  # the dashboard reads without a login


def test_without_a_token_the_server_is_read_only_and_only_with_public_read(
    rt: tenure.Runtime, seeded: Seeded
) -> None:
    with pytest.raises(WritesNeedToken, match="TENURE_API_TOKEN is not set"):
        create_app(rt, token=None)
    with TestClient(create_app(rt, token=None, public_read=True)) as client:
        assert client.get("/api/runs").status_code == 200
        refused = client.post(f"/api/runs/{seeded.dead}/redrive", headers=AUTH)
        assert refused.status_code == 403 and "writes are disabled" in refused.json()["error"]
        assert "read-only" in client.get("/login").text
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]


def test_a_session_cookie_never_authorizes_an_api_write(client: TestClient, seeded: Seeded) -> None:
    login(client)
    assert client.get("/api/runs").status_code == 200  # the dashboard's live reads
    assert client.post(f"/api/runs/{seeded.dead}/redrive").status_code == 401


def test_dashboard_forms_need_their_csrf_token(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded
) -> None:
    csrf = login(client)
    url = f"/runs/{seeded.dead}/redrive"
    missing = client.post(url, data={}, follow_redirects=False)
    assert missing.status_code == 403 and "expired" in missing.text
    forged = client.post(url, data={"csrf": "x" * 43}, follow_redirects=False)
    assert forged.status_code == 403
    cross = client.post(
        url, data={"csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False
    )
    assert cross.status_code == 403
    other = client.post(
        url, data={"csrf": csrf}, headers={"Origin": "https://evil.example"}, follow_redirects=False
    )
    assert other.status_code == 403
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]
    ok = client.post(url, data={"csrf": csrf}, follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"].endswith("?done=redriven")
    assert rt.status(seeded.dead).status is RunStatus.QUEUED  # type: ignore[union-attr]


def test_a_csrf_token_is_bound_to_its_browser(
    make_client: Callable[..., TestClient], rt: tenure.Runtime, seeded: Seeded
) -> None:
    mine, theirs = make_client(), make_client()
    login(mine)
    stolen = login(theirs)
    # The attacker's token, replayed from the operator's logged-in browser.
    response = mine.post(f"/runs/{seeded.dead}/redrive", data={"csrf": stolen})
    assert response.status_code == 403
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]


def test_forms_refuse_a_browser_that_is_not_logged_in(client: TestClient, seeded: Seeded) -> None:
    page = client.get("/login")
    response = client.post(f"/runs/{seeded.queued}/cancel", data={"csrf": csrf_of(page.text)})
    assert response.status_code == 403 and "log in" in response.text


def test_login_cookies_are_strict_and_http_only(client: TestClient) -> None:
    page = client.get("/login")
    assert "samesite=strict" in page.headers["set-cookie"].lower()
    response = client.post(
        "/login",
        data={"token": TOKEN, "name": "ada", "csrf": csrf_of(page.text), "next": "//evil.example"},
        follow_redirects=False,
    )
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert response.headers["location"] == "/"  # never off-site
    bad = client.post("/login", data={"token": "nope", "csrf": csrf_of(page.text)})
    assert bad.status_code == 401 and "not the API token" in bad.text


def test_pages_redirect_to_login_and_carry_strict_headers(client: TestClient) -> None:
    response = client.get("/dead-letters", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/login")
    login(client)
    page = client.get("/")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert "http://" not in page.text.replace("http://testserver", "")
    assert "https://" not in page.text


def test_an_unexpected_error_answers_without_a_trace(
    client: TestClient, rt: tenure.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals /srv/app.py line 12")

    monkeypatch.setattr(rt, "runs", broken)
    response = client.get("/api/runs", headers=AUTH)
    assert response.status_code == 500
    assert response.json() == {"error": "internal error (see the server log)"}
    login_page = client.get("/login")
    assert login_page.status_code == 200
    login(client)
    page = client.get("/")
    assert page.status_code == 500
    assert "Traceback" not in page.text and "secret internals" not in page.text


def test_a_database_error_is_a_503_in_one_line(
    client: TestClient, rt: tenure.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: object, **kwargs: object) -> None:
        raise tenure.DatabaseUnavailable("database is locked")

    monkeypatch.setattr(rt, "status", down)
    response = client.get("/api/runs/x", headers=AUTH)
    assert response.status_code == 503
    assert response.json() == {"error": "database unavailable: database is locked"}


def test_pages_answer_errors_with_an_error_page(client: TestClient) -> None:
    login(client)
    missing = client.get("/runs/no-such-run")
    assert missing.status_code == 404 and "no run with id" in missing.text
    assert missing.headers["content-type"].startswith("text/html")
    bad = client.get("/?status=sleeping")
    assert bad.status_code == 400 and "sleeping" in bad.text
    assert client.get("/runs/%00bad").status_code == 422


def test_public_read_pages_show_no_content_and_no_forms(
    make_client: Callable[..., TestClient], seeded: Seeded
) -> None:
    client = make_client(public_read=True)
    page = client.get(f"/runs/{seeded.completed}")
    assert page.status_code == 200 and SECRET not in page.text and "gold plan" not in page.text
    assert "<form" not in page.text.replace('action="/logout"', "")
    assert client.get(f"/runs/{seeded.completed}?reveal=true").status_code == 401
    plan = client.get(f"/runs/{seeded.dead}/redrive")
    assert plan.status_code == 200 and "Log in" in plan.text and 'action="/runs/' not in plan.text
