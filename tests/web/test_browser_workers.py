"""The workers view in a real headless Chromium, on each store: a worker process appears with
its slots, and once SIGKILLed its row turns dead on the page without a reload (its heartbeat
is overdue; the page follows live). Screenshots go to test-artifacts/web/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import RunRequest

from ..apps import make_app
from ..crash._workers import spawn, wait_for
from .test_browser import any_page, any_rt, browser, log_in, shot

__all__ = ["any_page", "any_rt", "browser"]  # fixtures shared with test_browser

pytestmark = pytest.mark.slow
LEASE = 3.0  # a heartbeat every second: dead 2.5 s after the last one
LIVE_TIMEOUT_MS = 15_000


def test_a_killed_worker_turns_dead_on_the_workers_page(
    any_page: Any, any_rt: tenure.Runtime, db_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = any_page
    ledger = tmp_path / "ledger"
    app = make_app(db_url, str(ledger), LEASE)
    script = [{"call": [{"tool": "nap", "args": {"seconds": 20}}]}, {"say": "rested"}]
    run_id = app.enqueue(RunRequest(prompt="nap", model="scripted", tools=["nap"], script=script))
    victim = spawn(db_url, ledger, "--concurrency", "3", lease=LEASE)
    try:
        running = tenure.RunStatus.RUNNING
        wait_for(lambda: app.store.run_status(run_id) is running, what="the run claimed")
        log_in(page)
        page.goto("/leases")
        row = page.locator(f"tr[data-owner$=':{victim.pid}:1']")
        expect(row).to_have_attribute("data-state", "running", timeout=LIVE_TIMEOUT_MS)
        expect(row.locator("td.slots")).to_have_text("1/3", timeout=LIVE_TIMEOUT_MS)
        page.evaluate("window.__notReloaded = true")
        victim.kill()
        expect(row).to_have_attribute("data-state", "dead", timeout=LIVE_TIMEOUT_MS)
        expect(row.locator(".worker-state")).to_have_text("dead")
        assert page.evaluate("window.__notReloaded === true")
        store = "sqlite" if db_url.startswith("sqlite") else "postgres"
        shot(page, f"workers_dead_{store}")
    finally:
        victim.stop()
        app.close()
