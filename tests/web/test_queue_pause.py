"""Pausing a queue over HTTP: the API (bearer token), the dashboard's form (session and CSRF
token, like every operator action), the queue panel and /metrics; both stores."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest, RunStatus
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


def _enqueue(rt: tenure.Runtime, queue: str) -> str:
    return rt.enqueue(RunRequest(prompt="p", queue=queue, script=[{"say": "ok"}]))


def test_the_api_pauses_and_resumes_a_queue(
    web: TestClient, app_rt: tenure.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = _enqueue(app_rt, "mail/eu")  # a name with a slash is one queue
    with caplog.at_level(logging.WARNING, logger="tenure.web.audit"):
        paused = web.post("/api/queues/mail/eu/pause", headers=AUTH)
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"queue": "mail/eu", "paused": True, "changed": True}
    assert "pause queue 'mail/eu' by" in caplog.text
    again = web.post("/api/queues/mail/eu/pause", headers=AUTH).json()
    assert again["changed"] is False
    assert app_rt.run_queued(run_id) is None  # nobody claims it
    [listed] = web.get("/api/queues", headers=AUTH).json()
    assert (listed["queue"], listed["paused"], listed["queued"]) == ("mail/eu", True, 1)
    assert listed["paused_by"]

    resumed = web.post("/api/queues/mail/eu/resume", headers=AUTH).json()
    assert resumed == {"queue": "mail/eu", "paused": False, "changed": True}
    assert not web.post("/api/queues/mail/eu/resume", headers=AUTH).json()["changed"]
    result = app_rt.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.COMPLETED


def test_the_api_refuses_without_a_token_and_a_bad_name(
    web: TestClient, app_rt: tenure.Runtime
) -> None:
    assert web.post("/api/queues/mail/pause").status_code == 401
    assert web.post("/api/queues/" + "x" * 201 + "/pause", headers=AUTH).status_code == 422
    assert web.post("/api/queues/a%01b/pause", headers=AUTH).status_code == 422
    assert app_rt.paused_queues() == []


def test_the_dashboard_pauses_and_resumes_with_its_csrf_token(
    web: TestClient, app_rt: tenure.Runtime
) -> None:
    run_id = _enqueue(app_rt, "mail")
    # Without a session and its CSRF token, the form changes nothing.
    assert web.post("/queues/pause", data={"queue": "mail"}).status_code == 403
    csrf = login(web)
    assert web.post("/queues/pause", data={"queue": "mail", "csrf": "forged"}).status_code == 403
    assert app_rt.paused_queues() == []
    page = web.get("/").text
    assert 'action="/queues/pause"' in page and 'data-queue-action="pause"' in page

    done = web.post("/queues/pause", data={"queue": "mail", "csrf": csrf})
    assert done.status_code == 200 and "Queue paused" in done.text
    [paused] = app_rt.paused_queues()
    assert (paused.queue, paused.paused_by) == ("mail", "ada")
    assert 'class="paused"' in done.text and 'data-queue-action="resume"' in done.text
    assert app_rt.run_queued(run_id) is None

    resumed = web.post("/queues/resume", data={"queue": "mail", "csrf": csrf})
    assert resumed.status_code == 200 and "Queue resumed" in resumed.text
    assert app_rt.paused_queues() == []
    assert app_rt.status(run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]


def test_metrics_count_the_paused_queues(web: TestClient, app_rt: tenure.Runtime) -> None:
    _enqueue(app_rt, "mail")
    _enqueue(app_rt, "other")
    app_rt.pause_queue("mail")
    app_rt.pause_queue("idle")
    text = web.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_queues_paused") == 2
    assert value(text, "tenure_queue_paused", queue="mail") == 1
    assert value(text, "tenure_queue_paused", queue="idle") == 1
    assert ("tenure_queue_paused", "other") in _queue_samples(text)
    assert value(text, "tenure_queue_paused", queue="other") == 0
    app_rt.resume_queue("mail")
    assert value(web.get("/metrics", headers=AUTH).text, "tenure_queues_paused") == 1


def _queue_samples(text: str) -> set[tuple[str, str]]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, s.labels["queue"])
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "queue" in s.labels
    }
