"""End to end in a real headless Chromium (Debian's, driven by Playwright; never a
downloaded browser) against the real server on loopback: the runs page, a run's timeline,
redriving a dead letter, approving a pending run. Screenshots go to test-artifacts/web/."""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus
from tenure.store import NewEvent
from tenure.web import create_app

from .conftest import (
    ASKED_PROMPTS,
    ASKED_WORDS,
    REFUND_ARGS,
    TOKEN,
    WIRE_ARGS,
    Asked,
    Held,
    Seeded,
    Waiting,
    make_runtime,
    seed_asked,
    seed_held,
    seed_waiting,
)

CHROMIUM = os.environ.get("TENURE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"

pytestmark = pytest.mark.slow


def _chromium() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not path:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium")
        pytest.skip("Debian's chromium is not installed")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The app under uvicorn on a loopback port, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def server(rt: tenure.Runtime) -> Iterator[Server]:
    with Server(create_app(rt, token=TOKEN)) as s:
        yield s


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    yield from _page(browser, server)


@pytest.fixture
def any_rt(db_url: str) -> Iterator[tenure.Runtime]:
    """A runtime on each store, for the tests that run on every one."""
    runtime = make_runtime(db_url)
    yield runtime
    runtime.close()


@pytest.fixture
def any_page(browser: Any, any_rt: tenure.Runtime) -> Iterator[Any]:
    with Server(create_app(any_rt, token=TOKEN)) as s:
        yield from _page(browser, s)


def _page(browser: Any, server: Server) -> Iterator[Any]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))

    def on_console(message: Any) -> None:
        # Script errors and CSP refusals fail the test; an HTTP error status a test provokes
        # on purpose ("Failed to load resource") does not.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            errors.append(message.text)

    pg.on("console", on_console)
    pg.set_default_timeout(10_000)
    yield pg
    context.close()
    assert not errors, errors  # no script error, nothing blocked by the page's CSP


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def log_in(page: Any, name: str = "ada") -> None:
    page.goto("/login")
    page.fill("input[name=token]", TOKEN)
    page.fill("input[name=name]", name)
    page.click("button:has-text('log in')")
    page.wait_for_url("**/")


def test_runs_page_with_live_counts(page: Any, rt: tenure.Runtime, seeded: Seeded) -> None:
    log_in(page)
    page.goto("/")
    assert page.locator("[data-count='status:failed']").inner_text() == "2"
    assert page.locator("table.runs tbody tr").count() == 4
    shot(page, "runs")
    rt.enqueue(RunRequest(prompt="new", script=[{"say": "x"}]))
    # The page polls /api/counts with its session: the count moves without a reload.
    from playwright.sync_api import expect

    expect(page.locator("[data-count='status:queued']")).to_have_text("2", timeout=10_000)
    expect(page.locator("[data-count='total']")).to_have_text("5")


def test_a_runs_timeline(page: Any, seeded: Seeded) -> None:
    log_in(page)
    page.goto("/?status=failed&reason=retries_exhausted")
    page.click(f"a[href='/runs/{seeded.dead}']")
    page.wait_for_url(f"**/runs/{seeded.dead}")
    steps = page.locator("ol.timeline li")
    kinds = [steps.nth(i).locator(".kind").inner_text() for i in range(steps.count())]
    assert kinds[:2] == ["request", "claimed"] and kinds[-1] == "dead_lettered"
    assert kinds.count("claimed") == 2 and "requeued" in kinds
    tool = page.locator("li.k-tool").first
    assert "charge" in tool.inner_text() and "non_idempotent_write" in tool.inner_text()
    assert "the customer" not in page.content()
    shot(page, "timeline")
    page.click("text=reveal content")
    page.wait_for_url("**reveal=true")
    assert "charge then fail" in page.content()


