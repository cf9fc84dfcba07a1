"""The dashboard's pages and forms through the ASGI app (the browser tests drive the same
pages in Chromium)."""

from __future__ import annotations

from fastapi.testclient import TestClient

import tenure
from tenure import RunStatus

from .conftest import SECRET, Seeded, login


def test_bulk_redrive_form_dry_run_then_for_real(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded
) -> None:
    csrf = login(client)
    page = client.get("/dead-letters")
    assert seeded.dead[:8] in page.text and seeded.fenced[:8] in page.text
    dry = client.post("/dead-letters/redrive", data={"csrf": csrf, "dry_run": "true"})
    assert "would redrive 1; skipped 1" in dry.text
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]
    done = client.post("/dead-letters/redrive", data={"csrf": csrf, "limit": "10"})
    assert "redriven 1; skipped 1" in done.text
    assert rt.status(seeded.dead).status is RunStatus.QUEUED  # type: ignore[union-attr]
    assert rt.status(seeded.fenced).is_dead_letter  # type: ignore[union-attr]


def test_cancel_form_and_the_run_page(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded
) -> None:
    csrf = login(client)
    page = client.get(f"/runs/{seeded.queued}")
    assert "scheduled for" in page.text  # enqueued with a delay: not claimable yet
    assert "backoff until" not in page.text  # and not backing off after a failure
    assert "cancel run" in page.text
    done = client.post(f"/runs/{seeded.queued}/cancel", data={"csrf": csrf})
    assert done.status_code == 200 and "Cancelled." in done.text
    assert rt.status(seeded.queued).status is RunStatus.CANCELLED  # type: ignore[union-attr]
    completed = client.get(f"/runs/{seeded.completed}")
    assert SECRET not in completed.text and "gold plan" not in completed.text
    assert "gold plan" in client.get(f"/runs/{seeded.completed}?reveal=true").text


def test_runs_page_filters_and_pages(client: TestClient, rt: tenure.Runtime) -> None:
    login(client)
    rt.enqueue_many([tenure.RunRequest(prompt="x", script=[{"say": "x"}]) for _ in range(55)])
    first = client.get("/")
    assert first.text.count('class="mono run-id" href="/runs/') == 50 and 'rel="next"' in first.text
    next_url = first.text.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
    second = client.get(next_url)
    assert (
        second.text.count('class="mono run-id" href="/runs/') == 5
        and 'rel="next"' not in second.text
    )
    none = client.get("/?status=running")
    assert "no runs" in none.text


def test_the_leases_page_shows_every_model_and_its_circuit(
    client: TestClient, rt: tenure.Runtime
) -> None:
    login(client)
    # A model without limits is listed too: no limits, its circuit closed.
    free = client.get("/leases").text.split('data-model="default"', 1)[1].split("</tr>", 1)[0]
    assert free.count(">-<") == 3 and "closed" in free
    rt.add_model("gpt", tenure.providers.Scripted(), limits=tenure.Limits(600, None, 4))
    rt.add_model("claude", tenure.providers.Scripted(), limits=tenure.Limits())
    rt.store.set_model_limits("claude", tenure.Limits())
    rt.store.open_circuit("claude", 300)
    page = client.get("/leases").text
    assert "<h2>Models</h2>" in page
    gpt = page.split('data-model="gpt"', 1)[1].split("</tr>", 1)[0]
    assert "600.0" in gpt and ">4<" in gpt and "closed" in gpt
    claude = page.split('data-model="claude"', 1)[1].split("</tr>", 1)[0]
    assert "closed" not in claude and "in 4m" in claude
