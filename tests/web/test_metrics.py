"""/metrics: runs by status from the store, and what this process observed of its segments
and reaper passes; OpenTelemetry spans per run and step."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import tenure
from tenure import Outcome, RunRequest, RunStatus
from tenure.web import Metrics, ObservedStore, create_app, instrument

from .._raw import raw_execute
from .conftest import AUTH, TOKEN, Seeded, seed


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_of_the_segments_this_process_ran(rt: tenure.Runtime) -> None:
    client = TestClient(create_app(rt, token=TOKEN))
    seeded: Seeded = seed(rt)  # after create_app: the runtime is observed
    text = client.get("/metrics", headers=AUTH).text
    # completed: 1 claim; dead: 2 claims (one failure requeue); fenced: 1 claim.
    assert value(text, "tenure_claims_total") == 4
    assert value(text, "tenure_requeues_total", cause="failure") == 1
    assert value(text, "tenure_dead_letters_total", reason="retries_exhausted") == 1
    assert value(text, "tenure_dead_letters_total", reason="not_retryable") == 1
    assert value(text, "tenure_step_seconds_count", kind="llm") >= 4
    assert value(text, "tenure_step_seconds_count", kind="tool") == 2  # one write raised
    assert value(text, "tenure_runs", status="failed") == 2
    assert value(text, "tenure_runs", status="queued") == 1
    assert value(text, "tenure_runs_ended", reason="completed") == 1
    assert value(text, "tenure_database_up") == 1
    assert value(text, "tenure_lease_losses_total") == 0
    assert seeded.completed


def test_model_tokens_are_counted(rt: tenure.Runtime) -> None:
    client = TestClient(create_app(rt, token=TOKEN))
    run_id = rt.enqueue(
        RunRequest(
            prompt="x",
            script=[{"say": "hello there", "usage": {"input_tokens": 7, "output_tokens": 3}}],
        )
    )
    rt.run_queued(run_id)
    text = client.get("/metrics", headers=AUTH).text
    usage = rt.status(run_id)
    assert usage is not None
    assert value(text, "tenure_model_tokens_total", direction="input") == usage.input_tokens
    assert value(text, "tenure_model_tokens_total", direction="output") == usage.output_tokens


def test_reaper_passes_stale_requeues_and_lease_losses(rt: tenure.Runtime) -> None:
    metrics = Metrics()
    instrument(rt, metrics)
    instrument(rt, metrics)  # once is enough
    assert isinstance(rt.store, ObservedStore)
    run_id = rt.enqueue(RunRequest(prompt="x", script=[{"say": "x"}]))
    claimed = rt.store.claim_run(run_id, "worker:gone:1:1", 0.05)
    assert claimed is not None
    time.sleep(0.2)
    report = rt.reap()
    assert report.requeued == 1
    # The zombie comes back: its heartbeat matches nothing.
    assert rt.store.record_step(claimed.lease, 30, []) is None
    client = TestClient(create_app(rt, token=TOKEN, metrics=metrics))
    text = client.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_reaper_passes_total") == 1
    assert value(text, "tenure_reaper_runs_total", action="requeued") == 1
    assert value(text, "tenure_requeues_total", cause="stale") == 1
    assert value(text, "tenure_lease_losses_total") == 1


def test_a_requeue_for_a_step_past_its_deadline_is_counted_by_that_cause(
    rt: tenure.Runtime,
) -> None:
    metrics = Metrics()
    instrument(rt, metrics)
    run_id = rt.enqueue(RunRequest(prompt="x", script=[{"say": "x"}]))
    claimed = rt.store.claim_run(run_id, "worker:hung:1:1", 0.3)
    assert claimed is not None
    why = "step 2 (tool t) ran past its deadline of 1 s"
    assert rt.store.mark_step_deadline(claimed.lease, claimed.last_sequence, None, why)
    time.sleep(0.45)
    assert rt.reap().requeued == 1
    client = TestClient(create_app(rt, token=TOKEN, metrics=metrics))
    text = client.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_requeues_total", cause="step_deadline") == 1
    assert value(text, "tenure_requeues_total", cause="stale") == 0


def test_a_cancelled_run_is_not_a_lease_loss(rt: tenure.Runtime) -> None:
    metrics = Metrics()
    instrument(rt, metrics)
    run_id = rt.enqueue(RunRequest(prompt="x", script=[{"say": "x"}]))
    claimed = rt.store.claim_run(run_id, "worker:a:1:1", 30)
    assert claimed is not None and rt.cancel(run_id)
    assert rt.store.record_step(claimed.lease, 30, []) is None
    assert metrics.lease_losses._value.get() == 0


def test_metrics_answer_when_the_database_does_not(
    rt: tenure.Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = TestClient(create_app(rt, token=TOKEN))

    def down() -> None:
        raise tenure.DatabaseUnavailable("gone")

    monkeypatch.setattr(rt.store, "run_counts", down)
    text = client.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_database_up") == 0


def test_opentelemetry_spans_per_run_and_step(rt: tenure.Runtime) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tenure.web._otel import Tracing

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(rt, Metrics(), Tracing(provider.get_tracer("test")))
    run_id = rt.enqueue(
        RunRequest(
            prompt="x",
            tools=["lookup"],
            script=[{"call": [{"tool": "lookup", "args": {"customer": "c"}}]}, {"say": "ok"}],
        )
    )
    rt.run_queued(run_id)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run_span = spans["tenure.run"]
    assert run_span.attributes is not None
    assert run_span.attributes["tenure.run_id"] == run_id
    assert run_span.attributes["tenure.outcome"] == "completed"
    tool = spans["tenure.step tool lookup"]
    assert tool.parent is not None and tool.parent.span_id == run_span.context.span_id
    assert tool.attributes is not None and tool.attributes["tenure.effect"] == "read_only"
    assert "tenure.step llm" in spans


def test_models_with_limits_show_calls_in_flight_circuits_and_parked_runs(db_url: str) -> None:
    with tenure.Runtime(db_url, lease_seconds=3) as rt:
        rt.add_model("m", tenure.providers.Scripted(), limits=tenure.Limits(requests_per_minute=6))
        client = TestClient(create_app(rt, token=TOKEN))
        ok = RunRequest(prompt="x", model="m", script=[{"say": "ok"}])
        rt.run_queued(rt.enqueue(ok))  # the bucket (of 1) is empty: the next call waits 10 s
        parked = rt.run_queued(rt.enqueue(ok))
        assert parked is not None and parked.outcome is tenure.Outcome.REQUEUED
        rt.store.open_circuit("m", 120)
        text = client.get("/metrics", headers=AUTH).text
    assert value(text, "tenure_model_in_use", model="m") == 0
    assert 100 < value(text, "tenure_model_circuit_open", model="m") <= 120
    assert value(text, "tenure_parked_total", model="m", why="capacity") == 1


def test_a_lease_the_keeper_finds_lost_is_counted_once(sqlite_url: str) -> None:
    """The keeper decides a loss (its renewal missed while the segment still held the run):
    counted once. Renewals that missed because their segment had just ended are not."""
    rt = tenure.Runtime(sqlite_url, lease_seconds=0.6)
    rt.add_model("scripted", tenure.providers.Scripted())
    metrics = Metrics()
    instrument(rt, metrics)
    try:
        for _ in range(20):  # short segments, each racing the keeper's rounds
            quick = rt.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "x"}]))
            rt.run_queued(quick)
        assert metrics.lease_losses._value.get() == 0
        run_id = rt.enqueue(
            RunRequest(prompt="x", model="scripted", script=[{"sleep": 5}, {"say": "late"}])
        )
        result: list[Any] = []
        segment = threading.Thread(target=lambda: result.append(rt.run_queued(run_id)))
        segment.start()
        deadline = time.monotonic() + 10
        while rt.events(run_id) == [] or rt.status(run_id).status is not RunStatus.RUNNING:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # Another owner takes the run behind the keeper's back.
        raw_execute(sqlite_url, "UPDATE tenure_runs SET lease_token = lease_token + 1")
        segment.join(10)
        assert result and result[0].outcome is Outcome.LEASE_LOST
        assert metrics.lease_losses._value.get() == 1
    finally:
        rt.close()
