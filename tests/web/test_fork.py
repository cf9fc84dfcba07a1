"""Fork over the HTTP API (SPEC §23): the plan, the refusal, the fork, bad input."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import EventKind, RunStatus

from .conftest import AUTH, Seeded, login


def _charged_at(rt: tenure.Runtime, run_id: str) -> int:
    return next(e.sequence for e in rt.events(run_id) if e.kind is EventKind.TOOL)


def test_the_fork_plan_names_the_writes_that_would_repeat(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded
) -> None:
    charged = _charged_at(rt, seeded.dead)
    plan = client.get(f"/api/runs/{seeded.dead}/fork-plan?at={charged - 1}", headers=AUTH)
    assert plan.status_code == 200, plan.text
    body = plan.json()
    (write,) = body["repeated_writes"]
    assert write["name"] == "charge" and write["sequence"] == charged
    assert "charge" in body["refused"]
    after = client.get(f"/api/runs/{seeded.dead}/fork-plan?at={charged + 1}", headers=AUTH)
    assert after.json()["repeated_writes"] == [] and after.json()["refused"] is None
    assert len(rt.runs()) == 4  # nothing stored


def test_fork_refuses_then_forks_and_is_audited(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    charged = _charged_at(rt, seeded.dead)
    url = f"/api/runs/{seeded.dead}/fork"
    refused = client.post(url, json={"at": charged - 1}, headers=AUTH)
    assert refused.status_code == 409 and "charge" in refused.json()["error"]
    assert len(rt.runs()) == 4
    with caplog.at_level("INFO", logger="tenure.web.audit"):
        made = client.post(url, json={"at": charged + 1}, headers=AUTH)
    assert made.status_code == 201, made.text
    fork_id = made.json()["id"]
    fork = rt.status(fork_id)
    assert fork is not None and fork.status is RunStatus.QUEUED
    assert fork.forked_from == tenure.ForkedFrom(seeded.dead, charged + 1)
    assert any(fork_id in r.getMessage() and "fork" in r.getMessage() for r in caplog.records)
    shown = client.get(f"/api/runs/{fork_id}", headers=AUTH).json()
    assert shown["forked_from"] == {"run_id": seeded.dead, "sequence": charged + 1}
    repeated = client.post(url, json={"at": charged - 1, "allow_repeat_writes": True}, headers=AUTH)
    assert repeated.status_code == 201


def test_fork_bad_input(client: TestClient, rt: tenure.Runtime, seeded: Seeded) -> None:
    assert client.post("/api/runs/nope/fork", json={"at": 1}, headers=AUTH).status_code == 404
    assert client.get("/api/runs/nope/fork-plan?at=1", headers=AUTH).status_code == 404
    beyond = client.post(f"/api/runs/{seeded.dead}/fork", json={"at": 999}, headers=AUTH)
    assert beyond.status_code == 400 and "from 1 to" in beyond.json()["error"]
    assert (
        client.post(f"/api/runs/{seeded.dead}/fork", json={"at": 0}, headers=AUTH).status_code
        == 422
    )
    queued = client.post(f"/api/runs/{seeded.queued}/fork", json={"at": 1}, headers=AUTH)
    assert queued.status_code == 400 and "is queued" in queued.json()["error"]
    unknown_model = client.post(
        f"/api/runs/{seeded.completed}/fork", json={"at": 1, "model": "nope"}, headers=AUTH
    )
    assert unknown_model.status_code == 400
    assert client.post(f"/api/runs/{seeded.dead}/fork", json={"at": 1}).status_code == 401
    assert len(rt.runs()) == 4


# -- the dashboard: "fork from here" on a run's event --------------------------------------


def test_fork_from_here_shows_the_plan_and_needs_its_csrf_token(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded
) -> None:
    csrf = login(client)
    charged = _charged_at(rt, seeded.dead)
    page = client.get(f"/runs/{seeded.dead}")
    assert f'href="/runs/{seeded.dead}/fork?at={charged}"' in page.text
    assert "fork from here" in page.text
    queued = client.get(f"/runs/{seeded.queued}")
    assert "fork from here" not in queued.text  # a queued run can be claimed at any moment

    plan = client.get(f"/runs/{seeded.dead}/fork?at={charged}")
    assert plan.status_code == 200
    assert 'id="fork-repeated"' in plan.text and "charge" in plan.text
    assert 'name="allow_repeat_writes"' in plan.text  # confirming the repeat is asked for

    url = f"/runs/{seeded.dead}/fork"
    for forged in ({"at": str(charged + 1)}, {"at": str(charged + 1), "csrf": "x" * 43}):
        refused = client.post(url, data=forged, follow_redirects=False)
        assert refused.status_code == 403
    cross = client.post(
        url,
        data={"at": str(charged + 1), "csrf": csrf},
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert cross.status_code == 403
    assert len(rt.runs()) == 4

    # A repeat that was not confirmed is refused, nothing stored.
    unconfirmed = client.post(url, data={"at": str(charged), "csrf": csrf})
    assert unconfirmed.status_code == 409 and len(rt.runs()) == 4
    done = client.post(url, data={"at": str(charged + 1), "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    fork_id = done.headers["location"].split("/runs/")[1].split("?")[0]
    shown = client.get(done.headers["location"])
    assert "Forked:" in shown.text and 'id="forked-from"' in shown.text
    assert f"forked from {seeded.dead} at #{charged + 1}" in shown.text
    assert rt.status(fork_id).forked_from == tenure.ForkedFrom(seeded.dead, charged + 1)  # type: ignore[union-attr]


def test_the_fork_page_of_bad_input(client: TestClient, seeded: Seeded) -> None:
    login(client)
    assert client.get("/runs/nope/fork?at=1").status_code == 404
    assert client.get(f"/runs/{seeded.dead}/fork?at=999").status_code == 400
    assert client.get(f"/runs/{seeded.queued}/fork?at=1").status_code == 400
