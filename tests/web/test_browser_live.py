"""The operator's list pages in a real headless Chromium, on each store: the runs table, the
leases (workers) page and the dead letters follow live without a reload; run ids read by their
distinguishing end and are found by any part; the queue panel and the charts are drawn.
Screenshots go to test-artifacts/web/."""

from __future__ import annotations

from typing import Any

import pytest

import tenure
from tenure import RunRequest

from .conftest import seed
from .test_browser import any_page, any_rt, browser, log_in, shot

__all__ = ["any_page", "any_rt", "browser"]  # fixtures shared with test_browser

pytestmark = pytest.mark.slow
LIVE_TIMEOUT_MS = 10_000


def _mark(page: Any) -> None:
    """Something a reload would wipe out: the test checks it survives the live updates."""
    page.evaluate("window.__notReloaded = true")


def _not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("window.__notReloaded === true"))


def test_runs_table_queues_and_charts_follow_live(any_page: Any, any_rt: tenure.Runtime) -> None:
    from playwright.sync_api import expect

    page, rt = any_page, any_rt
    seed(rt)
    log_in(page)
    page.goto("/")
    assert page.locator("#chart-finished svg rect.s-completed").count() >= 1
    _mark(page)
    new = rt.enqueue(RunRequest(prompt="arrives later", queue="emails", script=[{"say": "x"}]))
    row = page.locator(f"tr[data-run='{new}']")
    expect(row).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    assert row.locator("a.run-id").inner_text() == "…" + new[-8:]
    assert row.locator("a.run-id").get_attribute("title") == new
    expect(page.locator("tr[data-queue='emails'] td.depth")).to_have_text("1")
    assert _not_reloaded(page)
    shot(page, f"runs_live_{_store(rt)}")


def test_search_by_a_middle_part_of_a_run_id(any_page: Any, any_rt: tenure.Runtime) -> None:
    page, rt = any_page, any_rt
    ids = rt.enqueue_many([RunRequest(prompt="p", script=[{"say": "x"}]) for _ in range(6)])
    log_in(page)
    page.goto("/")
    page.fill("#search", ids[3][14:23])
    page.click("form.filters button")
    page.wait_for_url("**q=*")
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 1 and rows.first.get_attribute("data-run") == ids[3]
    shot(page, f"runs_search_{_store(rt)}")


def test_leases_page_shows_workers_and_follows_live(any_page: Any, any_rt: tenure.Runtime) -> None:
    from playwright.sync_api import expect

    page, rt = any_page, any_rt
    rt.enqueue_many([RunRequest(prompt="p", script=[{"say": "x"}]) for _ in range(3)])
    log_in(page)
    page.goto("/leases")
    assert "no worker holds a lease right now" in page.content()
    _mark(page)
    assert len(rt.store.claim("worker:host-a:7:1", None, 60, 2)) == 2
    assert len(rt.store.claim("worker:host-b:8:1", None, 0.5, 1)) == 1
    alive = page.locator("tr[data-owner='worker:host-a:7:1']")
    expect(alive).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    # host-b's lease runs out: the page shows that it stopped renewing, before any reaper.
    dead = page.locator("tr[data-owner='worker:host-b:8:1']")
    expect(dead).to_contain_text("stopped renewing", timeout=LIVE_TIMEOUT_MS)
    assert "stopped renewing" not in alive.inner_text()
    assert _not_reloaded(page)
    shot(page, f"workers_{_store(rt)}")


def test_dead_letters_follow_live(any_page: Any, any_rt: tenure.Runtime) -> None:
    from playwright.sync_api import expect

    page, rt = any_page, any_rt
    log_in(page)
    page.goto("/dead-letters")
    assert "no dead letters" in page.content()
    _mark(page)
    seeded = seed(rt)
    expect(page.locator(f"a[href='/runs/{seeded.dead}']")).to_have_count(1, timeout=10_000)
    expect(page.locator("#dead-letters-table tbody tr")).to_have_count(2)
    assert _not_reloaded(page)
    shot(page, f"dead_letters_live_{_store(rt)}")


def _store(rt: tenure.Runtime) -> str:
    return "sqlite" if rt.database_url.startswith("sqlite") else "postgres"


def test_prompt_column_reveal_and_the_timing_columns(any_page: Any, any_rt: tenure.Runtime) -> None:
    page, rt = any_page, any_rt
    seeded = seed(rt)
    log_in(page)
    page.goto("/")
    completed = page.locator(f"tr[data-run='{seeded.completed}'] td.prompt")
    assert completed.inner_text() == "hidden"
    later = page.locator(f"tr[data-run='{seeded.queued}'] td.timing")
    assert later.inner_text().startswith("scheduled in 59m")  # enqueued with a delay
    page.click("text=reveal prompts")
    page.wait_for_url("**reveal=true")
    completed = page.locator(f"tr[data-run='{seeded.completed}'] td.prompt")
    assert completed.inner_text() == "the customer's secret prompt"
    shot(page, f"runs_revealed_{_store(rt)}")
