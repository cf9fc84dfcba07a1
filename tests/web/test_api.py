"""The JSON API over a real database, through the ASGI app."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

import tenure
from tenure import RunRequest, RunStatus

from .conftest import AUTH, SECRET, Seeded, _wait_claimable, login, make_runtime, seed


def test_health_and_the_openapi_schema_are_served(client: TestClient) -> None:
    health = client.get("/api/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok" and health.json()["writes_enabled"] is True
    schema = client.get("/api/openapi.json").json()
    assert "/api/runs" in schema["paths"] and "/api/runs/{run_id}/events/stream" in schema["paths"]
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    # No page that loads its scripts from elsewhere.
    assert client.get("/docs").status_code == 404


def test_runs_paginate_with_a_cursor_and_keep_their_filters(
    client: TestClient, rt: tenure.Runtime
) -> None:
    ids = rt.enqueue_many([RunRequest(prompt=f"p{i}", script=[{"say": "x"}]) for i in range(5)])
    rt.enqueue(RunRequest(prompt="other", queue="other", script=[{"say": "x"}]))
    seen: list[str] = []
    url = "/api/runs?queue=default&limit=2"
    pages = 0
    while url:
        page = client.get(url, headers=AUTH).json()
        seen += [r["id"] for r in page["runs"]]
        pages += 1
        cursor = page["next_cursor"]
        url = f"/api/runs?queue=default&limit=2&cursor={cursor}" if cursor else ""
    assert pages == 3 and sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert all("request" not in r for r in client.get("/api/runs", headers=AUTH).json()["runs"])
    stale = client.get("/api/runs?cursor=no-such-run", headers=AUTH)
    assert stale.status_code == 400 and "cursor" in stale.json()["error"]


def test_filters_by_status_and_reason_and_counts(client: TestClient, seeded: Seeded) -> None:
    failed = client.get("/api/runs?status=failed", headers=AUTH).json()["runs"]
    assert {r["id"] for r in failed} == {seeded.dead, seeded.fenced}
    fenced = client.get("/api/runs?reason=not_retryable", headers=AUTH).json()["runs"]
    assert [r["id"] for r in fenced] == [seeded.fenced]
    assert fenced[0]["pending_effect"] == "non_idempotent_write"
    counts = client.get("/api/counts", headers=AUTH).json()
    assert counts["total"] == 4 and counts["dead_letters"] == 2
    assert counts["by_status"]["failed"] == 2 and counts["by_status"]["running"] == 0
    assert counts["by_reason"]["retries_exhausted"] == 1
    bad = client.get("/api/runs?status=sleeping", headers=AUTH)
    assert bad.status_code == 422 and "status" in bad.json()["error"]


def test_content_is_hidden_unless_revealed(client: TestClient, seeded: Seeded) -> None:
    events = client.get(f"/api/runs/{seeded.completed}/events", headers=AUTH).json()
    text = json.dumps(events)
    assert SECRET not in text and "gold plan" not in text and '"c-1"' not in text
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["request", "claimed"] and "tool" in kinds and kinds[-1] == "assembled"
    tool = next(e for e in events if e["kind"] == "tool")
    assert tool["payload"]["name"] == "lookup" and tool["payload"]["effect"] == "read_only"
    assert tool["payload"]["args"] == "<hidden>" and tool["payload"]["result"] == "<hidden>"
    llm = next(e for e in events if e["kind"] == "llm")
    assert llm["payload"]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    run = client.get(f"/api/runs/{seeded.completed}", headers=AUTH).json()
    assert run["output"] == "<hidden>" and run["status"] == "completed"

    shown = client.get(f"/api/runs/{seeded.completed}/events?reveal=true", headers=AUTH).json()
    assert SECRET in json.dumps(shown) and '"c-1"' in json.dumps(shown)
    run = client.get(f"/api/runs/{seeded.completed}?reveal=true", headers=AUTH).json()
    assert run["output"] == "gold plan"


def test_events_after_a_sequence(client: TestClient, seeded: Seeded) -> None:
    every = client.get(f"/api/runs/{seeded.completed}/events", headers=AUTH).json()
    later = client.get(f"/api/runs/{seeded.completed}/events?after=2", headers=AUTH).json()
    assert [e["sequence"] for e in later] == [e["sequence"] for e in every][3:]
    assert client.get("/api/runs/nope/events", headers=AUTH).status_code == 404


def test_unknown_run_is_a_404_naming_it(client: TestClient) -> None:
    response = client.get("/api/runs/no-such-run", headers=AUTH)
    assert response.status_code == 404
    assert response.json() == {"error": "no run with id 'no-such-run'"}


def test_enqueue_validates_and_returns_the_id(client: TestClient, rt: tenure.Runtime) -> None:
    body = {"prompt": "hello", "script": [{"say": "hi"}], "queue": "web", "metadata": {"a": 1}}
    created = client.post("/api/runs", json=body, headers=AUTH)
    assert created.status_code == 201
    run = rt.status(created.json()["id"])
    assert run is not None and run.status is RunStatus.QUEUED and run.queue == "web"
    again = client.post("/api/runs", json={**body, "idempotency_key": "k"}, headers=AUTH)
    same = client.post("/api/runs", json={**body, "idempotency_key": "k"}, headers=AUTH)
    assert again.json()["id"] == same.json()["id"]

    unknown = client.post("/api/runs", json={"prompt": "x", "tools": ["nope"]}, headers=AUTH)
    assert unknown.status_code == 400 and "nope" in unknown.json()["error"]
    script = client.post("/api/runs", json={"prompt": "x", "script": [{"dance": 1}]}, headers=AUTH)
    assert script.status_code == 400
    shape = client.post("/api/runs", json={"prompt": "", "max_iterations": 0}, headers=AUTH)
    assert shape.status_code == 422
    extra = client.post("/api/runs", json={"prompt": "x", "urgency": 9}, headers=AUTH)
    assert extra.status_code == 422
    nul = client.post("/api/runs", json={"prompt": "x", "metadata": {"k": "a\x00b"}}, headers=AUTH)
    assert nul.status_code == 422 and "NUL" in nul.json()["error"]


def test_cancel(client: TestClient, seeded: Seeded) -> None:
    assert client.post(f"/api/runs/{seeded.queued}/cancel", headers=AUTH).json()["cancelled"]
    again = client.post(f"/api/runs/{seeded.queued}/cancel", headers=AUTH)
    assert again.status_code == 409 and "already ended" in again.json()["error"]
    assert client.post("/api/runs/nope/cancel", headers=AUTH).status_code == 404


def test_redrive_plan_lists_the_writes_already_done(client: TestClient, seeded: Seeded) -> None:
    plan = client.get(f"/api/runs/{seeded.dead}/redrive-plan", headers=AUTH).json()
    assert plan["redrivable"] and not plan["needs_force"]
    (write,) = plan["non_idempotent_writes_done"]
    assert write["tool"] == "charge" and write["args"] == "<hidden>"
    assert write["idempotency_key"].startswith(seeded.dead + ":")
    assert "none of them runs again" in plan["why"]
    revealed = client.get(f"/api/runs/{seeded.dead}/redrive-plan?reveal=true", headers=AUTH)
    assert revealed.json()["non_idempotent_writes_done"][0]["args"] == {"amount": 42}

    fenced = client.get(f"/api/runs/{seeded.fenced}/redrive-plan", headers=AUTH).json()
    assert fenced["needs_force"] and fenced["interrupted_write"]["tool"] == "charge"
    assert fenced["next_calls"][0]["effect"] == "non_idempotent_write"
    done = client.get(f"/api/runs/{seeded.completed}/redrive-plan", headers=AUTH).json()
    assert not done["redrivable"] and "not dead-lettered" in done["why"]


def test_redrive_one_refuses_a_standing_fence_without_force(
    client: TestClient, rt: tenure.Runtime, seeded: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    refused = client.post(f"/api/runs/{seeded.fenced}/redrive", headers=AUTH)
    assert refused.status_code == 409 and "fence stands" in refused.json()["error"]
    with caplog.at_level("INFO", logger="tenure.web.audit"):
        forced = client.post(f"/api/runs/{seeded.fenced}/redrive?force=true", headers=AUTH)
    assert forced.status_code == 200 and forced.json()["forced"] is True
    assert any(
        "FORCED" in r.getMessage() and seeded.fenced in r.getMessage() for r in caplog.records
    )
    ok = client.post(f"/api/runs/{seeded.dead}/redrive", headers=AUTH)
    assert ok.json()["redriven"] is True
    assert rt.status(seeded.dead).status is RunStatus.QUEUED  # type: ignore[union-attr]
    again = client.post(f"/api/runs/{seeded.dead}/redrive", headers=AUTH)
    assert again.status_code == 409 and "not dead-lettered" in again.json()["error"]


def _dead_letter_with_a_probed_fence(rt: tenure.Runtime) -> str:
    """A run whose write failed without an answer, then whose probe could not tell: it is
    dead-lettered with its fence standing, and its tool has a probe."""

    @rt.tool(
        effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE,
        timeout=2,
        probe=lambda ctx, amount: tenure.Probe.unknown("the gateway does not say"),
    )
    def pay(ctx: tenure.ToolContext, amount: int) -> dict[str, int]:
        raise tenure.RetryableError("no answer", failure_class=tenure.FailureClass.TIMEOUT)

    run_id = rt.enqueue(
        RunRequest(
            prompt="pay",
            tools=["pay"],
            script=[{"call": [{"tool": "pay", "args": {"amount": 7}}]}, {"say": "paid"}],
        )
    )
    rt.run_queued(run_id)  # the write fails unanswered: back in doubt
    _wait_claimable(rt, run_id)
    rt.run_queued(run_id)  # the probe cannot tell: dead-lettered, fence standing
    run = rt.status(run_id)
    assert run is not None and run.is_dead_letter and run.fence_probe
    return run_id


def test_bulk_redrive_lets_the_probe_decide_a_fence_whose_tool_has_one(
    make_client: Callable[..., TestClient], rt: tenure.Runtime, seeded: Seeded
) -> None:
    # As `tenure bulk redrive` does: only a fence without a probe needs a person's look.
    probed = _dead_letter_with_a_probed_fence(rt)
    client = make_client()
    dry = client.post("/api/redrive", json={"dry_run": True}, headers=AUTH).json()
    assert probed in dry["would_redrive"] and dry["skipped_fenced"] == [seeded.fenced]
    done = client.post("/api/redrive", json={}, headers=AUTH).json()
    assert probed in done["redriven"] and done["skipped_fenced"] == [seeded.fenced]
    run = rt.status(probed)
    assert run is not None and run.status is RunStatus.QUEUED and run.fence_probe


def test_bulk_redrive_is_capped_skips_fences_and_is_audited(
    make_client: Callable[..., TestClient],
    rt: tenure.Runtime,
    seeded: Seeded,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_client()
    more = seed(rt)
    dry = client.post("/api/redrive", json={"dry_run": True}, headers=AUTH).json()
    # A dry run redrives nothing, and says so: its candidates are under would_redrive.
    assert dry["redriven"] == []
    assert sorted(dry["would_redrive"]) == sorted([seeded.dead, more.dead])
    assert sorted(dry["skipped_fenced"]) == sorted([seeded.fenced, more.fenced])
    assert rt.status(seeded.dead).is_dead_letter  # type: ignore[union-attr]

    with caplog.at_level("INFO", logger="tenure.web.audit"):
        capped = client.post(
            "/api/redrive", json={"reason": "retries_exhausted", "limit": 1}, headers=AUTH
        ).json()
    assert len(capped["redriven"]) == 1 and capped["more"] is True
    audit = [r.getMessage() for r in caplog.records if r.name == "tenure.web.audit"]
    assert any("bulk redrive by api" in m and capped["redriven"][0] in m for m in audit)
    rest = client.post("/api/redrive", json={}, headers=AUTH).json()
    assert len(rest["redriven"]) == 1 and len(rest["skipped_fenced"]) == 2
    too_many = client.post("/api/redrive", json={"limit": 100_000}, headers=AUTH)
    assert too_many.status_code == 422
    assert (
        client.post("/api/redrive", json={"reason": "completed"}, headers=AUTH).status_code == 422
    )


def test_one_reaper_pass(client: TestClient, rt: tenure.Runtime) -> None:
    run_id = rt.enqueue(RunRequest(prompt="x", script=[{"say": "x"}]))
    claimed = rt.store.claim_run(run_id, "worker:gone:1:1", 0.05)
    assert claimed is not None
    import time

    time.sleep(0.2)
    report = client.post("/api/reap?limit=10", headers=AUTH).json()
    assert report == {"requeued": 1, "dead_lettered": 0, "skipped": 0}


def test_leases_by_worker(client: TestClient, rt: tenure.Runtime) -> None:
    a = rt.enqueue(RunRequest(prompt="x", script=[{"say": "x"}]))
    b = rt.enqueue(RunRequest(prompt="y", script=[{"say": "y"}]))
    rt.store.claim_run(a, "worker:h:1:1", 60)
    rt.store.claim_run(b, "worker:h:2:1", 60)
    holders = client.get("/api/leases", headers=AUTH).json()
    assert [h["owner"] for h in holders] == ["worker:h:1:1", "worker:h:2:1"]
    assert holders[0]["runs"][0]["id"] == a and holders[0]["runs"][0]["lease_token"] == 1


def _sse(text: str) -> list[tuple[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
        )
        out.append((fields.get("event", ""), fields.get("data", "")))
    return out


def test_server_sent_events_of_an_ended_run(client: TestClient, seeded: Seeded) -> None:
    with client.stream("GET", f"/api/runs/{seeded.completed}/events/stream", headers=AUTH) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        body = r.read().decode()
    messages = _sse(body)
    assert messages[-1] == ("end", json.dumps({"status": "completed"}))
    sequences = [json.loads(d)["sequence"] for k, d in messages if k == "event"]
    assert sequences == list(range(len(sequences))) and SECRET not in body


def test_server_sent_events_follow_a_live_run_until_it_ends(
    client: TestClient, rt: tenure.Runtime
) -> None:
    run_id = rt.enqueue(RunRequest(prompt="slow", script=[{"sleep": 0.4}, {"say": "done at last"}]))
    worker = threading.Thread(target=rt.run_queued, args=(run_id,))
    with client.stream("GET", f"/api/runs/{run_id}/events/stream?after=0", headers=AUTH) as r:
        worker.start()
        body = r.read().decode()
    worker.join()
    messages = _sse(body)
    kinds = [json.loads(d)["kind"] for k, d in messages if k == "event"]
    assert kinds == ["claimed", "llm", "assembled"] and messages[-1][0] == "end"


def test_api_on_every_store(db_url: str) -> None:
    """The same reads and writes on each backend (PostgreSQL included)."""
    from tenure.web import create_app

    runtime = make_runtime(db_url)
    try:
        seeded = seed(runtime)
        with TestClient(create_app(runtime, token=AUTH["Authorization"][7:])) as client:
            page = client.get("/api/runs?limit=3", headers=AUTH).json()
            rest = client.get(f"/api/runs?cursor={page['next_cursor']}", headers=AUTH).json()
            assert len(page["runs"]) + len(rest["runs"]) == 4 and rest["next_cursor"] is None
            assert client.get("/api/counts", headers=AUTH).json()["dead_letters"] == 2
            plan = client.get(f"/api/runs/{seeded.fenced}/redrive-plan", headers=AUTH).json()
            assert plan["needs_force"]
            bulk = client.post("/api/redrive", json={}, headers=AUTH).json()
            assert bulk["redriven"] == [seeded.dead] and bulk["skipped_fenced"] == [seeded.fenced]
            metrics = client.get("/metrics", headers=AUTH).text
            assert 'tenure_runs{status="queued"} 2.0' in metrics
    finally:
        runtime.close()


def test_an_event_stream_resumes_after_the_last_event_id(
    client: TestClient, seeded: Seeded
) -> None:
    url = f"/api/runs/{seeded.completed}/events/stream"
    with client.stream("GET", url, headers={**AUTH, "Last-Event-ID": "3"}) as r:
        body = r.read().decode()
    sequences = [json.loads(d)["sequence"] for k, d in _sse(body) if k == "event"]
    assert sequences and sequences[0] == 4


def test_a_run_shows_its_trees_budget(
    rt: tenure.Runtime, make_client: Callable[..., TestClient]
) -> None:
    usage = {"input_tokens": 30, "output_tokens": 12, "cost": 0.25}
    budgeted = rt.run(
        RunRequest(prompt="p", script=[{"say": "hi", "usage": usage}], max_tokens=500, max_cost=1)
    )
    plain = rt.run(RunRequest(prompt="p", script=[{"say": "hi"}]))
    client = make_client()
    shown = client.get(f"/api/runs/{budgeted.run_id}", headers=AUTH).json()["budget"]
    assert shown["root_id"] == budgeted.run_id
    assert (shown["spent_tokens"], shown["max_tokens"], shown["reserved_tokens"]) == (42, 500, 0)
    assert (shown["spent_cost"], shown["max_cost"]) == (0.25, 1.0)
    assert client.get(f"/api/runs/{plain.run_id}", headers=AUTH).json()["budget"] is None
    login(client)
    page = client.get(f"/runs/{budgeted.run_id}").text
    assert "42 of 500 tokens, $0.25 of $1 spent" in page
    assert 'id="tree-budget"' not in client.get(f"/runs/{plain.run_id}").text
