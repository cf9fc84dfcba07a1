"""Failure recovery (SPEC §6.7), each branch in its order, and backoff through available_at."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import tenure
from tenure import (
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolEffect,
)

MakeRuntime = Callable[..., tenure.Runtime]


def failing(cls: str, **extra: object) -> list[dict[str, object]]:
    return [{"fail": cls, **extra}, {"say": "never"}]


def enqueue(rt: tenure.Runtime, script: list[dict[str, object]], tools: list[str] = []) -> str:  # noqa: B006
    return rt.enqueue(RunRequest(prompt="r", model="scripted", tools=tools, script=script))


def test_branch_1_not_retryable_class_dead_letters_at_once(runtime: tenure.Runtime) -> None:
    for cls in ("auth", "configuration", "client_error", "unknown"):
        run_id = enqueue(runtime, failing(cls))
        result = runtime.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.FAILED
        run = runtime.status(run_id)
        assert run is not None and run.status is RunStatus.FAILED
        assert run.termination_reason is TerminationReason.NOT_RETRYABLE
        assert run.error_class is FailureClass(cls) and run.requeue_count == 0
        assert run.error and "\n" not in run.error
        dead = runtime.events(run_id)[-1]
        assert dead.kind is EventKind.DEAD_LETTERED
        assert dead.payload["reason"] == "not_retryable" and dead.payload["error_class"] == cls


def test_branch_2_standing_non_idempotent_fence_dead_letters_whatever_the_budget(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(max_requeues=10)

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def pay() -> None:
        raise tenure.RetryableError("gateway timeout", failure_class=FailureClass.TIMEOUT)

    run_id = enqueue(rt, [{"call": [{"tool": "pay"}]}, {"say": "x"}], ["pay"])
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None
    assert run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.TIMEOUT  # retryable class, refused by the fence
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert "non-idempotent" in rt.events(run_id)[-1].payload["why"]


def test_idempotent_fence_does_not_stop_a_retry(runtime: tenure.Runtime) -> None:
    @runtime.tool(effect=ToolEffect.IDEMPOTENT_WRITE)
    def upsert() -> None:
        raise tenure.RetryableError("503")

    run_id = enqueue(runtime, [{"call": [{"tool": "upsert"}]}, {"say": "x"}], ["upsert"])
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = runtime.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.pending_effect is None


def test_branch_3_spent_budget_dead_letters_retries_exhausted(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(max_requeues=2, backoff_base=0.01, backoff_cap=0.01)
    run_id = enqueue(rt, failing("server_error"))
    outcomes = []
    for _ in range(3):
        time.sleep(0.03)
        result = rt.run_queued(run_id)
        assert result is not None
        outcomes.append(result.outcome)
    assert outcomes == [Outcome.REQUEUED, Outcome.REQUEUED, Outcome.FAILED]
    run = rt.status(run_id)
    assert run is not None
    assert run.termination_reason is TerminationReason.RETRIES_EXHAUSTED
    assert run.requeue_count == 2 and run.attempt == 2
    assert run.error_class is FailureClass.SERVER_ERROR


def test_branch_4_requeue_with_backoff_not_claimable_before_its_time(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime(backoff_base=2.0, backoff_cap=600)
    run_id = enqueue(rt, [{"fail": "rate_limit", "attempts": [0]}, {"say": "ok"}])
    result = rt.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.requeue_count == 1
    wait = run.available_at - rt.store.now()
    assert timedelta(seconds=0.8) < wait <= timedelta(seconds=2)  # uniform in [d/2, d], d=2
    assert rt.run_queued(run_id) is None
    requeued = rt.events(run_id)[-1]
    assert requeued.payload["cause"] == "failure" and 1.0 <= requeued.payload["delay"] <= 2.0


def test_retry_after_is_a_floor(make_runtime: MakeRuntime) -> None:
    """A 503 with Retry-After: the backoff waits at least that long. (A 429 with one opens
    the model's circuit and parks the run instead: tests/providers/test_circuit.py.)"""
    rt = make_runtime(backoff_base=0.01, backoff_cap=0.01)
    run_id = enqueue(rt, [{"fail": "server_error", "retry_after": 5}, {"say": "ok"}])
    assert rt.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    run = rt.status(run_id)
    assert run is not None
    assert run.available_at - rt.store.now() > timedelta(seconds=4.5)


def test_retried_run_completes_on_its_next_attempt(runtime: tenure.Runtime) -> None:
    run_id = enqueue(runtime, [{"fail": "connection", "attempts": [0]}, {"say": "ok"}])
    assert runtime.run_queued(run_id).outcome is Outcome.REQUEUED  # type: ignore[union-attr]
    time.sleep(0.15)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.COMPLETED and result.output == "ok"
    run = runtime.status(run_id)
    assert run is not None and run.attempt == 1 and run.error == "" and run.error_class is None


def test_interactive_failure_settles_provider_failed_and_surfaces_the_error(
    runtime: tenure.Runtime,
) -> None:
    result = runtime.run(RunRequest(prompt="i", model="scripted", script=failing("server_error")))
    assert result.outcome is Outcome.FAILED
    assert isinstance(result.error, tenure.ProviderError)
    assert result.error.failure_class is FailureClass.SERVER_ERROR
    run = runtime.status(result.run_id)
    assert run is not None and run.termination_reason is TerminationReason.PROVIDER_FAILED
    assert run.error_class is FailureClass.SERVER_ERROR


def test_an_interactive_run_that_fails_mid_write_keeps_its_fence_as_evidence(
    runtime: tenure.Runtime,
) -> None:
    """Like a dead-letter: the write may have happened, and the row must say so."""

    @runtime.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    def pay() -> None:
        raise tenure.RetryableError("gateway timeout", failure_class=FailureClass.TIMEOUT)

    result = runtime.run(
        RunRequest(
            prompt="i",
            model="scripted",
            tools=["pay"],
            script=[{"call": [{"tool": "pay"}]}, {"say": "x"}],
        )
    )
    assert result.outcome is Outcome.FAILED
    run = runtime.status(result.run_id)
    assert run is not None and run.termination_reason is TerminationReason.PROVIDER_FAILED
    assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE


def test_fallback_chain_is_classified_by_its_last_attempt() -> None:
    exhausted = tenure.FallbackExhausted(
        [
            tenure.ProviderError(FailureClass.AUTH, "bad key on the first"),
            tenure.ProviderError(FailureClass.RATE_LIMIT, "slow down", retry_after=7),
        ]
    )
    assert exhausted.failure_class is FailureClass.RATE_LIMIT
    assert exhausted.retry_after == 7
    assert len(exhausted.attempts) == 2


def test_fallback_exhausted_in_a_run_is_retried_by_its_last_class(
    runtime: tenure.Runtime,
) -> None:
    class Chain:
        def complete(self, call: tenure.providers.ModelCall) -> tenure.providers.ModelReply:
            raise tenure.FallbackExhausted(
                [
                    tenure.ProviderError(FailureClass.CLIENT_ERROR, "400 on the first"),
                    TimeoutError("second timed out"),
                ]
            )

    runtime.add_model("chain", Chain())
    run_id = runtime.enqueue(RunRequest(prompt="f", model="chain"))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    assert runtime.status(run_id).error_class is FailureClass.TIMEOUT  # type: ignore[union-attr]


def test_corrupt_request_found_at_claim_fails_not_retryable(runtime: tenure.Runtime) -> None:
    from tenure.store import NewRun

    run_id, _ = runtime.store.enqueue(
        NewRun("corrupt-1", "default", '{"prompt": 42, "oops": true', None)
    )
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.CONFIGURATION
    assert "not JSON" in run.error


def test_corrupt_script_found_at_claim_fails_not_retryable(runtime: tenure.Runtime) -> None:
    from tenure.store import NewRun

    stored = '{"prompt": "x", "model": "scripted", "script": [{"say": 1, "call": []}]}'
    run_id, _ = runtime.store.enqueue(NewRun("corrupt-2", "default", stored, None))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    assert run.error_class is FailureClass.CONFIGURATION
    assert "script turn 0" in run.error


def test_unknown_model_at_claim_hands_the_run_back_for_a_worker_that_has_it(
    make_runtime: MakeRuntime,
) -> None:
    enqueuer = make_runtime()
    enqueuer.add_model("special", tenure.providers.Scripted([{"say": "hi"}]))
    run_id = enqueuer.enqueue(RunRequest(prompt="x", model="special"))
    worker = make_runtime()  # a deployment that lacks the model
    result = worker.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = worker.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED
    assert run.error_class is FailureClass.CONFIGURATION and "special" in run.error
    assert run.attempt == 0 and run.requeue_count == 0


def test_a_failure_inside_recovery_dead_letters_the_run(runtime: tenure.Runtime) -> None:
    class Broken:
        def complete(self, call: tenure.providers.ModelCall) -> tenure.providers.ModelReply:
            # A provider bug: a Retry-After that is not a number breaks the backoff.
            raise tenure.ProviderError(FailureClass.RATE_LIMIT, "429", retry_after="soon")  # type: ignore[arg-type]

    runtime.add_model("broken", Broken())
    run_id = runtime.enqueue(RunRequest(prompt="b", model="broken"))
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome is Outcome.FAILED
    run = runtime.status(run_id)
    assert run is not None and run.termination_reason is TerminationReason.NOT_RETRYABLE
    dead = runtime.events(run_id)[-1]
    assert dead.kind is EventKind.DEAD_LETTERED
    assert dead.payload["why"].startswith("failure recovery failed")


def test_an_exception_that_cannot_describe_itself_is_still_recorded() -> None:
    from tenure._classify import describe

    class Mute(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(Mute()) == "Mute"
