"""What an operator reads at a glance, on each store: run ids by their distinguishing end and
searchable by any part, the prompt column (hidden unless revealed), "running for" and "next
attempt", the queue panel, the workers seen through their leases, the charts, the metrics per
queue, the redrive plan's words for a fenced run and the two 401s."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import FailureClass, RunRequest, Usage
from tenure.web import _overview, _state, create_app

from .conftest import AUTH, SECRET, TOKEN, login, make_runtime, seed


@pytest.fixture
def any_rt(db_url: str) -> Iterator[tenure.Runtime]:
    runtime = make_runtime(db_url)
    yield runtime
    runtime.close()


@pytest.fixture
def any_client(any_rt: tenure.Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(any_rt, token=TOKEN), raise_server_exceptions=False) as client:
        yield client


def _link_texts(html: str) -> dict[str, str]:
    """Run id -> the text its link in a list shows."""
    return dict(re.findall(r'href="/runs/([^"/?]+)" title="[^"]+">([^<]+)</a>', html))


def _request(prompt: str = "hello", queue: str = "default") -> RunRequest:
    return RunRequest(prompt=prompt, queue=queue, script=[{"say": "hi"}])


def test_run_ids_made_together_show_by_their_distinguishing_end(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    ids = any_rt.enqueue_many([_request() for _ in range(13)])
    assert len({i[:8] for i in ids}) < 13  # what the list used to show: shared starts
    login(any_client)
    shown = _link_texts(any_client.get("/").text)
    assert set(shown) == set(ids)
    assert len(set(shown.values())) == 13  # every one tells itself apart
    for run_id, text in shown.items():
        assert text == "…" + run_id[-8:]


def test_search_finds_a_run_by_any_part_of_its_id(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    ids = any_rt.enqueue_many([_request() for _ in range(5)])
    login(any_client)
    target = ids[2]
    for fragment in (target[-6:], target[10:20].upper(), target):
        found = _link_texts(any_client.get("/", params={"q": fragment}).text)
        assert list(found) == [target], fragment
    assert "no run id contains zzz" in any_client.get("/", params={"q": "zzz"}).text


def test_prompt_column_is_hidden_unless_revealed(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    seed(any_rt)  # its completed run's request is cleared: the prompt comes from its event
    any_rt.enqueue(_request("first line of the ask\nsecond line, never in a list"))
    login(any_client)
    hidden = any_client.get("/").text
    assert SECRET.split("'")[1] not in hidden and "first line of the ask" not in hidden
    assert "reveal prompts" in hidden
    shown = any_client.get("/", params={"reveal": "true"}).text
    assert SECRET.split("'")[1] in shown and "first line of the ask" in shown
    assert "second line" not in shown
    # Anonymous readers never get content, even with --public-read.
    public = TestClient(create_app(any_rt, token=TOKEN, public_read=True))
    assert public.get("/", params={"reveal": "true"}).status_code == 401


def test_running_for_next_attempt_and_relative_times(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    seeded = seed(any_rt)
    running = any_rt.enqueue(_request())
    (claimed,) = any_rt.store.claim("worker:host-a:1:1", None, 60, 1)
    assert claimed.lease.run_id == running
    login(any_client)
    html = any_client.get("/").text
    row = _row(html, running)
    # Seconds since its claim: 0 or 1 on an idle machine, more on a loaded one.
    assert re.search(r"running for \d+s", row), row
    later = _row(html, seeded.queued)  # enqueued with a delay of an hour: scheduled
    assert re.search(r"scheduled <span class=\"when\"[^>]*>in 59m \d+s</span>", later), later
    assert "next attempt" not in later
    assert re.search(r">(now|\d+s ago)</span> <span class=\"abs\">\d{4}-\d\d-\d\d ", later), later


def test_a_run_that_failed_backs_off_and_a_delayed_one_is_scheduled(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    delayed = any_rt.enqueue(_request(queue="later"), delay=3600)
    failed = any_rt.enqueue(_request(queue="later"))
    (claimed,) = any_rt.store.claim("worker:host-a:1:1", None, 60, 1)
    assert claimed.lease.run_id == failed
    assert any_rt.store.requeue(claimed.lease, 3600, FailureClass.SERVER_ERROR, "500")
    login(any_client)
    html = any_client.get("/").text
    assert "next attempt <span" in _row(html, failed)
    assert "scheduled <span" in _row(html, delayed)
    (queue,) = any_client.get("/api/queues", headers=AUTH).json()
    assert (queue["queued"], queue["backing_off"], queue["scheduled"]) == (2, 1, 1)
    delayed_page = any_client.get(f"/runs/{delayed}").text
    assert "scheduled for" in delayed_page and "backoff until" not in delayed_page
    failed_page = any_client.get(f"/runs/{failed}").text
    assert "backoff until" in failed_page and "scheduled for" not in failed_page


def test_the_runs_list_shows_duration_tokens_and_cost(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    run_id = any_rt.enqueue(_request())
    (claimed,) = any_rt.store.claim("worker:host-a:1:1", None, 60, 1)
    usage = Usage(input_tokens=1200, output_tokens=34, cost=0.0125)
    assert any_rt.store.record_step(claimed.lease, 60, [], usage) is not None
    login(any_client)
    row = _row(any_client.get("/").text, run_id)
    cells = dict(re.findall(r'<td class="small (duration|tokens|cost)"[^>]*>(.*?)</td>', row))
    assert re.fullmatch(r"\d+s", cells["duration"]), cells
    assert cells["tokens"] == "1234" and cells["cost"] == "0.0125"
    assert 'title="1200 in / 34 out"' in row


def _row(html: str, run_id: str) -> str:
    match = re.search(rf'<tr data-run="{run_id}">(.*?)</tr>', html, re.S)
    assert match, run_id
    return match.group(1)


def test_queue_panel_depth_and_oldest_ready_age(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    any_rt.enqueue_many([_request(queue="emails") for _ in range(3)])
    any_rt.enqueue(_request(queue="reports"), delay=600)
    time.sleep(1.1)
    login(any_client)
    html = any_client.get("/").text
    emails = re.search(r'<tr data-queue="emails">(.*?)</tr>', html, re.S)
    reports = re.search(r'<tr data-queue="reports">(.*?)</tr>', html, re.S)
    assert emails and reports
    cells = re.findall(r"<td[^>]*>(.*?)</td>", emails.group(1))
    assert cells[1:5] == ["3", "3", "0", "0"]
    assert re.fullmatch(r"[1-9]\d*s", cells[5]), cells
    cells = re.findall(r"<td[^>]*>(.*?)</td>", reports.group(1))
    # Enqueued with a delay: scheduled, not backing off.
    assert cells[1:6] == ["1", "0", "0", "1", ""]


def test_workers_seen_through_their_leases(any_client: TestClient, any_rt: tenure.Runtime) -> None:
    any_rt.enqueue_many([_request(queue="emails") for _ in range(3)])
    assert len(any_rt.store.claim("worker:host-a:11:1", ["emails"], 60, 2)) == 2
    assert len(any_rt.store.claim("worker:host-b:22:1", ["emails"], 0.05, 1)) == 1
    time.sleep(0.3)  # host-b's only lease expires: it has stopped renewing
    login(any_client)
    html = any_client.get("/leases").text
    alive = re.search(
        r'<tr data-owner="worker:host-a:11:1" data-state="running" >(.*?)</tr>', html, re.S
    )
    dead = re.search(
        r'<tr data-owner="worker:host-b:22:1" data-state="stale" class="stalled">(.*?)</tr>',
        html,
        re.S,
    )
    assert alive and dead, html
    assert '<td>2</td><td class="">0</td>' in alive.group(1)
    assert "stopped renewing" in dead.group(1) and "stopped renewing" not in alive.group(1)
    assert "<td>emails</td>" in alive.group(1)
    # Last renewal: the latest guarded write of its runs, seconds ago (not the lease length
    # this server's runtime happens to be configured with).
    assert re.search(r'<span class="when"[^>]*>(now|[0-5]s ago)</span>', alive.group(1))


def test_finished_per_minute_chart(any_client: TestClient, any_rt: tenure.Runtime) -> None:
    seed(any_rt)
    login(any_client)
    html = any_client.get("/").text
    chart = re.search(r'<figure id="chart-finished">(.*?)</figure>', html, re.S)
    assert chart and "<svg" in chart.group(1)
    assert re.search(r'<rect class="s-completed"[^>]*><title>\d\d:\d\d: 1 completed', chart[1])
    assert re.search(r'<rect class="s-failed"[^>]*><title>\d\d:\d\d: 2 failed', chart[1])


def test_queue_depth_over_time_chart(
    any_client: TestClient, any_rt: tenure.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_state, "DEPTH_SAMPLE_SECONDS", 0.0)
    login(any_client)
    any_rt.enqueue_many([_request() for _ in range(4)])
    any_client.get("/api/counts", headers=AUTH)
    html = any_client.get("/").text
    chart = re.search(r'<figure id="chart-depth">(.*?)</figure>', html, re.S)
    assert chart and "<polyline" in chart[1] and "max 4" in chart[1]


def test_svg_charts_escape_and_scale() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    points = [(now, 0), (now + timedelta(seconds=30), 10), (now + timedelta(seconds=60), 5)]
    line = _overview.svg_line(points, title="<q>")
    assert "&lt;q&gt;" in line and "0.0,134.0" not in line and "max 10" in line
    assert 'points="0.0,120.0 300.0,14.0 600.0,67.0"' in line
    bars = _overview.svg_bars([_overview.Bar("12:00", [("s-completed", 0)])], title="t")
    assert "<rect" not in bars


def test_the_fenced_redrive_plan_does_not_contradict_itself(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    seeded = seed(any_rt)
    why = any_client.get(f"/api/runs/{seeded.fenced}/redrive-plan", headers=AUTH).json()["why"]
    assert "may have happened" in why
    assert "has happened" not in why and "No non-idempotent write completed" in why
    why = any_client.get(f"/api/runs/{seeded.dead}/redrive-plan", headers=AUTH).json()["why"]
    assert "1 non-idempotent write(s) completed" in why and "may have happened" not in why


def test_a_wrong_token_is_told_apart_from_a_missing_one(any_client: TestClient) -> None:
    missing = any_client.get("/api/runs")
    wrong = any_client.get("/api/runs", headers={"Authorization": "Bearer not-the-token"})
    malformed = any_client.get("/api/runs", headers={"Authorization": TOKEN})
    assert missing.status_code == wrong.status_code == malformed.status_code == 401
    assert missing.json() == {"error": "a bearer token is required"}
    assert wrong.json() == {"error": "the bearer token is not the API token"}
    assert malformed.json() == {"error": "expected 'Authorization: Bearer TOKEN'"}
    write = any_client.post("/api/reap", headers={"Authorization": "Bearer nope"})
    assert write.json() == {"error": "the bearer token is not the API token"}


def test_metrics_per_queue_oldest_ready_and_expired_leases(
    any_client: TestClient, any_rt: tenure.Runtime
) -> None:
    any_rt.enqueue_many([_request(queue="emails") for _ in range(3)])
    any_rt.enqueue(_request(queue="reports"))
    assert len(any_rt.store.claim("worker:gone:1:1", ["reports"], 0.05, 1)) == 1
    time.sleep(1.1)
    text = any_client.get("/metrics", headers=AUTH).text
    assert 'tenure_queue_runs{queue="emails",status="queued"} 3.0' in text
    assert 'tenure_queue_runs{queue="reports",status="running"} 1.0' in text
    age = re.search(r'tenure_queue_oldest_ready_seconds\{queue="emails"\} ([\d.]+)', text)
    assert age and float(age[1]) >= 1.0
    assert 'tenure_queue_oldest_ready_seconds{queue="reports"} 0.0' in text
    assert 'tenure_leases_expired{queue="reports"} 1.0' in text
    assert 'tenure_leases_expired{queue="emails"} 0.0' in text


def test_queues_and_workers_in_the_api(any_client: TestClient, any_rt: tenure.Runtime) -> None:
    any_rt.enqueue_many([_request(queue="emails") for _ in range(2)])
    assert len(any_rt.store.claim("worker:host-a:1:1", ["emails"], 60, 1)) == 1
    queues = any_client.get("/api/queues", headers=AUTH).json()
    assert queues == [
        {
            "queue": "emails",
            "queued": 1,
            "ready": 1,
            "backing_off": 0,
            "scheduled": 0,
            "running": 1,
            "waiting": 0,
            "waiting_for_children": 0,
            "oldest_ready_seconds": queues[0]["oldest_ready_seconds"],
            "paused": False,
            "paused_at": None,
            "paused_by": None,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost": 0.0,
            "totals_window_seconds": 86_400.0,
            "priorities": {"0": 1},  # the queued runs by priority and by key (SPEC §22)
            "keys": {},
        }
    ]
    (worker,) = any_client.get("/api/workers", headers=AUTH).json()
    assert worker["owner"] == "worker:host-a:1:1" and worker["runs_held"] == 1
    assert worker["expired_leases"] == 0 and worker["stalled"] is False
    assert worker["queues"] == ["emails"] and worker["last_renewal"]
    assert any_client.get("/api/workers").status_code == 401
