"""OpenTelemetry spans per segment of a run and per step (the `otel` extra).

A `tenure.run` span covers one segment (claim to settle, requeue or loss); each model or
tool step is a child span from the previous step boundary to its own. Spans go to whatever
TracerProvider the application configured; with none, the API's default drops them.
"""

from __future__ import annotations

import threading
import time

from opentelemetry import trace

from tenure.store._base import Lease, NewEvent


class Tracing:
    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self.tracer = tracer or trace.get_tracer("tenure")
        self._lock = threading.Lock()
        self._spans: dict[tuple[str, int], trace.Span] = {}

    def segment_started(self, lease: Lease) -> None:
        span = self.tracer.start_span(
            "tenure.run",
            attributes={
                "tenure.run_id": lease.run_id,
                "tenure.attempt": lease.attempt,
                "tenure.lease_token": lease.token,
                "tenure.worker": lease.owner,
            },
        )
        with self._lock:
            self._spans[(lease.run_id, lease.token)] = span

    def step(self, lease: Lease, event: NewEvent, seconds: float) -> None:
        with self._lock:
            parent = self._spans.get((lease.run_id, lease.token))
        if parent is None:
            return
        end = time.time_ns()
        name = f"tenure.step {event.kind}"
        attributes: dict[str, str | int] = {
            "tenure.run_id": lease.run_id,
            "tenure.kind": str(event.kind),
        }
        if "name" in event.payload:
            name += f" {event.payload['name']}"
            attributes["tenure.tool"] = str(event.payload["name"])
            attributes["tenure.effect"] = str(event.payload.get("effect", ""))
        span = self.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            start_time=end - int(seconds * 1e9),
            attributes=attributes,
        )
        span.end(end_time=end)

    def segment_ended(self, lease: Lease, outcome: str) -> None:
        with self._lock:
            span = self._spans.pop((lease.run_id, lease.token), None)
        if span is not None:
            span.set_attribute("tenure.outcome", outcome)
            span.end()
