"""The `request` event of an enqueued run holds the request as it was stored, and the run
executes from that stored request (both are written from one encoding)."""

from __future__ import annotations

import dataclasses
from typing import Any

import tenure
from tenure import EventKind, Outcome, RunRequest


def _as_json(request: RunRequest) -> dict[str, Any]:
    data = dataclasses.asdict(request)
    data["tools"] = list(request.tools)
    if request.agent is None:  # a built-in run's stored form is the one before agents
        del data["agent"], data["input"]
    # ... and a run without a priority or a key (SPEC §22), the one before them.
    if request.priority == 0:
        del data["priority"]
    if request.concurrency_key is None:
        del data["concurrency_key"]
    return data


def test_the_request_event_is_the_stored_request(runtime: tenure.Runtime) -> None:
    request = RunRequest(
        prompt='naïve 😀 \\ " text',
        model="scripted",
        script=[{"say": "ok"}],
        metadata={"nested": {"list": [1, 2.5, None, True, "é"]}, "big": 2**62, "none": None},
        idempotency_key="key-é",
        max_cost=1.5,
    )
    run_id = runtime.enqueue(request, delay=0.0)
    keyed = dataclasses.replace(request, idempotency_key=None, priority=-3, concurrency_key="t")
    stored = runtime.events(runtime.enqueue(keyed))[0].payload
    assert (stored["priority"], stored["concurrency_key"]) == (-3, "t")
    first = runtime.events(run_id)[0]
    assert first.kind is EventKind.REQUEST and first.sequence == 0
    assert first.payload == _as_json(request)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert result.output == "ok"


def test_an_interactive_run_records_its_request_event_too(runtime: tenure.Runtime) -> None:
    request = RunRequest(prompt="p", model="scripted", script=[{"say": "x"}], metadata={"k": 1})
    result = runtime.run(request)
    first = runtime.events(result.run_id)[0]
    assert first.kind is EventKind.REQUEST and first.payload == _as_json(request)
