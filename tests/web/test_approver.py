"""What a person reads before deciding on a held call: the arguments of every call whose tool is
not sensitive, without revealing anything; a sensitive tool's only when revealed, with a token.
On every store."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import Outcome, RunStatus

from .._raw import backdate_update, raw_execute
from .conftest import (
    ASKED_PROMPTS,
    ASKED_WORDS,
    AUTH,
    REFUND_ARGS,
    SHIP_ARGS,
    UNLOCK_ARGS,
    WIRE_ARGS,
    Held,
    login,
    make_runtime,
    seed_asked,
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
    # Why the refund was asked for is on its card too; the wire's is hidden with its tool.
    assert "refund please" in refund and "wire please" not in page
    assert "hidden: sensitive tool wire" in wire
    revealed = client.get("/pending?reveal=true").text
    assert "DE89 3704 0044 0532 0130 00" in _section(revealed, held.wire)
    assert "wire please" in _section(revealed, held.wire)


def test_a_waiting_runs_page_shows_its_held_calls(client: TestClient, held: Held) -> None:
    login(client, "ada")
    page = client.get(f"/runs/{held.refund}").text
    assert "4321" in page and "A-77" in page and "runs once; cannot be undone by tenure" in page
    # The card says why the call was asked for; the timeline keeps content hidden.
    assert "refund please" in page[: page.index('id="timeline"')]
    assert "refund please" not in page[page.index('id="timeline"') :]
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


def test_api_pending_says_why_each_call_was_made_and_how_long_it_waited(
    make_client: Callable[..., TestClient],
    rt: tenure.Runtime,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked = seed_asked(rt)
    backdate_update(db_url, asked.b2, 3 * 3600)
    client = make_client()
    pending = {r["id"]: r for r in client.get("/api/pending", headers=AUTH).json()}
    a1, b2 = pending[asked.a1]["context"], pending[asked.b2]["context"]
    # The two refunds' calls look alike; their prompts and the model's words do not.
    assert a1["prompt"] == ASKED_PROMPTS["a1"] and a1["model_text"] == ASKED_WORDS["a1"]
    assert b2["prompt"] == ASKED_PROMPTS["b2"] and b2["model_text"] == ASKED_WORDS["b2"]
    assert a1["hidden"] is None and a1["damaged"] is None
    assert 0 <= a1["waited_seconds"] < 3600 and b2["waited_seconds"] >= 3 * 3600
    assert b2["waiting_since"] == pending[asked.b2]["updated_at"]
    # The wire's tool is sensitive: its prompt and the model's words are hidden like its
    # arguments, and say why; how long it has waited is shown.
    wire = pending[asked.wire]["context"]
    assert wire["prompt"] == "<hidden>" and wire["model_text"] == "<hidden>"
    assert wire["hidden"] == "sensitive tool wire" and wire["waited_seconds"] >= 0
    assert "DE89" not in json.dumps(pending)
    # Anyone who may read held arguments reads the context too; revealing a sensitive one
    # takes a token and is audited.
    anonymous = make_client(public_read=True).get("/api/pending").json()
    assert {r["id"]: r for r in anonymous}[asked.b2]["context"]["model_text"] == ASKED_WORDS["b2"]
    with caplog.at_level(logging.INFO, logger="tenure.web.audit"):
        revealed = client.get("/api/pending?reveal=true", headers=AUTH).json()
    wire = {r["id"]: r for r in revealed}[asked.wire]["context"]
    assert wire["prompt"] == ASKED_PROMPTS["wire"] and wire["model_text"] == ASKED_WORDS["wire"]
    assert wire["hidden"] is None
    assert f"reveal the prompt and the model's words of {asked.wire} by api (token)" in caplog.text


def test_a_damaged_row_shows_as_damaged_and_the_pending_listing_goes_on(
    client: TestClient, rt: tenure.Runtime, db_url: str
) -> None:
    asked = seed_asked(rt)
    turn = next(e.sequence for e in rt.events(asked.a1) if e.kind == "llm")
    # JSON that is not an object: both stores hold it (PostgreSQL's json column refuses
    # text that is not JSON; the request and waiting columns are text on both).
    changed = raw_execute(
        db_url,
        "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = ?",
        '"just text"',
        asked.a1,
        turn,
    )
    assert changed == 1
    assert raw_execute(db_url, "UPDATE tenure_runs SET request = ? WHERE id = ?", "{no", asked.b2)
    # A time neither store's reader can turn into a datetime (year 33715).
    far = 1e12 + 1.7e9 if db_url.startswith("sqlite") else "33715-01-01 00:00:00+00"
    assert raw_execute(db_url, "UPDATE tenure_runs SET updated_at = ? WHERE id = ?", far, asked.a1)
    assert raw_execute(db_url, "UPDATE tenure_runs SET waiting = ? WHERE id = ?", "[1", asked.wire)
    response = client.get("/api/pending", headers=AUTH)
    assert response.status_code == 200, response.text
    pending = {r["id"]: r for r in response.json()}
    a1 = pending[asked.a1]["context"]
    assert a1["prompt"] == ASKED_PROMPTS["a1"] and a1["model_text"] is None
    assert "the model's turn" in a1["damaged"] and "when it began to wait" in a1["damaged"]
    assert a1["waited_seconds"] is None and a1["waiting_since"] is None
    b2 = pending[asked.b2]["context"]
    # The run's request event still has its prompt.
    assert b2["model_text"] == ASKED_WORDS["b2"] and b2["prompt"] == ASKED_PROMPTS["b2"]
    wire = pending[asked.wire]["context"]
    # Which calls it holds cannot be read: whether one is sensitive neither, so it is hidden.
    assert wire["prompt"] == "<hidden>" and wire["model_text"] == "<hidden>"
    assert "held calls" in wire["hidden"] and "held calls" in wire["damaged"]
    login(client, "ada")
    page = client.get("/pending")
    assert page.status_code == 200
    assert "damaged" in _section(page.text, asked.a1) and "DE89" not in page.text