def test_redrive_a_dead_letter_after_its_dry_run(
    page: Any, rt: tenure.Runtime, seeded: Seeded
) -> None:
    log_in(page)
    page.goto("/dead-letters")
    assert page.locator("table.runs tbody tr").count() == 2
    shot(page, "dead_letters")
    page.click(f"a[href='/runs/{seeded.dead}/redrive']")
    why = page.locator("#plan-why").inner_text()
    assert "1 non-idempotent write(s) completed" in why
    assert "charge" in page.locator("table.writes").inner_text()
    shot(page, "redrive_plan")
    page.click("button:has-text('redrive')")
    page.wait_for_url(f"**/runs/{seeded.dead}?done=redriven")
    assert "back in the queue" in page.locator(".done").inner_text()
    assert rt.status(seeded.dead).status is RunStatus.QUEUED  # type: ignore[union-attr]
    shot(page, "redriven")

    # The fenced one needs the box ticked: the browser refuses the form without it.
    page.goto(f"/runs/{seeded.fenced}/redrive")
    assert "interrupted" in page.locator("#plan-why").inner_text()
    page.click("button:has-text('force redrive')")
    assert rt.status(seeded.fenced).is_dead_letter  # type: ignore[union-attr]
    shot(page, "redrive_fenced")


def test_approve_a_pending_run(page: Any, rt: tenure.Runtime) -> None:
    waiting: Waiting = seed_waiting(rt)
    log_in(page, "grace")
    page.goto("/pending")
    assert page.locator("section.pending-run").count() == 2
    shot(page, "pending")
    section = page.locator("section.pending-run", has_text=waiting.approval)
    section.locator("input[name=note]").fill("customer called")
    section.locator("button:has-text('approve')").click()
    page.wait_for_url(f"**/runs/{waiting.approval}?done=approved")
    run = rt.status(waiting.approval)
    assert run is not None and run.status is RunStatus.QUEUED
    decision = next(e for e in rt.events(waiting.approval) if e.kind == "approval")
    assert decision.payload["decided_by"] == "grace" and decision.payload["approved"] is True
    shot(page, "approved")


def test_an_approver_sees_what_they_approve(any_page: Any, any_rt: tenure.Runtime) -> None:
    page, rt = any_page, any_rt
    held: Held = seed_held(rt)
    log_in(page, "grace")
    page.goto("/pending")
    refund = page.locator("section.pending-run", has_text=held.refund)
    call = refund.locator("article.held-call")
    # The refund's amount and order are there to read, without revealing anything.
    assert call.locator("table.args tr", has_text="amount").inner_text().split() == [
        "amount",
        str(REFUND_ARGS["amount"]),
    ]
    assert "A-77" in call.locator("table.args").inner_text()
    assert "Refund a customer" in call.locator(".description").inner_text()
    assert "runs once; cannot be undone by tenure" in call.locator(".irreversible").inner_text()
    # The wire's tool is sensitive: its account stays hidden until revealed.
    wire = page.locator("section.pending-run", has_text=held.wire)
    assert "<hidden>" in wire.locator(".args-hidden").inner_text()
    assert str(WIRE_ARGS["iban"]) not in page.content()
    shot(page, "pending_held_calls")
    page.click("text=reveal sensitive arguments")
    page.wait_for_url("**/pending?reveal=true")
    wire = page.locator("section.pending-run", has_text=held.wire)
    assert str(WIRE_ARGS["iban"]) in wire.locator("table.args").inner_text()

    # An input form starts from the model's proposal, a sensitive one's from nothing.
    ship = page.locator("section.pending-run", has_text=held.ship)
    assert ship.locator("input[name='value.address']").input_value() == "9 Model Way"
    assert ship.locator("input[name='value.express']").is_checked()
    unlock = page.locator("section.pending-run", has_text=held.unlock)
    assert unlock.locator("input[name='value.pin']").input_value() == ""

    page.goto("/pending")
    refund = page.locator("section.pending-run", has_text=held.refund)
    refund.locator("input[name=note]").fill("order checked")
    refund.locator("button:has-text('approve')").click()
    page.wait_for_url(f"**/runs/{held.refund}?done=approved")
    run = rt.status(held.refund)
    assert run is not None and run.status is RunStatus.QUEUED
    decision = next(e for e in rt.events(held.refund) if e.kind == "approval")
    assert decision.payload["decided_by"] == "grace" and decision.payload["approved"] is True
    result = rt.run_queued(held.refund)
    assert result is not None and result.outcome is Outcome.COMPLETED

    # A waiting run's own page shows its held call the same way.
    page.goto(f"/runs/{held.wire}")
    assert "sensitive" in page.locator("article.held-call").inner_text()
    assert str(WIRE_ARGS["iban"]) not in page.content()
    page.goto(f"/runs/{held.ship}")
    assert "9 Model Way" in page.locator("article.held-call table.args").inner_text()
    page.click("button:has-text('submit input')")
    page.wait_for_url(f"**/runs/{held.ship}?done=submitted")
    result = rt.run_queued(held.ship)
    assert result is not None and result.outcome is Outcome.COMPLETED
    tool = next(e for e in rt.events(held.ship) if e.kind == "tool")
    assert tool.payload["result"] == "shipping to 9 Model Way (express)"
    shot(page, "input_accepted")


