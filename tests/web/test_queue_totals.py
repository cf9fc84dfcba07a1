"""Tokens and cost per queue over HTTP, on each store: `GET /api/queues`, the dashboard's
queue panel and /metrics show what a queue's runs not yet ended and those that ended in the
last 24 h spent; a run that ended before the window is left out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest, Usage
from tenure.web import create_app

from .._raw import raw_execute
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


def _ran(rt: tenure.Runtime, queue: str, usage: dict[str, float]) -> str:
    """A run of `queue` that completed, its one model turn having spent `usage`."""
    run_id = rt.enqueue(RunRequest(prompt="p", queue=queue, script=[{"say": "ok", "usage": usage}]))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is tenure.Outcome.COMPLETED
    return run_id


def _ended_days_ago(db_url: str, run_id: str, days: float) -> None:
    if db_url.startswith("sqlite:///"):
        sql = "UPDATE tenure_runs SET finished_at = finished_at - ? WHERE id = ?"
    else:
        sql = (
            "UPDATE tenure_runs SET finished_at = finished_at - make_interval(secs => ?) "
            "WHERE id = ?"
        )
    assert raw_execute(db_url, sql, days * 86_400, run_id) == 1


def test_queues_show_the_tokens_and_cost_of_the_last_day(
    web: TestClient, app_rt: tenure.Runtime, db_url: str
) -> None:
    rt = app_rt
    _ran(rt, "mail", {"input_tokens": 100, "output_tokens": 20, "cost": 0.5})
    _ran(rt, "mail", {"input_tokens": 10, "output_tokens": 2, "cost": 0.25})
    old = _ran(rt, "mail", {"input_tokens": 5000, "output_tokens": 5000, "cost": 9.0})
    _ended_days_ago(db_url, old, 2)
    running = rt.enqueue(RunRequest(prompt="p", queue="chat", script=[{"say": "ok"}]))
    [claimed] = rt.store.claim("worker:h:1:1", None, 60, 1)
    assert claimed.lease.run_id == running
    assert rt.store.record_step(claimed.lease, 60, [], Usage(7, 3, 0.125)) is not None

    listed = {q["queue"]: q for q in web.get("/api/queues", headers=AUTH).json()}
    assert set(listed) == {"mail", "chat"}
    mail, chat = listed["mail"], listed["chat"]
    assert (mail["input_tokens"], mail["output_tokens"], mail["cost"]) == (110, 22, 0.75)
    assert (mail["queued"], mail["running"]) == (0, 0)  # listed for its spending alone
    assert (chat["input_tokens"], chat["output_tokens"], chat["cost"]) == (7, 3, 0.125)
    assert chat["running"] == 1 and mail["totals_window_seconds"] == 86_400
    assert {q.name: q.spent for q in rt.queues()} == {
        "mail": Usage(110, 22, 0.75),
        "chat": Usage(7, 3, 0.125),
    }
    assert rt.queues(window=3 * 86_400)[1].spent == Usage(5110, 5022, 9.75)

    login(web)
    page = web.get("/").text
    row = page[page.index('<tr data-queue="mail"') :]
    row = row[: row.index("</tr>")]
    assert '<td class="tokens" title="110 in / 22 out">132</td>' in row
    assert '<td class="cost">0.7500</td>' in row

    text = web.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_queue_tokens", queue="mail", direction="input") == 110
    assert value(text, "tenure_queue_tokens", queue="mail", direction="output") == 22
    assert value(text, "tenure_queue_cost", queue="mail") == 0.75
    assert value(text, "tenure_queue_tokens", queue="chat", direction="input") == 7


def test_a_bad_window_is_one_line_and_reads_nothing(app_rt: tenure.Runtime) -> None:
    for bad in (0, -1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(tenure.InvalidRequest, match="window must be a positive number"):
            app_rt.queues(window=bad)  # type: ignore[arg-type]
