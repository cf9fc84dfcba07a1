"""Runs on a real Runtime (SQLite and PostgreSQL) whose model is providers.Anthropic on the
real SDK, behind the loopback Messages API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import tenure
from tenure import (
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunStatus,
    TerminationReason,
    ToolContext,
    ToolEffect,
)
from tenure.providers.anthropic import Anthropic

from ._stalls import LEASE_SECONDS, STALL_SECONDS, cancel_while_stalled, established_to, wait_for
from .conftest import Endpoint, Reply
from .messages_api import CLAUDE, api_error, message

PRICE = (3.0, 15.0)


def setup(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> tuple[tenure.Runtime, list[dict[str, Any]]]:
    rt = make_runtime(backoff_base=0.2, backoff_cap=0.4)
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

    @rt.tool
    def lookup(customer_id: str) -> dict[str, Any]:
        """Look a customer up."""
        if customer_id != "c-42":
            raise LookupError(f"no customer {customer_id}")
        return {"name": "Ada"}

    rt.add_model("claude", make_anthropic(endpoint.url, prices={CLAUDE: PRICE}))
    return rt, sent


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


def test_tool_use_round_trip_in_an_interactive_run(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> None:
    endpoint.push(
        message("Looking both up.", calls=[("lookup", {"customer_id": "c-42"}),
                                           ("lookup", {"customer_id": "c-7"})],
                usage=usage(100, 20)),
        message(calls=[("send_invoice", {"customer_id": "c-42", "amount_cents": 1999})],
                usage=usage(200, 15)),
        message("Invoice inv-1 sent to Ada.", usage=usage(300, 10)),
    )  # fmt: skip
    rt, sent = setup(make_runtime, make_anthropic, endpoint)

    result = rt.run(
        RunRequest(
            prompt="Invoice c-42",
            model="claude",
            tools=["lookup", "send_invoice"],
            system="You send invoices.",
        )
    )

    assert result.outcome is Outcome.COMPLETED
    assert result.output == "Invoice inv-1 sent to Ada."
    assert len(sent) == 1 and sent[0]["key"].startswith(f"{result.run_id}:")
    bodies = [r["body"] for r in endpoint.requests]
    assert all(b["system"] == "You send invoices." for b in bodies)
    assert {t["name"] for t in bodies[0]["tools"]} == {"lookup", "send_invoice"}
    # The second call carries the first turn and both results, one marked as an error.
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    uses = [b["id"] for b in second[1]["content"] if b["type"] == "tool_use"]
    results = second[2]["content"]
    assert [b["tool_use_id"] for b in results] == uses
    assert "Ada" in results[0]["content"] and not results[0].get("is_error")
    assert results[1]["is_error"] is True and "no customer c-7" in results[1]["content"]
    third = bodies[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert "inv-1" in third[4]["content"][0]["content"]

    run = rt.status(result.run_id)
    assert run is not None
    assert (run.input_tokens, run.output_tokens) == (600, 45)
    assert run.cost == pytest.approx((600 * PRICE[0] + 45 * PRICE[1]) / 1e6)
    llm = [e for e in rt.events(result.run_id) if e.kind is EventKind.LLM]
    assert [e.payload["model"] for e in llm] == [CLAUDE] * 3
    assert llm[0].payload["usage"]["input_tokens"] == 100


def test_overloaded_requeues_and_the_journal_resumes_without_repeating_the_write(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> None:
    endpoint.push(
        message(calls=[("send_invoice", {"customer_id": "c-42", "amount_cents": 500})]),
        api_error(529, "overloaded_error", "Overloaded"),
        message("Sent."),
    )
    rt, sent = setup(make_runtime, make_anthropic, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="Invoice c-42", model="claude", tools=["send_invoice"]))

    first = rt.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.error_class is FailureClass.SERVER_ERROR
    time.sleep(max((run.available_at - datetime.now(UTC)).total_seconds(), 0) + 0.02)
    second = rt.run_queued(run_id)

    assert second is not None and second.outcome is Outcome.COMPLETED
    assert second.output == "Sent."
    assert len(sent) == 1
    assert len(endpoint.requests) == 3  # the first model call was never repeated
    resumed = endpoint.requests[2]["body"]["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "user"]
    assert json.loads(resumed[2]["content"][0]["content"]) == {"result": {"invoice": "inv-1"}}


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        (api_error(401, "authentication_error", "invalid x-api-key"), FailureClass.AUTH),
        (
            api_error(400, "invalid_request_error", "prompt is too long: 201000 tokens > 200000"),
            FailureClass.CLIENT_ERROR,
        ),
    ],
    ids=["auth", "context-too-long"],
)
def test_not_retryable_failures_dead_letter_the_run(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
    reply: Any,
    error_class: FailureClass,
) -> None:
    endpoint.push(reply)
    rt, _ = setup(make_runtime, make_anthropic, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="hi", model="claude"))

    result = rt.run_queued(run_id)

    assert result is not None and result.outcome is Outcome.FAILED
    run = rt.status(run_id)
    assert run is not None
    assert (run.status, run.termination_reason, run.error_class) == (
        RunStatus.FAILED,
        TerminationReason.NOT_RETRYABLE,
        error_class,
    )
    assert len(endpoint.requests) == 1


def test_a_rate_limit_with_retry_after_parks_the_run_uncharged_until_then(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> None:
    endpoint.push(api_error(429, "rate_limit_error", "slow down", retry_after="20"))
    rt, _ = setup(make_runtime, make_anthropic, endpoint)
    run_id = rt.enqueue(RunRequest(prompt="hi", model="claude"))

    result = rt.run_queued(run_id)

    # Longer than lease / 3 (10 s): parked, not charged, until the server's time (SPEC §17).
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.QUEUED and run.requeue_count == 0
    parked = rt.events(run_id)[-1]
    assert parked.kind is EventKind.THROTTLED and parked.payload["why"] == "circuit_open"
    assert (run.available_at - run.updated_at).total_seconds() == pytest.approx(20.0, abs=0.05)


# -- a stalled call, cancelled (SPEC §15) ------------------------------------------------------


def test_cancel_reaches_an_anthropic_call_whose_answer_stalls(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> None:
    """The server holds the answer for 30 s (the client would wait 60): the keeper's round
    finds the run cancelled, the HTTP request is closed and the slot is free again, within
    a keeper round (lease / 3) and well before the stall ends."""
    endpoint.push(Reply(body=message("late").body, delay=STALL_SECONDS))
    rt = make_runtime(lease_seconds=LEASE_SECONDS)
    rt.add_model("claude", make_anthropic(endpoint.url, timeout=60.0))
    port = endpoint.server.port

    took, rt, run_id = cancel_while_stalled(
        rt, "claude", lambda: len(endpoint.requests) == 1 and established_to(port) >= 1
    )

    assert took < STALL_SECONDS / 3, took
    wait_for(lambda: established_to(port) == 0, timeout=5.0)  # the request was closed
    assert EventKind.LLM not in [e.kind for e in rt.events(run_id)]


def test_an_anthropic_call_that_stalls_ends_at_the_models_timeout(
    make_runtime: Callable[..., tenure.Runtime],
    make_anthropic: Callable[..., Anthropic],
    endpoint: Endpoint,
) -> None:
    """The model's timeout (1 s) bounds the whole call, not only each read of the client's
    (60 s): the step fails as a retryable `timeout` long before the 30 s stall ends."""
    endpoint.push(Reply(body=message("late").body, delay=STALL_SECONDS))
    rt = make_runtime(lease_seconds=LEASE_SECONDS)
    rt.add_model("claude", make_anthropic(endpoint.url, timeout=60.0), timeout=1.0)
    run_id = rt.enqueue(RunRequest(prompt="p", model="claude"))

    began = time.monotonic()
    result = rt.run_queued(run_id)

    assert time.monotonic() - began < STALL_SECONDS / 3
    assert result is not None and result.outcome is Outcome.REQUEUED
    run = rt.status(run_id)
    assert run is not None and run.error_class is FailureClass.TIMEOUT