def test_an_approval_card_says_why_the_call_was_made(
    any_page: Any, any_rt: tenure.Runtime, db_url: str
) -> None:
    from .._raw import backdate_update

    page, rt = any_page, any_rt
    asked: Asked = seed_asked(rt)
    backdate_update(db_url, asked.b2, 26 * 3600)
    log_in(page, "grace")
    page.goto("/pending")
    a1 = page.locator("section.pending-run", has_text=asked.a1).locator(".held-context")
    b2 = page.locator("section.pending-run", has_text=asked.b2).locator(".held-context")
    # Two refund cards: the same tool, told apart by their prompts and the model's words.
    assert ASKED_WORDS["a1"] in a1.locator(".model-text").inner_text()
    assert ASKED_WORDS["b2"] in b2.locator(".model-text").inner_text()
    assert ASKED_PROMPTS["b2"] in b2.locator(".prompt").inner_text()
    assert "B-2" not in a1.inner_text() and "A-1" not in b2.inner_text()
    # A long prompt is clipped on the card; all of it is one click away.
    clipped = a1.locator(".prompt .clipped").inner_text()
    assert clipped.startswith("Customer 118 writes: my order A-1 arrived broken.")
    assert len(clipped) < len(ASKED_PROMPTS["a1"])
    full = a1.locator(".prompt details .content")
    assert not full.is_visible()
    a1.locator(".prompt details summary").click()
    assert full.is_visible() and full.inner_text().strip() == ASKED_PROMPTS["a1"].strip()
    assert not a1.locator(".prompt .clipped").is_visible()  # the whole text replaces it
    # How long each has waited, by the database's clock.
    assert b2.locator(".waited-for").inner_text() == "1d 2h"
    assert a1.locator(".waited-for").inner_text().endswith("s")
    # The wire's tool is sensitive: its card says so and shows neither text.
    wire = page.locator("section.pending-run", has_text=asked.wire).locator(".held-context")
    assert "hidden: sensitive tool wire" in wire.locator(".context-hidden").inner_text()
    assert ASKED_WORDS["wire"] not in page.content() and "DE89" not in page.content()
    assert wire.locator(".waited-for").inner_text().endswith("s")
    shot(page, "pending_context")


def test_live_leases_by_worker_and_a_reaper_pass(page: Any, rt: tenure.Runtime) -> None:
    held = rt.enqueue(RunRequest(prompt="held", script=[{"say": "x"}]))
    stale = rt.enqueue(RunRequest(prompt="stale", script=[{"say": "x"}]))
    assert rt.store.claim_run(held, "worker:box-a:4242:1", 600) is not None
    assert rt.store.claim_run(stale, "worker:box-b:777:1", 0.05) is not None
    time.sleep(0.2)
    log_in(page)
    page.goto("/leases")
    assert page.locator("section.holder").count() == 2
    assert held[-8:] in page.locator("section.holder", has_text="box-a").inner_text()
    shot(page, "leases")
    page.click("button:has-text('run one reaper pass')")
    assert page.locator("#reaped").inner_text().startswith("requeued 1,")
    assert rt.status(stale).status is RunStatus.QUEUED  # type: ignore[union-attr]


