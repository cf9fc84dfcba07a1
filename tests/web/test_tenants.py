"""SPEC §22 over HTTP, on both stores: the API for concurrency keys and schedules, enqueue
with a priority and a key, the dashboard's queue panel (priorities, keys, schedules, a run
waiting for its key) and /metrics per key and per schedule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure.web import create_app

from .conftest import AUTH, TOKEN, login, make_runtime
from .test_metrics import value


@pytest.fixture
def app_rt(db_url: str) -> Iterator[tenure.Runtime]:
    rt = make_runtime(db_url)
    yield rt
    rt.close()


@pytest.fixture
def web(app_rt: tenure.Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(app_rt, token=TOKEN), raise_server_exceptions=False) as client:
        yield client


def test_keys_priorities_and_schedules_over_the_api_the_dashboard_and_metrics(
    web: TestClient, app_rt: tenure.Runtime
) -> None:
    put = web.put("/api/concurrency/tenant-a", json={"limit": 0}, headers=AUTH)
    assert put.status_code == 200, put.text
    assert put.json() == {"key": "tenant-a", "limit": 0, "changed": True}
    body = {"prompt": "p", "script": [{"say": "ok"}], "priority": 7, "concurrency_key": "tenant-a"}
    created = web.post("/api/runs", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    run = app_rt.status(run_id)
    assert run is not None and (run.priority, run.concurrency_key) == (7, "tenant-a")
    assert app_rt.run_queued(run_id) is None  # the key is held at 0
    (key,) = web.get("/api/concurrency", headers=AUTH).json()
    assert key == {"key": "tenant-a", "limit": 0, "running": 0, "queued": 1, "waiting_for_key": 1}
    (queue,) = web.get("/api/queues", headers=AUTH).json()
    assert queue["priorities"] == {"7": 1} and queue["keys"] == {"tenant-a": 1}

    schedule = {"cron": "*/5 * * * *", "timezone": "Europe/Paris", "request": {"prompt": "p"}}
    stored = web.put("/api/schedules/digest", json=schedule, headers=AUTH)
    assert stored.status_code == 200, stored.text
    assert stored.json()["name"] == "digest" and stored.json()["next_fire"] is not None
    bad = web.put("/api/schedules/bad", json={**schedule, "cron": "61 * * * *"}, headers=AUTH)
    assert bad.status_code == 400 and "cron" in bad.text
    bad = web.put("/api/schedules/bad", json={**schedule, "timezone": "Nowhere"}, headers=AUTH)
    assert bad.status_code == 400 and "time zone" in bad.text
    assert [s["name"] for s in web.get("/api/schedules", headers=AUTH).json()] == ["digest"]
    assert web.post("/api/schedules/digest/pause", headers=AUTH).json()["changed"] is True
    assert web.post("/api/schedules/digest/resume", headers=AUTH).json()["changed"] is True

    login(web)
    page = web.get("/").text
    assert 'class="priority"' in page and "7: 1" in page
    assert "waits for key tenant-a" in page
    assert 'data-key="tenant-a"' in page and 'data-schedule="digest"' in page

    metrics = web.get("/metrics", headers=AUTH).text
    assert value(metrics, "tenure_concurrency_waiting", key="tenant-a") == 1
    # Zeros that must be there, not missing samples read as 0.
    assert 'tenure_concurrency_running{key="tenant-a"} 0.0' in metrics
    assert 'tenure_concurrency_limit{key="tenant-a"} 0.0' in metrics
    assert 'tenure_schedule_fired{schedule="digest"} 0.0' in metrics
    assert 'tenure_schedule_next_fire_timestamp{schedule="digest"}' in metrics

    assert web.delete("/api/schedules/digest", headers=AUTH).json()["deleted"] is True
    assert web.get("/api/schedules", headers=AUTH).json() == []
    removed = web.put("/api/concurrency/tenant-a", json={"limit": None}, headers=AUTH)
    assert removed.json()["changed"] is True
    result = app_rt.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.COMPLETED


def test_bad_limits_and_priorities_are_refused(web: TestClient) -> None:
    for limit in (-1, 1.5, "many"):
        refused = web.put("/api/concurrency/k", json={"limit": limit}, headers=AUTH)
        assert refused.status_code == 422, refused.text
    refused = web.post("/api/runs", json={"prompt": "p", "priority": 101}, headers=AUTH)
    assert refused.status_code == 422
    assert web.get("/api/concurrency", headers=AUTH).json() == []
