"""The run page shows the answer of a streaming model call growing (SPEC §18), in a real
headless Chromium, on each store."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
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
    """One view that only grows while the run goes on: the run's events (its `claimed`
    event comes while the answer streams) refresh the page's regions, never the whole page,
    which would start the answer over (on PostgreSQL from the words after the reload: the
    text before it cannot be read again, SPEC §18)."""
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
        status = rt.status(run_id)
        assert status is not None and status.status is RunStatus.RUNNING  # while in flight
        views = _views(box, until=lambda: not worker.is_alive())
    finally:
        worker.join()
    result = results[0]
    assert result is not None and result.outcome is Outcome.COMPLETED and result.output
    assert len(views) >= 3, f"the answer did not grow: {views}"
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(views)), views
    assert views[-1] in result.output
    page.wait_for_timeout(1_000)  # the page settles (it reloads once the run has ended)
    shot(page, f"run_streamed_{rt.database_url.split(':')[0]}")


def _views(box: Any, until: Callable[[], bool]) -> list[str]:
    """Each different non-empty text of the answer box, read every 50 ms until `until()`."""
    views: list[str] = []
    while not until():
        text = str(box.inner_text())
        if text and (not views or text != views[-1]):
            views.append(text)
        box.page.wait_for_timeout(50)
    return views
