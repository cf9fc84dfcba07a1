"""Bulk cancel and bulk redrive over HTTP, both stores: the API's dry run gives the count,
`expected` confirms it (409 when the runs that match have changed, and nothing is done), and
the runs list of the dashboard counts, asks and then acts, with its CSRF token."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest, RunStatus
from tenure.web import create_app

from .conftest import AUTH, TOKEN, login, make_runtime


@pytest.fixture
def app_rt(db_url: str) -> Iterator[tenure.Runtime]:
    rt = make_runtime(db_url)
    yield rt
    rt.close()


@pytest.fixture
def web(app_rt: tenure.Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(app_rt, token=TOKEN), raise_server_exceptions=False) as client:
        yield client


def _enqueue(rt: tenure.Runtime, queue: str, n: int = 1) -> list[str]:
    return rt.enqueue_many(
        [RunRequest(prompt="p", queue=queue, script=[{"say": "ok"}]) for _ in range(n)]
    )


def _dead(rt: tenure.Runtime, queue: str) -> str:
    run_id = rt.enqueue(
        RunRequest(prompt="p", queue=queue, script=[{"fail": "auth"}, {"say": "never"}])
    )
    rt.run_queued(run_id)
    assert rt.status(run_id).is_dead_letter  # type: ignore[union-attr]
    return run_id


def _statuses(rt: tenure.Runtime, ids: list[str]) -> set[RunStatus]:
    return {rt.status(i).status for i in ids}  # type: ignore[union-attr]


def test_the_api_counts_then_cancels_what_was_confirmed(
    web: TestClient, app_rt: tenure.Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    mail = _enqueue(app_rt, "mail", 3)
    other = _enqueue(app_rt, "other")
    body = {"status": "queued", "queue": "mail"}
    dry = web.post("/api/cancel", json={**body, "dry_run": True}, headers=AUTH).json()
    assert (dry["matched"], sorted(dry["would_cancel"]), dry["cancelled"]) == (3, sorted(mail), [])
    assert _statuses(app_rt, mail) == {RunStatus.QUEUED}

    # One more run matches since the count: the confirmed count no longer holds.
    late = _enqueue(app_rt, "mail")
    stale = web.post("/api/cancel", json={**body, "expected": 3}, headers=AUTH)
    assert stale.status_code == 409 and "4 runs match" in stale.json()["error"]
    assert _statuses(app_rt, mail + late) == {RunStatus.QUEUED}

    with caplog.at_level(logging.WARNING, logger="tenure.web.audit"):
        done = web.post("/api/cancel", json={**body, "expected": 4}, headers=AUTH).json()
    assert sorted(done["cancelled"]) == sorted(mail + late) and done["changed"] == []
    assert "bulk cancel by" in caplog.text
    assert _statuses(app_rt, mail + late) == {RunStatus.CANCELLED}
    assert _statuses(app_rt, other) == {RunStatus.QUEUED}


def test_the_api_refuses_what_a_bulk_cancel_cannot_do(web: TestClient) -> None:
    assert web.post("/api/cancel", json={"queue": "mail"}).status_code == 401
    ended = web.post("/api/cancel", json={"status": "completed"}, headers=AUTH)
    assert ended.status_code == 422
    assert web.post("/api/cancel", json={"limit": 501}, headers=AUTH).status_code == 422


def test_the_api_bulk_redrive_checks_the_confirmed_count(
    web: TestClient, app_rt: tenure.Runtime
) -> None:
    dead = [_dead(app_rt, "mail") for _ in range(2)]
    body = {"queue": "mail"}
    dry = web.post("/api/redrive", json={**body, "dry_run": True}, headers=AUTH).json()
    assert sorted(dry["would_redrive"]) == sorted(dead)
    stale = web.post("/api/redrive", json={**body, "expected": 1}, headers=AUTH)
    assert stale.status_code == 409
    assert _statuses(app_rt, dead) == {RunStatus.FAILED}
    done = web.post("/api/redrive", json={**body, "expected": 2}, headers=AUTH).json()
    assert sorted(done["redriven"]) == sorted(dead)
    assert _statuses(app_rt, dead) == {RunStatus.QUEUED}


def test_the_runs_list_counts_asks_and_cancels(web: TestClient, app_rt: tenure.Runtime) -> None:
    mail = _enqueue(app_rt, "mail", 2)
    other = _enqueue(app_rt, "other")
    csrf = login(web)
    listing = web.get("/?status=queued&queue=mail").text
    assert 'data-bulk="cancel"' in listing and 'data-bulk="redrive"' not in listing
    assert 'data-bulk="cancel"' not in web.get("/").text  # no filter: no bulk action

    confirm = web.get("/bulk?action=cancel&status=queued&queue=mail")
    assert confirm.status_code == 200
    assert 'data-count="2"' in confirm.text and 'name="expected" value="2"' in confirm.text
    form = {"action": "cancel", "status": "queued", "queue": "mail", "expected": "2"}
    assert web.post("/bulk", data={**form, "csrf": "forged"}).status_code == 403
    assert _statuses(app_rt, mail) == {RunStatus.QUEUED}

    _enqueue(app_rt, "mail")  # the set moved: asked again, with the new count
    moved = web.post("/bulk", data={**form, "csrf": csrf})
    assert moved.status_code == 409
    assert "3 runs match" in moved.text and 'name="expected" value="3"' in moved.text
    assert _statuses(app_rt, mail) == {RunStatus.QUEUED}

    done = web.post("/bulk", data={**form, "expected": "3", "csrf": csrf})
    assert done.status_code == 200 and "cancelled 3" in done.text
    assert _statuses(app_rt, mail) == {RunStatus.CANCELLED}
    assert _statuses(app_rt, other) == {RunStatus.QUEUED}


def test_the_runs_list_redrives_dead_letters(web: TestClient, app_rt: tenure.Runtime) -> None:
    dead = [_dead(app_rt, "mail") for _ in range(2)]
    csrf = login(web)
    listing = web.get("/?status=failed&queue=mail").text
    assert 'data-bulk="redrive"' in listing and 'data-bulk="cancel"' not in listing
    confirm = web.get("/bulk?action=redrive&status=failed&queue=mail").text
    assert 'data-count="2"' in confirm
    form = {"action": "redrive", "status": "failed", "queue": "mail", "expected": "2"}
    done = web.post("/bulk", data={**form, "csrf": csrf})
    assert done.status_code == 200 and "redriven 2" in done.text
    assert _statuses(app_rt, dead) == {RunStatus.QUEUED}
    wrong = web.post("/bulk", data={**form, "action": "cancel", "csrf": csrf})
    assert wrong.status_code == 400
