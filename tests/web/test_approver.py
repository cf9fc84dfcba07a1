"""What a person reads before deciding on a held call: the arguments of every call whose tool is
not sensitive, without revealing anything; a sensitive tool's only when revealed, with a token.
On every store."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import Outcome, RunStatus

from .conftest import (
    AUTH,
    REFUND_ARGS,
    SHIP_ARGS,
    UNLOCK_ARGS,
    WIRE_ARGS,
    Held,
    login,
    make_runtime,
    seed_held,
)


@pytest.fixture
def rt(db_url: str) -> Iterator[tenure.Runtime]:
    runtime = make_runtime(db_url)
    yield runtime
    runtime.close()


@pytest.fixture
def held(rt: tenure.Runtime) -> Held:
    return seed_held(rt)


def _calls(pending: list[dict[str, object]], run_id: str) -> list[dict[str, object]]:
    (run,) = [r for r in pending if r["id"] == run_id]
    calls = run["pending_calls"]
    assert isinstance(calls, list)
    return calls


def test_api_pending_shows_the_arguments_of_calls_not_sensitive(
    client: TestClient, held: Held
) -> None:
    pending = client.get("/api/pending", headers=AUTH).json()
    (refund,) = _calls(pending, held.refund)
    assert refund["args"] == REFUND_ARGS and refund["sensitive"] is False
    assert refund["description"] == "Refund a customer (a person approves it first)."
    assert refund["effect"] == "non_idempotent_write" and refund["kind"] == "approval"
    (ship,) = _calls(pending, held.ship)
    assert ship["args"] == SHIP_ARGS and ship["kind"] == "input"
    (wire,) = _calls(pending, held.wire)
    assert wire["args"] == "<hidden>" and wire["sensitive"] is True
    (unlock,) = _calls(pending, held.unlock)
    assert unlock["args"] == "<hidden>" and unlock["sensitive"] is True
    # The run objects say the same of their held calls; the prompt stays hidden elsewhere.
    (run,) = [r for r in pending if r["id"] == held.refund]
    assert run["waiting"]["calls"][0]["args"] == REFUND_ARGS
    (run,) = [r for r in pending if r["id"] == held.wire]
    assert run["waiting"]["calls"][0]["args"] == "<hidden>"
    events = client.get(f"/api/runs/{held.refund}/events", headers=AUTH).text
    assert "refund please" not in events and "A-77" not in events
    one = client.get(f"/api/runs/{held.refund}/pending-calls", headers=AUTH).json()
    assert one[0]["args"] == REFUND_ARGS


def test_api_reveals_a_sensitive_tools_arguments_to_a_token_holder_only(
    make_client: Callable[..., TestClient], held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(public_read=True)
    anonymous = client.get("/api/pending").json()
    assert _calls(anonymous, held.refund)[0]["args"] == REFUND_ARGS
    assert _calls(anonymous, held.wire)[0]["args"] == "<hidden>"
    assert client.get("/api/pending?reveal=true").status_code == 401
    url = f"/api/runs/{held.wire}/pending-calls?reveal=true"
    assert client.get(url).status_code == 401
    with caplog.at_level(logging.INFO, logger="tenure.web.audit"):
        revealed = client.get(url, headers={**AUTH, "X-Tenure-Actor": "grace"})
        everything = client.get("/api/pending?reveal=true", headers=AUTH).json()
    assert revealed.json()[0]["args"] == WIRE_ARGS
    assert _calls(everything, held.unlock)[0]["args"] == UNLOCK_ARGS
    assert f"reveal sensitive arguments of {held.wire} by grace (token)" in caplog.text
    # Revealing nothing sensitive is no audited reveal.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tenure.web.audit"):
        client.get(f"/api/runs/{held.refund}/pending-calls?reveal=true", headers=AUTH)
    assert "reveal" not in caplog.text


def test_pending_page_shows_what_is_decided_without_revealing(
    client: TestClient, held: Held
) -> None:
    login(client, "ada")
    page = client.get("/pending").text
    refund = _section(page, held.refund)
    assert "<th>amount</th>" in refund and "4321" in refund and "A-77" in refund
    assert "Refund a customer (a person approves it first)." in refund
    assert "runs once; cannot be undone by tenure" in refund
    wire = _section(page, held.wire)
    assert "Wire money to a bank account." in wire and "DE89" not in page
    assert "&lt;hidden&gt;" in wire and "reveal arguments" in wire
    assert "reveal sensitive arguments" in page
    ship = _section(page, held.ship)
    assert "runs once" not in ship  # an idempotent write
    revealed = client.get("/pending?reveal=true").text
    assert "DE89 3704 0044 0532 0130 00" in _section(revealed, held.wire)
    assert "refund please" not in revealed  # prompts are not what reveal shows here


def test_a_waiting_runs_page_shows_its_held_calls(client: TestClient, held: Held) -> None:
    login(client, "ada")
    page = client.get(f"/runs/{held.refund}").text
    assert "4321" in page and "A-77" in page and "runs once; cannot be undone by tenure" in page
    assert "refund please" not in page  # the timeline keeps content hidden
    assert "DE89" not in client.get(f"/runs/{held.wire}").text
    assert "DE89" in client.get(f"/runs/{held.wire}?reveal=true").text


def test_an_input_form_starts_from_the_models_proposal_but_never_a_sensitive_one(
    client: TestClient, rt: tenure.Runtime, held: Held
) -> None:
    csrf = login(client, "ada")
    ship = client.get(f"/runs/{held.ship}").text
    assert re.search(r'name="value.address" value="9 Model Way" placeholder="9 Model Way"', ship)
    assert re.search(r'name="value.express" value="true" checked', ship)
    assert "proposed by the model" in ship and "submit it as it is, or change it" in ship
    for url in (f"/runs/{held.unlock}", f"/runs/{held.unlock}?reveal=true"):
        unlock = client.get(url).text
        start = unlock.index('class="input-form"')
        form = unlock[start : unlock.index("</form>", start)]
        assert "1357" not in form and "proposed by the model" not in form
        assert "submit it as it is" not in unlock
        assert re.search(r'name="value.pin" required', form)
    # Accepting the proposal as it stands.
    submitted = client.post(
        f"/runs/{held.ship}/input",
        data={"csrf": csrf, "value.address": "9 Model Way", "value.express": "true"},
        follow_redirects=False,
    )
    assert submitted.status_code == 303
    result = rt.run_queued(held.ship)
    assert result is not None and result.outcome is Outcome.COMPLETED
    tool = next(e for e in rt.events(held.ship) if e.kind == "tool")
    assert tool.payload["result"] == "shipping to 9 Model Way (express)"


def test_approving_from_the_pending_page(
    client: TestClient, rt: tenure.Runtime, held: Held
) -> None:
    csrf = login(client, "ada")
    decided = client.post(
        f"/runs/{held.refund}/decision",
        data={"csrf": csrf, "decision": "approve", "note": "order checked"},
        follow_redirects=False,
    )
    assert decided.status_code == 303 and decided.headers["location"].endswith("done=approved")
    assert rt.status(held.refund).status is RunStatus.QUEUED  # type: ignore[union-attr]
    result = rt.run_queued(held.refund)
    assert result is not None and result.outcome is Outcome.COMPLETED
    tool = next(e for e in rt.events(held.refund) if e.kind == "tool")
    assert tool.payload["result"] == {"refunded": 4321}
    assert held.refund not in client.get("/pending").text


def _section(page: str, run_id: str) -> str:
    start = page.index(f'href="/runs/{run_id}"')
    end = page.find('<section class="pending-run">', start)
    return page[start : end if end != -1 else len(page)]
