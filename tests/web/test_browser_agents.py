"""An agent function's run in a real headless Chromium, on each store: the runs list names
its agent, its page shows the agent and (revealed) its input, and its steps by position,
kind and name with a write marked by its effect; the Agents page lists the input schema.
Screenshots go to test-artifacts/web/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure import Outcome, RunRequest
from tenure.web import create_app

from .conftest import TOKEN
from .test_agents import INPUT, SCRIPT, make_agent_runtime
from .test_browser import Server, _page, browser, log_in, shot

__all__ = ["browser"]  # a fixture shared with test_browser

pytestmark = pytest.mark.slow


@pytest.fixture
def agent_rt(db_url: str) -> Iterator[tenure.Runtime]:
    rt = make_agent_runtime(db_url)
    yield rt
    rt.close()


@pytest.fixture
def agent_page(browser: Any, agent_rt: tenure.Runtime) -> Iterator[Any]:
    with Server(create_app(agent_rt, token=TOKEN)) as s:
        yield from _page(browser, s)


def test_an_agent_runs_page_shows_its_steps_by_position_kind_and_name(
    agent_page: Any, agent_rt: tenure.Runtime, db_url: str
) -> None:
    from playwright.sync_api import expect

    page = agent_page
    run_id = agent_rt.enqueue(RunRequest(agent="triage", input=INPUT, script=SCRIPT))
    result = agent_rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED, result
    log_in(page)
    page.goto("/")
    row = page.locator(f"tr[data-run='{run_id}']")
    expect(row.locator("td.prompt")).to_have_text("agent triage")
    row.locator("a.run-id").click()
    page.wait_for_url(f"**/runs/{run_id}")
    expect(page.locator("#agent-name")).to_have_text("triage")
    expect(page.locator("#agent-input")).to_have_text("hidden")
    rows = page.locator("table.agent-steps tbody tr")
    expect(rows).to_have_count(5)
    shown = [
        [
            rows.nth(i).locator(f"td.{c}").inner_text()
            for c in ("position", "step-kind", "step-name")
        ]
        for i in range(rows.count())
    ]
    assert shown == [
        ["0", "model", "default"],
        ["1", "tool", "lookup"],
        ["2", "tool", "refund"],
        ["3", "sleep", "sleep"],
        ["4", "step", "measure"],
    ]
    write = page.locator("table.agent-steps tr[data-position='2']")
    expect(write.locator("td.step-effect .effect")).to_have_text("non_idempotent_write")
    expect(write.locator("td.step-outcome")).to_have_text("hidden")
    failed = page.locator("table.agent-steps tr[data-position='1']")
    expect(failed.locator("td.step-outcome")).to_have_text(
        "error: LookupError: no ticket T-9 in the archive"
    )
    store = "sqlite" if db_url.startswith("sqlite") else "postgres"
    shot(page, f"agent_run_{store}")

    page.click("text=reveal content")
    page.wait_for_url("**reveal=true")
    expect(page.locator("#agent-input")).to_contain_text("the parcel never came")
    expect(write.locator("td.step-outcome")).to_have_text("refunded T-9")

    page.click("nav >> text=Agents")
    page.wait_for_url("**/agents")
    params = page.locator("section[data-agent='triage'] tr[data-parameter]")
    expect(params).to_have_count(3)
    expect(params.nth(0)).to_contain_text("ticket_id")
    expect(params.nth(2)).to_contain_text("integer")
    shot(page, f"agents_{store}")
