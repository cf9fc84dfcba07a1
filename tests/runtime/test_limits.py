"""Provider capacity (SPEC §17) through the public API, on every store: calls wait for
capacity in-process when it returns soon, runs are parked (uncharged, journal kept) when it
does not, a rate limit with Retry-After opens the model's circuit for every worker, and a
Fallback skips a model whose circuit is open."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import EventKind, Limits, Outcome, RunRequest, RunStatus
from tenure.audit import audit
from tenure.providers import Fallback, Scripted
from tenure.providers._base import ModelCall, ModelReply

MakeRuntime = Callable[..., tenure.Runtime]


class Counting:
    """A provider that answers at once and counts its calls."""

    def __init__(self, text: str = "ok") -> None:
        self.text = text
        self.calls = 0

    def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        return ModelReply(text=self.text, usage=tenure.Usage(10, 5))


def request(model: str, script: list[dict[str, Any]] | None = None, **kw: Any) -> RunRequest:
    return RunRequest(prompt="p", model=model, script=script or [{"say": "ok"}], **kw)


def kinds(rt: tenure.Runtime, run_id: str) -> list[str]:
    return [str(e.kind) for e in rt.events(run_id)]


def test_calls_wait_in_process_when_capacity_returns_soon(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    rt.add_model("m", Scripted(), limits=Limits(requests_per_minute=60))  # 6 at once, 1/s
    ids = [rt.enqueue(request("m")) for _ in range(8)]
    started = time.monotonic()
    rt.work(concurrency=2, burst=True)
    elapsed = time.monotonic() - started
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED
        assert "throttled" not in kinds(rt, run_id)
    assert elapsed >= 1.5  # the 7th and 8th calls waited for the bucket, about a second each
    llm_times = sorted(e.created_at for r in ids for e in rt.events(r) if e.kind is EventKind.LLM)
    spread = (llm_times[-1] - llm_times[0]).total_seconds()
    assert spread >= 1.5


def test_a_long_wait_parks_the_run_uncharged_and_it_resumes_from_its_journal(
    make_runtime: MakeRuntime,
) -> None:
    # A lease of 1.5 s waits in-process at most 0.5 s; at 12 requests a minute (a bucket of
    # 1.2) the second call waits about 4 s: parked. No budget at all: a charge would
    # dead-letter the run.
    rt = make_runtime(lease_seconds=1.5, max_requeues=0)
    seen: list[str] = []

    @rt.tool
    def look(x: str) -> str:
        seen.append(x)
        return x

    rt.add_model("m", Scripted(), limits=Limits(requests_per_minute=12))
    script = [{"call": [{"tool": "look", "args": {"x": "a"}}]}, {"say": "done"}]
    run_id = rt.enqueue(request("m", script, tools=["look"]))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    parked = rt.events(run_id)[-1]
    assert parked.kind is EventKind.THROTTLED
    assert parked.payload["model"] == "m" and parked.payload["why"] == "capacity"
    wait = (run.available_at - rt.store.now()).total_seconds()
    assert 2.0 < wait <= parked.payload["delay"] + 0.1
    assert rt.run_queued(run_id) is None  # not claimable before its time
    time.sleep(wait + 0.2)
    rt.work(concurrency=1, burst=True)
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.output == "done"
    assert run.requeue_count == 0
    assert seen == ["a"]  # the tool step was not repeated
    assert kinds(rt, run_id).count("llm") == 2  # one per answer: the first was not asked again
    report = audit(rt.store)  # a parked run's history is a legal one
    assert report.ok, report


def test_a_rate_limit_with_retry_after_opens_the_circuit_for_every_worker(
    make_runtime: MakeRuntime,
) -> None:
    first, second = make_runtime(max_requeues=0), make_runtime(max_requeues=0)
    limited = Counting()
    for rt in (first, second):
        rt.add_model("scripted-limited", Scripted(), limits=Limits())
        rt.add_model("other", limited, limits=Limits())
    storm = [{"fail": "rate_limit", "retry_after": 60, "attempts": [0]}, {"say": "ok"}]
    a = first.enqueue(request("scripted-limited", storm))
    b = second.enqueue(request("scripted-limited"))
    c = second.enqueue(request("other"))
    result = first.run_queued(a)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run_a = first.status(a)
    assert run_a is not None and run_a.status is RunStatus.QUEUED and run_a.requeue_count == 0
    assert first.events(a)[-1].payload["why"] == "circuit_open"
    (state,) = [m for m in second.models() if m.name == "scripted-limited"]
    assert state.circuit_open_until is not None
    # The other worker does not call the model: its run is parked, uncharged.
    result = second.run_queued(b)
    assert result is not None and result.outcome is Outcome.REQUEUED
    assert "llm" not in kinds(second, b) and kinds(second, b)[-1] == "throttled"
    run_b = second.status(b)
    assert run_b is not None and run_b.requeue_count == 0
    assert (run_b.available_at - second.store.now()).total_seconds() > 50
    # Another model's circuit is its own.
    result = second.run_queued(c)
    assert result is not None and result.outcome is Outcome.COMPLETED and limited.calls == 1


def test_fallback_skips_a_model_whose_circuit_is_open(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    primary, backup = Counting("primary"), Counting("backup")
    rt.add_model("primary", primary, limits=Limits())
    rt.add_model("backup", backup, limits=Limits())
    rt.add_model("chain", Fallback([primary, backup]))
    assert rt.run(request("chain")).output == "primary"
    rt.store.open_circuit("primary", 60)
    assert rt.run(request("chain")).output == "backup"
    assert (primary.calls, backup.calls) == (1, 1)  # primary was not called
    # Every model's circuit open: the run is parked until the soonest closes, uncharged.
    rt.store.open_circuit("backup", 30)
    run_id = rt.enqueue(request("chain"))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    assert (primary.calls, backup.calls) == (1, 1)
    parked = rt.events(run_id)[-1]
    assert parked.kind is EventKind.THROTTLED and parked.payload["model"] == "backup"
    assert 25 < parked.payload["delay"] <= 30


def test_a_failed_call_gives_its_reservation_back(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(max_requeues=5)
    rt.add_model("m", Scripted(), limits=Limits(concurrency=1, tokens_per_minute=60_000))
    failing = [{"fail": "server_error", "attempts": [0]}, {"say": "ok"}]
    run_id = rt.enqueue(request("m", failing))
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    (state,) = rt.models()
    assert state.in_use == 0
    assert state.tokens == pytest.approx(6000, abs=5)  # the estimate went back
    # The slot is free: a call can be made at once.
    assert rt.run(request("m")).outcome is Outcome.COMPLETED


def test_a_settled_call_charges_its_real_usage(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    # A bucket of 6 tokens refilled at 1 a second: the estimate (over a thousand) is paid by
    # the full bucket, which then owes what the call really used: 10 in, 5 out.
    rt.add_model("m", Counting(), limits=Limits(tokens_per_minute=60))
    assert rt.run(request("m")).outcome is Outcome.COMPLETED
    (state,) = rt.models()
    assert state.in_use == 0
    assert state.tokens is not None and 6 - 15 <= state.tokens < 6 - 15 + 2


def test_models_lists_every_model_before_any_call(make_runtime: MakeRuntime) -> None:
    rt = make_runtime()
    rt.add_model("m", Scripted(), limits=Limits(requests_per_minute=30, concurrency=2))
    rt.add_model("free", Scripted())
    free, state = rt.models()
    assert state.name == "m" and state.limits == Limits(30, None, 2)
    assert state.in_use == 0 and state.requests == 3.0 and state.circuit_open_until is None
    # A model without limits has no buckets, but a circuit all the same.
    assert free.name == "free" and free.limits == Limits() and free.requests is None
    assert free.in_use == 0 and free.circuit_open_until is None


def test_models_lists_a_circuit_opened_by_another_worker_for_a_model_without_limits(
    make_runtime: MakeRuntime,
) -> None:
    """A model this runtime does not know, registered without limits by another worker:
    listed once its circuit has opened in the store (its row is made then)."""
    other, rt = make_runtime(lease_seconds=3.0), make_runtime()
    other.add_model("elsewhere", Scripted())
    storm = [{"fail": "rate_limit", "retry_after": 60, "attempts": [0]}, {"say": "ok"}]
    run_id = other.enqueue(request("elsewhere", storm))
    result = other.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    (state,) = [m for m in rt.models() if m.name == "elsewhere"]
    assert state.limits == Limits() and state.circuit_open_until is not None
    assert 50 < (state.circuit_open_until - state.now).total_seconds() <= 60


def test_fallback_skips_a_model_without_limits_whose_circuit_is_open(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    primary, backup = Counting("from primary"), Counting("from backup")
    rt.add_model("primary", primary)
    rt.add_model("backup", backup)
    rt.add_model("chain", Fallback([primary, backup]))
    rt.store.open_circuit("primary", 60)
    answer = rt.run(request("chain"))
    assert answer.output == "from backup" and (primary.calls, backup.calls) == (0, 1)


def test_an_interactive_run_waits_instead_of_parking(make_runtime: MakeRuntime) -> None:
    rt = make_runtime(lease_seconds=0.9)  # waits of more than 0.3 s would park a queued run
    rt.add_model("m", Counting(), limits=Limits(requests_per_minute=60))
    for _ in range(6):
        assert rt.run(request("m")).outcome is Outcome.COMPLETED
    started = time.monotonic()
    assert rt.run(request("m")).outcome is Outcome.COMPLETED
    assert time.monotonic() - started > 0.5


def test_circuits_known_of_one_database_do_not_follow_the_runtime_to_another(
    tmp_path: Any,
) -> None:
    """The circuits a process has read are its database's: `use_database` forgets them."""
    with tenure.Runtime(f"sqlite:///{tmp_path / 'a.db'}", lease_seconds=3.0) as rt:
        model = Counting()
        rt.add_model("m", model)
        rt.store.open_circuit("m", 60)
        parked = rt.run_queued(rt.enqueue(request("m")))
        assert parked is not None and parked.outcome is Outcome.REQUEUED and model.calls == 0
        rt.use_database(f"sqlite:///{tmp_path / 'b.db'}")
        answered = rt.run_queued(rt.enqueue(request("m")))
        assert answered is not None and answered.outcome is Outcome.COMPLETED
        assert model.calls == 1
