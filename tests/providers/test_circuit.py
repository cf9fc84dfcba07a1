"""The circuit of a model registered without `Limits` (SPEC §17), on every store, through the
real `openai` client against the loopback endpoint: a 429 with Retry-After parks its run
uncharged and opens the model's circuit for every worker on the database, and nobody calls
the model again until it closes. The normal path pays nothing for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Any

import pytest

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus
from tenure._capacity import CIRCUIT_RECHECK_SECONDS
from tenure.providers.openai import OpenAICompatible

from .conftest import Endpoint, completion, error

MakeRuntime = Callable[..., tenure.Runtime]
MakeProvider = Callable[..., OpenAICompatible]


def worker(make_runtime: MakeRuntime, make_provider: MakeProvider, url: str) -> tenure.Runtime:
    # No requeue budget at all: a run charged for the 429 would be dead-lettered. A wait of
    # more than lease / 3 (1 s) parks the run; a shorter one is waited in the segment.
    rt = make_runtime(max_requeues=0, lease_seconds=3.0)
    rt.add_model("gpt", make_provider(url))
    return rt


def last_event(rt: tenure.Runtime, run_id: str) -> tenure.Event:
    return rt.events(run_id)[-1]


def circuit(rt: tenure.Runtime, model: str) -> tenure.ModelState:
    (state,) = [m for m in rt.models() if m.name == model]
    return state


def circuit_seconds(rt: tenure.Runtime, model: str) -> float | None:
    state = circuit(rt, model)
    if state.circuit_open_until is None:
        return None
    return (state.circuit_open_until - state.now).total_seconds()


def test_a_429_parks_the_run_and_no_worker_calls_the_model_until_the_circuit_closes(
    make_runtime: MakeRuntime, make_provider: MakeProvider, endpoint: Endpoint
) -> None:
    first = worker(make_runtime, make_provider, endpoint.url)
    second = worker(make_runtime, make_provider, endpoint.url)
    endpoint.push(error(429, "Rate limit reached", retry_after="3"), completion("done"))
    a = first.enqueue(RunRequest(prompt="a", model="gpt"))
    b = second.enqueue(RunRequest(prompt="b", model="gpt"))

    result = first.run_queued(a)

    assert result is not None and result.outcome is Outcome.REQUEUED
    run_a = first.status(a)
    assert run_a is not None and run_a.status is RunStatus.QUEUED
    assert run_a.requeue_count == 0 and run_a.termination_reason is None
    parked = last_event(first, a)
    assert parked.kind is EventKind.THROTTLED
    assert (parked.payload["model"], parked.payload["why"]) == ("gpt", "circuit_open")
    assert parked.payload["delay"] == pytest.approx(3.0)
    open_for = circuit_seconds(second, "gpt")
    assert open_for is not None and 2.0 < open_for <= 3.0
    closes = circuit(second, "gpt").circuit_open_until
    assert closes is not None

    # The other worker parks its run (uncharged) instead of calling the model.
    result = second.run_queued(b)
    assert result is not None and result.outcome is Outcome.REQUEUED
    assert len(endpoint.requests) == 1
    run_b = second.status(b)
    assert run_b is not None and run_b.status is RunStatus.QUEUED and run_b.requeue_count == 0
    assert last_event(second, b).kind is EventKind.THROTTLED
    assert [e.kind for e in second.events(b)].count(EventKind.LLM) == 0
    # Parked until the circuit closes (by this process's reckoning of it: within a tick).
    assert (closes - run_b.available_at).total_seconds() < 0.1

    # Once it has closed, the model is called again and the run completes.
    time.sleep(max((run_b.available_at - datetime.now(UTC)).total_seconds(), 0) + 0.05)
    result = second.run_queued(b)
    assert result is not None and result.outcome is Outcome.COMPLETED
    assert len(endpoint.requests) == 2
    assert circuit_seconds(first, "gpt") is None


def test_an_http_date_retry_after_is_counted_from_the_servers_date(
    make_runtime: MakeRuntime, make_provider: MakeProvider, endpoint: Endpoint
) -> None:
    """The server's clock is 10 minutes ahead of the worker's: it asks for 30 s and the
    circuit, shared by every worker, is open 30 s, not 630."""
    rt = worker(make_runtime, make_provider, endpoint.url)
    served = time.time() + 600
    endpoint.push(
        error(
            429,
            "Rate limit reached",
            Retry_After=formatdate(served + 30, usegmt=True),
            Date=formatdate(served, usegmt=True),
        )
    )
    run_id = rt.enqueue(RunRequest(prompt="p", model="gpt"))

    result = rt.run_queued(run_id)

    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.requeue_count == 0
    assert last_event(rt, run_id).payload["delay"] == 30.0
    assert (run.available_at - run.updated_at).total_seconds() == pytest.approx(30.0, abs=0.5)
    open_for = circuit_seconds(rt, "gpt")
    assert open_for is not None and 25.0 < open_for <= 30.0


def test_a_model_without_limits_does_no_capacity_work_while_its_circuit_is_closed(
    make_runtime: MakeRuntime, make_provider: MakeProvider, endpoint: Endpoint
) -> None:
    """Pay only for what is used: no write for the model's capacity, and its circuit read
    (every model's at once) at most once per `CIRCUIT_RECHECK_SECONDS`, whatever the calls."""
    rt = worker(make_runtime, make_provider, endpoint.url)
    store = rt.store
    reads: list[float] = []
    writes: list[str] = []
    real_read = store.open_circuits

    def counted_read() -> dict[str, float]:
        reads.append(time.monotonic())
        return real_read()

    def refused_write(*args: Any, **kwargs: Any) -> None:
        writes.append(repr(args))

    store.open_circuits = counted_read  # type: ignore[method-assign]
    for name in ("open_circuit", "set_model_limits", "reserve_capacity", "settle_capacity"):
        setattr(store, name, refused_write)
    runs = 12
    endpoint.push(*(completion("ok") for _ in range(runs)))
    started = time.monotonic()
    for run_id in rt.enqueue_many([RunRequest(prompt="p", model="gpt") for _ in range(runs)]):
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
    elapsed = time.monotonic() - started

    assert writes == []
    # Read once at the first call, then once per CIRCUIT_RECHECK_SECONDS at most.
    assert 1 <= len(reads) <= 1 + elapsed / CIRCUIT_RECHECK_SECONDS
