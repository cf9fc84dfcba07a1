"""The run page shows the answer of a streaming model call growing (SPEC §18), in a real
headless Chromium, on each store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure import Outcome, RunRequest, RunStatus
from tenure.web import create_app
from tests.fakes.openai_service import FakeOpenAI
from tests.stream._proc import MODEL
from tests.stream._proc import make_runtime as streaming_runtime

from .conftest import TOKEN
from .test_browser import Server, _page, browser, log_in, shot

__all__ = ["browser"]  # a fixture shared with test_browser

pytestmark = pytest.mark.slow


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    # Slow enough to watch: about 35 words, one every 60 ms.
    with FakeOpenAI(model="fake-model", chunk_interval=0.06) as service:
        yield service


@pytest.fixture
def streaming_rt(db_url: str, fake: FakeOpenAI) -> Iterator[tenure.Runtime]:
    rt = streaming_runtime(db_url, fake.url)
    yield rt
    rt.close()


@pytest.fixture
def streaming_page(browser: Any, streaming_rt: tenure.Runtime) -> Iterator[Any]:
    with Server(create_app(streaming_rt, token=TOKEN)) as s:
        yield from _page(browser, s)


def test_the_run_page_shows_the_answer_growing(
    streaming_page: Any, streaming_rt: tenure.Runtime
) -> None:
    from playwright.sync_api import expect

    page, rt = streaming_page, streaming_rt
    run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
    log_in(page)
    page.goto(f"/runs/{run_id}?reveal=true")
    results: list[tenure.RunResult | None] = []
    worker = threading.Thread(target=lambda: results.append(rt.run_queued(run_id)))
    worker.start()
    try:
        box = page.locator("#answer-text")
        expect(box).to_be_visible(timeout=10_000)
        seen = _growing(box)
        status = rt.status(run_id)
        assert status is not None and status.status is RunStatus.RUNNING  # while in flight
    finally:
        worker.join()
    # The picture once the page has settled: taken while the answer streams and the page
    # reloads itself, a screenshot can wait past its timeout for a frame.
    page.wait_for_timeout(1_000)
    shot(page, f"run_streamed_{rt.database_url.split(':')[0]}")
    result = results[0]
    assert result is not None and result.outcome is Outcome.COMPLETED and result.output
    # Each view of the growing answer is a piece of the final one (a reload on the run's
    # `claimed` event may have started the view after its first words).
    assert all(text and text in result.output for text in seen)
    assert len(seen[1]) > len(seen[0]) and seen[1].startswith(seen[0])


def _growing(box: Any, seconds: float = 5.0) -> list[str]:
    """Two reads of one view of the answer, the second longer and starting with the first.

    The page reloads itself on each of the run's events (its `claimed` event may come while
    the answer streams), and a reload starts a new view: on PostgreSQL from the words sent
    after it joined (SPEC §18), so it can be shorter than the view before. Such a view is
    taken as the new start."""
    first = _shown(box)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        box.page.wait_for_timeout(50)
        now = _shown(box)
        if now != first and now.startswith(first):
            return [first, now]
        if not now.startswith(first):
            first = now
    raise AssertionError(f"the answer did not grow within {seconds:g} s: {first!r}")


def _shown(box: Any) -> str:
    """The answer as the page shows it now. The page reloads itself on each of the run's
    events (400 ms later), and a view read during a reload is empty: read again."""
    for _ in range(50):
        text = str(box.inner_text())
        if text:
            return text
        box.page.wait_for_timeout(100)
    return ""
