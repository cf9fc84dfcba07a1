"""A queued run on a real Runtime and SQLite, its model behind the local HTTP endpoint.

The endpoint answers a tool call, then 503 twice, then the final answer. The run is
requeued twice with backoff and completes; journal resume means the tool ran once and the
first model call was never repeated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import tenure
from tenure import EventKind, FailureClass, Outcome, RunRequest, RunStatus, ToolContext, ToolEffect
from tenure.providers.openai import OpenAICompatible

from .conftest import MODEL, Endpoint, completion, error

BACKOFF_BASE = 0.3
BACKOFF_CAP = 0.6


def script_endpoint(endpoint: Endpoint) -> None:
    endpoint.push(
        completion(calls=[("send_invoice", {"customer_id": "c-42", "amount_cents": 1999})],
                   usage=(100, 20)),
        error(503, "overloaded"),
        error(503, "overloaded"),
        completion("Invoice sent.", usage=(150, 10)),
    )  # fmt: skip


def setup(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> tuple[tenure.Runtime, list[dict[str, Any]]]:
    rt = make_runtime(backoff_base=BACKOFF_BASE, backoff_cap=BACKOFF_CAP)
    sent: list[dict[str, Any]] = []

    @rt.tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout=10)
    def send_invoice(ctx: ToolContext, customer_id: str, amount_cents: int) -> dict[str, Any]:
        """Send an invoice.

        Args:
            customer_id: who pays
            amount_cents: how much, in cents
        """
        sent.append({"customer_id": customer_id, "key": ctx.idempotency_key})
        return {"invoice": f"inv-{len(sent)}"}

    rt.add_model("gpt", make_provider(endpoint.url, prices={MODEL: (1.0, 2.0)}))
    return rt, sent


def wait_until_available(run: tenure.Run) -> None:
    remaining = (run.available_at - datetime.now(UTC)).total_seconds()
    time.sleep(max(remaining, 0) + 0.02)


def check_journal_resume(
    rt: tenure.Runtime, run_id: str, endpoint: Endpoint, sent: list[dict[str, Any]]
) -> None:
    run = rt.status(run_id)
    assert run is not None
    assert run.status is RunStatus.COMPLETED
    assert run.output == "Invoice sent."
    assert run.requeue_count == 2
    assert run.attempt == 2

    # The write ran exactly once, under the key of the model turn that asked for it.
    assert len(sent) == 1
    assert sent[0]["customer_id"] == "c-42"
    assert sent[0]["key"].startswith(f"{run_id}:")

    # Four requests reached the endpoint: the first model call was never repeated; every
    # later one carried the recorded tool call and its result.
    assert len(endpoint.requests) == 4
    first = endpoint.requests[0]["body"]["messages"]
    assert [m["role"] for m in first] == ["user"]
    later = [r["body"]["messages"] for r in endpoint.requests[1:]]
    assert all([m["role"] for m in messages] == ["user", "assistant", "tool"] for messages in later)
    assert later[0] == later[1] == later[2]
    assert "inv-1" in later[0][2]["content"]
    assert endpoint.requests[0]["body"]["tools"][0]["function"]["name"] == "send_invoice"

    events = rt.events(run_id)
    kinds = [e.kind for e in events]
    assert kinds.count(EventKind.TOOL) == 1
    assert kinds.count(EventKind.LLM) == 2
    assert kinds.count(EventKind.CLAIMED) == 3
    requeued = [e for e in events if e.kind is EventKind.REQUEUED]
    assert [e.payload["cause"] for e in requeued] == ["failure", "failure"]
    assert [e.payload["error_class"] for e in requeued] == ["server_error", "server_error"]
    assert [e.attempt for e in requeued] == [0, 1]
    # Backoff: d = min(base * 2**n, cap), drawn in [d/2, d].
    first_delay, second_delay = (e.payload["delay"] for e in requeued)
    assert BACKOFF_BASE / 2 - 0.01 <= first_delay <= BACKOFF_BASE + 0.01
    assert BACKOFF_CAP / 2 - 0.01 <= second_delay <= BACKOFF_CAP + 0.01
    # No claim came before its backoff had passed.
    claims = [e for e in events if e.kind is EventKind.CLAIMED]
    for requeue, claim, delay in zip(
        requeued, claims[1:], (first_delay, second_delay), strict=True
    ):
        assert (claim.created_at - requeue.created_at).total_seconds() >= delay - 0.01

    # Usage counts the two answered model calls, priced per million tokens.
    assert (run.input_tokens, run.output_tokens) == (250, 30)
    assert run.cost == pytest.approx((250 * 1.0 + 30 * 2.0) / 1_000_000)


def test_requeued_twice_on_503_then_completes(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> None:
    script_endpoint(endpoint)
    rt, sent = setup(make_runtime, make_provider, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="Invoice c-42", model="gpt", tools=["send_invoice"]))

    first = rt.run_queued(run_id)
    assert first is not None
    assert first.outcome is Outcome.REQUEUED
    assert isinstance(first.error, tenure.ProviderError)
    assert first.error.failure_class is FailureClass.SERVER_ERROR
    run = rt.status(run_id)
    assert run is not None
    assert (run.status, run.requeue_count, run.error_class) == (
        RunStatus.QUEUED,
        1,
        FailureClass.SERVER_ERROR,
    )
    assert run.pending_effect is None  # the write's fence was cleared with its event
    backoff = (run.available_at - run.updated_at).total_seconds()
    assert BACKOFF_BASE / 2 - 0.01 <= backoff <= BACKOFF_BASE + 0.01
    assert rt.run_queued(run_id) is None  # still backing off: nobody may claim it yet

    wait_until_available(run)
    second = rt.run_queued(run_id)
    assert second is not None
    assert second.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None
    assert run.requeue_count == 2
    assert rt.run_queued(run_id) is None

    wait_until_available(run)
    third = rt.run_queued(run_id)
    assert third is not None
    assert third.outcome is Outcome.COMPLETED
    assert third.output == "Invoice sent."

    check_journal_resume(rt, run_id, endpoint, sent)


def test_worker_carries_the_run_through_its_backoffs(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> None:
    script_endpoint(endpoint)
    rt, sent = setup(make_runtime, make_provider, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="Invoice c-42", model="gpt", tools=["send_invoice"]))

    deadline = time.monotonic() + 20
    while True:
        rt.work(concurrency=1, burst=True, poll_interval=0.05)
        run = rt.status(run_id)
        assert run is not None
        if run.status.is_terminal or time.monotonic() > deadline:
            break
        wait_until_available(run)

    check_journal_resume(rt, run_id, endpoint, sent)


def test_malformed_tool_arguments_go_back_to_the_model(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> None:
    endpoint.push(
        completion(calls=[("send_invoice", '{"customer_id": "c-42", "amount_cents": 19')]),
        completion("Sorry, I could not send it."),
    )
    rt, sent = setup(make_runtime, make_provider, endpoint)

    result = rt.run(RunRequest(prompt="Invoice c-42", model="gpt", tools=["send_invoice"]))

    assert result.outcome is Outcome.COMPLETED
    assert sent == []
    (tool_event,) = [e for e in rt.events(result.run_id) if e.kind is EventKind.TOOL]
    assert "not a JSON object" in tool_event.payload["error"]
    shown = endpoint.requests[1]["body"]["messages"][-1]
    assert shown["role"] == "tool"
    assert "not a JSON object" in shown["content"]


def test_auth_failure_dead_letters_the_run(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> None:
    endpoint.push(error(401, "Incorrect API key provided"))
    rt, _ = setup(make_runtime, make_provider, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="hi", model="gpt"))

    result = rt.run_queued(run_id)

    assert result is not None
    assert result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None
    assert (run.status, run.termination_reason, run.error_class) == (
        RunStatus.FAILED,
        tenure.TerminationReason.NOT_RETRYABLE,
        FailureClass.AUTH,
    )
    assert "Incorrect API key provided" in run.error


def test_a_rate_limit_with_retry_after_parks_the_run_uncharged_until_then(
    make_runtime: Callable[..., tenure.Runtime],
    make_provider: Callable[..., OpenAICompatible],
    endpoint: Endpoint,
) -> None:
    endpoint.push(error(429, "Rate limit reached", retry_after="20"))
    rt, _ = setup(make_runtime, make_provider, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="hi", model="gpt"))

    result = rt.run_queued(run_id)

    # Longer than lease / 3 (10 s): parked, not charged, until the server's time (SPEC §17).
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    parked = rt.events(run_id)[-1]
    assert parked.kind is EventKind.THROTTLED and parked.payload["why"] == "circuit_open"
    assert (run.available_at - run.updated_at).total_seconds() == pytest.approx(20.0, abs=0.05)