def test_the_leases_page_lists_models_and_open_circuits(page: Any, rt: tenure.Runtime) -> None:
    rt.add_model("gpt", tenure.providers.Scripted(), limits=tenure.Limits(600, 90_000, 8))
    rt.store.set_model_limits("gpt", tenure.Limits(600, 90_000, 8))
    rt.store.open_circuit("gpt", 600)
    log_in(page)
    page.goto("/leases")
    row = page.locator("table.models tr[data-model='gpt']").inner_text()
    assert "600" in row and "90000" in row and "8" in row
    assert "in 9m" in row  # the circuit closes in about ten minutes
    shot(page, "models")


def test_a_run_page_follows_the_live_run(page: Any, rt: tenure.Runtime) -> None:
    from playwright.sync_api import expect

    run_id = rt.enqueue(RunRequest(prompt="slow", script=[{"sleep": 1.0}, {"say": "done"}]))
    log_in(page)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("h1 .status")).to_have_text("queued")
    worker = threading.Thread(target=rt.run_queued, args=(run_id,))
    worker.start()
    try:
        # The page follows the run's event stream and reloads as it moves, to the end.
        expect(page.locator("h1 .status")).to_have_text("completed", timeout=15_000)
        expect(page.locator("li.k-assembled")).to_have_count(1)
    finally:
        worker.join()
    shot(page, "followed")


def test_another_site_cannot_post_the_dashboards_forms(
    page: Any, server: Server, rt: tenure.Runtime, seeded: Seeded
) -> None:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    target = f"{server.url}/runs/{seeded.dead}/redrive"

    def attack(request: Any) -> HTMLResponse:
        return HTMLResponse(
            f'<form method="post" action="{target}"><input type="hidden" name="csrf" '
            'value="guessed"><button id="go">win a prize</button></form>'
        )

    log_in(page)  # the operator's browser holds a valid session
    with Server(Starlette(routes=[Route("/", attack)])) as evil:
        page.goto(evil.url.replace("127.0.0.1", "localhost") + "/")
        with page.expect_navigation():
            page.click("#go")
        # Refused three times over: cross-site, no session cookie (SameSite), no CSRF token.
        assert "cross-site form submissions are refused" in page.content()
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]
    shot(page, "csrf_refused")


def test_pause_and_resume_a_queue_from_the_queue_panel(
    any_page: Any, any_rt: tenure.Runtime
) -> None:
    page, rt = any_page, any_rt
    run_id = rt.enqueue(RunRequest(prompt="mail", queue="mail", script=[{"say": "sent"}]))
    log_in(page)
    page.goto("/")
    row = page.locator("table.queues tr[data-queue='mail']")
    assert "active" in row.locator("td.queue-state").inner_text()
    row.locator("button[data-queue-action='pause']").click()
    page.wait_for_url("**/?done=paused")
    assert "Queue paused" in page.locator(".done").inner_text()
    row = page.locator("table.queues tr[data-queue='mail']")
    assert "paused" in row.locator("td.queue-state").inner_text()
    assert [p.queue for p in rt.paused_queues()] == ["mail"]
    assert rt.run_queued(run_id) is None  # no worker claims it now
    shot(page, "queue_paused")
    row.locator("button[data-queue-action='resume']").click()
    page.wait_for_url("**/?done=resumed")
    assert rt.paused_queues() == []
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED


def test_cancel_every_run_a_filter_matches_after_its_count(
    any_page: Any, any_rt: tenure.Runtime
) -> None:
    page, rt = any_page, any_rt
    mail = rt.enqueue_many(
        [RunRequest(prompt="m", queue="mail", script=[{"say": "x"}]) for _ in range(3)]
    )
    other = rt.enqueue(RunRequest(prompt="o", queue="other", script=[{"say": "x"}]))
    log_in(page)
    page.goto("/?status=queued&queue=mail")
    page.click("a[data-bulk='cancel']")
    page.wait_for_url("**/bulk?action=cancel*")
    assert page.locator("#bulk-count b").inner_text() == "3"
    assert {rt.status(i).status for i in mail} == {RunStatus.QUEUED}  # type: ignore[union-attr]
    shot(page, "bulk_cancel_confirm")
    page.click("#bulk-confirm button")
    assert page.locator("#bulk-summary").inner_text().startswith("cancelled 3")
    assert {rt.status(i).status for i in mail} == {RunStatus.CANCELLED}  # type: ignore[union-attr]
    assert rt.status(other).status is RunStatus.QUEUED  # type: ignore[union-attr]
    shot(page, "bulk_cancelled")


