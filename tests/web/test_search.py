"""Runs found by metadata and creation time through the API (`GET /api/runs/search`) and
the dashboard's runs list, on each store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest
from tenure.web import create_app

from .conftest import AUTH, TOKEN, login


@pytest.fixture
def app(db_url: str) -> Iterator[tuple[tenure.Runtime, TestClient]]:
    rt = tenure.Runtime(db_url)
    client = TestClient(create_app(rt, token=TOKEN), raise_server_exceptions=False)
    yield rt, client
    client.close()
    rt.close()


def enqueue(rt: tenure.Runtime, tenant: str) -> str:
    return rt.enqueue(
        RunRequest(
            prompt="p", model="scripted", script=[{"say": "ok"}], metadata={"tenant": tenant}
        )
    )


def test_the_api_finds_runs_by_metadata_and_time(
    app: tuple[tenure.Runtime, TestClient],
) -> None:
    rt, client = app
    acme = enqueue(rt, "acme")
    enqueue(rt, "globex")
    rt.work(burst=True)
    found = client.get("/api/runs/search?meta=tenant=acme&since=3600", headers=AUTH)
    assert found.status_code == 200, found.text
    assert [r["id"] for r in found.json()["runs"]] == [acme]
    assert client.get("/api/runs/search?meta=tenant=initech", headers=AUTH).json()["runs"] == []
    bad = client.get("/api/runs/search?meta=tenant", headers=AUTH)
    assert bad.status_code == 400 and "KEY=VALUE" in bad.json()["error"]
    assert client.get("/api/runs/search?since=-1", headers=AUTH).status_code == 422
    assert client.get("/api/runs/search?meta=tenant=acme").status_code == 401


def test_the_runs_list_filters_by_metadata_and_time(
    app: tuple[tenure.Runtime, TestClient],
) -> None:
    rt, client = app
    acme = enqueue(rt, "acme")
    globex = enqueue(rt, "globex")
    login(client)
    page = client.get("/?meta=tenant%3Dacme&since=3600")
    assert page.status_code == 200
    assert acme in page.text and globex not in page.text
    assert 'value="tenant=acme"' in page.text and 'value="3600" selected' in page.text
    everything = client.get("/")
    assert acme in everything.text and globex in everything.text


def test_a_running_run_shows_its_step_in_flight_and_for_how_long(
    app: tuple[tenure.Runtime, TestClient],
) -> None:
    rt, client = app
    run_id = rt.enqueue(RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]))
    claimed = rt.store.claim("worker:test", None, 30, 1)
    assert [c.lease.run_id for c in claimed] == [run_id]
    login(client)
    listing = client.get("/")
    assert 'class="in-flight"' in listing.text and "step 2 for" in listing.text
    page = client.get(f"/runs/{run_id}")
    assert "step in flight" in page.text and "step 2, after claimed, for" in page.text
