"""Runs waiting for a person: the API's and the dashboard's decisions and input."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import Outcome, RunStatus

from .conftest import AUTH, Waiting, csrf_of, login, seed_waiting


@pytest.fixture
def waiting(rt: tenure.Runtime) -> Waiting:
    return seed_waiting(rt)


def test_pending_runs_and_their_held_calls(client: TestClient, waiting: Waiting) -> None:
    pending = client.get("/api/pending", headers=AUTH).json()
    assert {r["id"] for r in pending} == {waiting.approval, waiting.input}
    by_id = {r["id"]: r for r in pending}
    (call,) = by_id[waiting.approval]["pending_calls"]
    assert call["tool"] == "refund" and call["kind"] == "approval"
    # A refund is not declared sensitive: whoever approves it sees the amount.
    assert call["effect"] == "non_idempotent_write" and call["args"] == {"amount": 987654}
    (ask,) = by_id[waiting.input]["pending_calls"]
    assert ask["kind"] == "input" and ask["input_schema"]["required"] == ["address"]
    shown = client.get(f"/api/runs/{waiting.approval}/pending-calls?reveal=true", headers=AUTH)
    assert shown.json()[0]["args"] == {"amount": 987654}
    assert client.get("/api/pending").status_code == 401


def test_approve_through_the_api_and_a_second_decision_conflicts(
    client: TestClient, rt: tenure.Runtime, waiting: Waiting
) -> None:
    decided = client.post(
        f"/api/runs/{waiting.approval}/decision",
        json={"approved": True, "note": "customer called"},
        headers={**AUTH, "X-Tenure-Actor": "grace"},
    )
    assert decided.status_code == 200 and decided.json()["decided_by"] == "grace"
    again = client.post(
        f"/api/runs/{waiting.approval}/decision", json={"approved": False}, headers=AUTH
    )
    assert again.status_code == 409
    result = rt.run_queued(waiting.approval)
    assert result is not None and result.outcome is Outcome.COMPLETED
    events = client.get(f"/api/runs/{waiting.approval}/events", headers=AUTH).json()
    approval = next(e for e in events if e["kind"] == "approval")
    assert approval["payload"]["decided_by"] == "grace" and approval["payload"]["approved"]
    assert approval["payload"]["note"] == "<hidden>"


def test_input_through_the_api_is_validated_and_never_shown(
    client: TestClient, rt: tenure.Runtime, waiting: Waiting
) -> None:
    url = f"/api/runs/{waiting.input}/input"
    bad = client.post(url, json={"values": {"address": 12}}, headers=AUTH)
    assert bad.status_code == 400
    run = rt.status(waiting.input)
    assert run is not None and run.status is RunStatus.WAITING_FOR_INPUT
    ok = client.post(url, json={"values": {"address": "1 Main St"}}, headers=AUTH)
    assert ok.status_code == 200
    assert rt.run_queued(waiting.input).outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    events = client.get(f"/api/runs/{waiting.input}/events", headers=AUTH).text
    assert "1 Main St" not in events
    assert (
        "1 Main St"
        in client.get(f"/api/runs/{waiting.input}/events?reveal=true", headers=AUTH).text
    )
    assert client.post(url, json={"values": {}}, headers=AUTH).status_code == 409


def test_dashboard_approval_and_input_forms(
    client: TestClient, rt: tenure.Runtime, waiting: Waiting
) -> None:
    csrf = login(client, "ada")
    page = client.get("/pending")
    assert page.status_code == 200 and "refund" in page.text and "address" in page.text
    assert "987654" in page.text  # no sensitive tool: its arguments are shown
    no_csrf = client.post(f"/runs/{waiting.approval}/decision", data={"decision": "approve"})
    assert no_csrf.status_code == 403
    denied = client.post(
        f"/runs/{waiting.approval}/decision",
        data={"csrf": csrf, "decision": "deny", "note": "not eligible"},
        follow_redirects=False,
    )
    assert denied.status_code == 303 and denied.headers["location"].endswith("done=denied")
    submitted = client.post(
        f"/runs/{waiting.input}/input",
        data={"csrf": csrf, "value.address": "2 Side St", "value.express": "true"},
        follow_redirects=False,
    )
    assert submitted.status_code == 303
    result = rt.run_queued(waiting.input)
    assert result is not None and result.outcome is Outcome.COMPLETED
    tool = next(e for e in rt.events(waiting.input) if e.kind == "tool")
    assert tool.payload["result"] == "shipping to 2 Side St (express)"
    decisions = [e.payload for e in rt.events(waiting.approval) if e.kind == "approval"]
    assert decisions[0]["decided_by"] == "ada" and decisions[0]["approved"] is False
    assert json.dumps(client.get("/pending").text).count("refund") == 0
    assert "Nothing waits" in client.get("/pending").text
    assert csrf_of(client.get("/pending").text)