def test_the_workers_page_is_titled_workers(page: Any, rt: tenure.Runtime) -> None:
    log_in(page)
    page.goto("/")
    page.click("header nav a:has-text('Workers')")
    page.wait_for_url("**/workers")
    assert page.title() == "Workers · tenure"
    assert page.locator("header nav a.here").inner_text() == "Workers"
    assert page.locator("section.workers h2").inner_text() == "Workers"
    page.goto("/leases")  # the old address still serves it
    assert page.title() == "Workers · tenure"


def test_the_runs_list_says_scheduled_and_shows_tokens_and_cost(
    any_page: Any, any_rt: tenure.Runtime
) -> None:
    page, rt = any_page, any_rt
    delayed = rt.enqueue(RunRequest(prompt="later", script=[{"say": "x"}]), delay=3600)
    done = rt.enqueue(RunRequest(prompt="now", script=[{"say": "x"}]))
    (claimed,) = rt.store.claim("worker:h:1:1", None, 60, 1)
    assert claimed.lease.run_id == done
    usage = tenure.Usage(input_tokens=100, output_tokens=20, cost=0.5)
    assert rt.store.record_step(claimed.lease, 60, [], usage) is not None
    log_in(page)
    page.goto("/")
    timing = page.locator(f"tr[data-run='{delayed}'] td.timing").inner_text()
    assert timing.startswith("scheduled in 59m") and "next attempt" not in timing
    row = page.locator(f"tr[data-run='{done}']")
    assert row.locator("td.tokens").inner_text() == "120"
    assert row.locator("td.cost").inner_text() == "0.5000"
    assert row.locator("td.duration").inner_text().endswith("s")
    assert page.locator("tr[data-queue='default'] td.scheduled").inner_text() == "1"
    shot(page, f"runs_columns_{'sqlite' if rt.database_url.startswith('sqlite') else 'pg'}")


def test_fork_from_here_shows_the_plan_then_asks_for_confirmation(
    page: Any, rt: tenure.Runtime, seeded: Seeded
) -> None:
    from tenure import EventKind

    charged = next(e.sequence for e in rt.events(seeded.dead) if e.kind is EventKind.TOOL)
    log_in(page)
    page.goto(f"/runs/{seeded.dead}")
    page.locator(f"li[data-sequence='{charged + 1}'] a.fork-link").click()
    page.wait_for_url(f"**/runs/{seeded.dead}/fork?at={charged + 1}")
    assert "none: every write before" in page.locator("#fork-plan").inner_text()
    assert page.locator("#fork-kept li").count() == charged + 1
    shot(page, "fork_plan")
    page.click(f"button:has-text('fork from #{charged + 1}')")
    page.wait_for_url("**?done=forked")
    assert "Forked:" in page.locator(".done").inner_text()
    assert seeded.dead in page.locator("#forked-from").inner_text()
    shot(page, "forked")

    # From the charge itself: it would run again, and the box must be ticked first.
    page.goto(f"/runs/{seeded.dead}")
    page.locator(f"li[data-sequence='{charged}'] a.fork-link").click()
    assert "charge" in page.locator("#fork-repeated").inner_text()
    before = len(rt.runs())
    page.click("button:has-text('fork and repeat these writes')")
    assert len(rt.runs()) == before  # the browser refused the form without the box
    page.check("input[name=allow_repeat_writes]")
    page.click("button:has-text('fork and repeat these writes')")
    page.wait_for_url("**?done=forked")
    assert len(rt.runs()) == before + 1
    shot(page, "forked_repeating")


def test_the_queue_panel_shows_tokens_and_cost_per_queue_live(
    any_page: Any, any_rt: tenure.Runtime
) -> None:
    from playwright.sync_api import expect

    page, rt = any_page, any_rt
    usage = {"input_tokens": 100, "output_tokens": 20, "cost": 0.5}
    done = rt.enqueue(RunRequest(prompt="m", queue="mail", script=[{"say": "x", "usage": usage}]))
    assert rt.run_queued(done) is not None
    log_in(page)
    page.goto("/")
    row = page.locator("table.queues tr[data-queue='mail']")
    expect(row.locator("td.tokens")).to_have_text("120")
    assert row.locator("td.tokens").get_attribute("title") == "100 in / 20 out"
    expect(row.locator("td.cost")).to_have_text("0.5000")
    assert "tokens (24 h)" in page.locator("table.queues thead").inner_text().lower()
    # Another run of the queue spends while the page is open: the panel's next refresh
    # shows the new totals without a reload.
    more = {"input_tokens": 1000, "output_tokens": 3, "cost": 0.25}
    later = rt.enqueue(RunRequest(prompt="m", queue="mail", script=[{"say": "x", "usage": more}]))
    assert rt.run_queued(later) is not None
    expect(row.locator("td.tokens")).to_have_text("1123")
    expect(row.locator("td.cost")).to_have_text("0.7500")
    shot(page, f"queue_totals_{'sqlite' if rt.database_url.startswith('sqlite') else 'pg'}")


def test_search_runs_by_metadata_and_creation_time(any_page: Any, any_rt: tenure.Runtime) -> None:
    page, rt = any_page, any_rt

    def enqueue(tenant: str) -> str:
        return rt.enqueue(
            RunRequest(prompt="p", script=[{"say": "ok"}], metadata={"tenant": tenant})
        )

    acme, globex = enqueue("acme"), enqueue("globex")
    log_in(page)
    page.goto("/")
    page.fill("form.filters input[name=meta]", "tenant=acme")
    page.select_option("form.filters select[name=since]", label="an hour")
    page.click("form.filters button:has-text('filter')")
    page.wait_for_url("**/?*meta=tenant%3Dacme*")
    assert page.locator(f"table.runs tr[data-run='{acme}']").count() == 1
    assert page.locator(f"table.runs tr[data-run='{globex}']").count() == 0
    assert page.locator("form.filters input[name=meta]").input_value() == "tenant=acme"
    assert page.locator("form.filters select[name=since]").input_value() == "3600"
    shot(page, "search_by_metadata")
    page.fill("form.filters input[name=meta]", "tenant=initech")
    page.click("form.filters button:has-text('filter')")
    page.wait_for_url("**/?*meta=tenant%3Dinitech*")
    assert page.locator("table.runs tr[data-run]").count() == 0
    page.fill("form.filters input[name=meta]", "")
    page.click("form.filters button:has-text('filter')")
    page.wait_for_url("**/?*meta=&*")
    assert page.locator(f"table.runs tr[data-run='{acme}']").count() == 1
    assert page.locator(f"table.runs tr[data-run='{globex}']").count() == 1


def test_a_running_run_shows_its_step_in_flight(page: Any, rt: tenure.Runtime) -> None:
    from playwright.sync_api import expect

    run_id = rt.enqueue(RunRequest(prompt="p", script=[{"say": "ok"}]))
    [claimed] = rt.store.claim("worker:h:1:1", None, 60, 1)
    assert claimed.lease.run_id == run_id
    log_in(page)
    page.goto("/")
    flight = page.locator(f"tr[data-run='{run_id}'] td.timing .in-flight")
    expect(flight).to_have_text(re.compile(r"^step 2 for \d"))
    assert flight.get_attribute("title") == "the step after event 1 (claimed)"
    page.goto(f"/runs/{run_id}")
    expect(page.locator("dd.in-flight")).to_have_text(re.compile(r"^step 2, after claimed, for"))
    # A step is recorded: the next one is in flight.
    assert rt.store.record_step(claimed.lease, 60, [NewEvent(EventKind.LLM, {})]) is not None
    page.reload()
    expect(page.locator("dd.in-flight")).to_have_text(re.compile(r"^step 3, after llm, for"))
    shot(page, "step_in_flight")
