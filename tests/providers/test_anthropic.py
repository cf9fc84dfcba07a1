"""providers.Anthropic with the real `anthropic` SDK against the loopback Messages API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tenure import FailureClass, ProviderError, RunRequest, Usage
from tenure.providers import ModelCall, ToolSpec
from tenure.providers.anthropic import Anthropic

from .conftest import Endpoint, Reply
from .messages_api import API_KEY, CLAUDE, api_error, api_key, message

MakeAnthropic = Callable[..., Anthropic]

LOOKUP = ToolSpec(
    "lookup",
    "Look a customer up.",
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)


def call(
    messages: list[dict[str, Any]] | None = None, tools: list[ToolSpec] | None = None
) -> ModelCall:
    return ModelCall(
        messages=messages or [{"role": "user", "content": "hello"}],
        tools=tools or [],
        run_id="run-1",
        attempt=0,
        request=RunRequest(prompt="hello", model="m"),
    )


def failure(provider: Anthropic) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        provider.complete(call())
    return caught.value


def assistant_with_calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def tool_result(call_id: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content)}


# -- answers ---------------------------------------------------------------------------------


def test_text_answer_with_usage_and_cost(endpoint: Endpoint, make_anthropic: MakeAnthropic) -> None:
    endpoint.push(message("hi there", usage={"input_tokens": 1000, "output_tokens": 500}))
    provider = make_anthropic(endpoint.url, prices={CLAUDE: (3.0, 15.0)})

    reply = provider.complete(call())

    assert reply.text == "hi there"
    assert reply.tool_calls == ()
    assert reply.model == CLAUDE
    assert reply.usage == Usage(1000, 500, pytest.approx((1000 * 3.0 + 500 * 15.0) / 1e6))


def test_prompt_cache_tokens_are_counted_and_priced_at_their_rates(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    usage = {
        "input_tokens": 100,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 2000,
        "output_tokens": 10,
    }
    endpoint.push(message("ok", usage=usage))
    provider = make_anthropic(endpoint.url, prices={CLAUDE: (3.0, 15.0)})

    reply = provider.complete(call())

    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3100, 10)
    expected = ((100 + 1000 * 1.25 + 2000 * 0.1) * 3.0 + 10 * 15.0) / 1e6
    assert reply.usage.cost == pytest.approx(expected)


def test_request_carries_model_limit_system_tools_and_key(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(message("ok"))
    provider = make_anthropic(endpoint.url, max_tokens=256, extra_body={"stop_sequences": ["END"]})
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]

    provider.complete(call(messages, [LOOKUP]))

    (seen,) = endpoint.requests
    assert seen["route"] == "v1/messages"
    body = seen["body"]
    assert body["model"] == CLAUDE
    assert body["max_tokens"] == 256
    assert body["stop_sequences"] == ["END"]
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["tools"] == [
        {"name": "lookup", "description": "Look a customer up.", "input_schema": LOOKUP.parameters}
    ]
    assert api_key(seen["headers"]) == API_KEY


def test_tool_use_blocks_become_tool_calls(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(
        message("Let me look.", calls=[("lookup", {"id": "c-1"}), ("lookup", {"id": "c-2"})])
    )

    reply = make_anthropic(endpoint.url).complete(call(tools=[LOOKUP]))

    assert reply.text == "Let me look."
    assert [(c.name, c.args) for c in reply.tool_calls] == [
        ("lookup", {"id": "c-1"}),
        ("lookup", {"id": "c-2"}),
    ]
    assert all(c.id.startswith("toolu_") for c in reply.tool_calls)
    # The journal form: an assistant message with chat-completions tool_calls.
    journal = reply.message()
    assert journal["tool_calls"][0]["function"]["name"] == "lookup"


def test_a_transcript_with_tool_results_is_sent_as_the_api_wants_it(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(message("done"))
    transcript = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "look c-1 and c-2 up"},
        assistant_with_calls(
            ("toolu_a", "lookup", {"id": "c-1"}), ("toolu_b", "lookup", {"id": "c-2"})
        ),
        tool_result("toolu_a", {"result": {"name": "Ada"}}),
        tool_result("toolu_b", {"error": "no such customer"}),
    ]

    reply = make_anthropic(endpoint.url).complete(call(transcript, [LOOKUP]))

    assert reply.text == "done"
    sent = endpoint.requests[0]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use", "tool_use"]
    assert sent[1]["content"][0]["input"] == {"id": "c-1"}
    first, second = sent[2]["content"]
    assert (first["tool_use_id"], first.get("is_error")) == ("toolu_a", None)
    assert "Ada" in first["content"]
    assert (second["tool_use_id"], second["is_error"]) == ("toolu_b", True)


def test_another_providers_call_ids_are_made_acceptable(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    # A Fallback may hand Claude a transcript another model wrote: ids with characters the
    # Messages API refuses, and one id twice in a turn (a server that numbers per turn).
    endpoint.push(message("done"))
    transcript = [
        {"role": "user", "content": "go"},
        assistant_with_calls(("call:1", "lookup", {"id": "a"}), ("call:1", "lookup", {"id": "b"})),
        tool_result("call:1", {"result": "A"}),
        tool_result("call:1", {"result": "B"}),
    ]

    make_anthropic(endpoint.url).complete(call(transcript, [LOOKUP]))

    (seen,) = endpoint.requests
    uses = [b["id"] for b in seen["body"]["messages"][1]["content"]]
    results = [b["tool_use_id"] for b in seen["body"]["messages"][2]["content"]]
    assert uses == results
    assert len(set(uses)) == 2
    contents = [b["content"] for b in seen["body"]["messages"][2]["content"]]
    assert '"A"' in contents[0] and '"B"' in contents[1]


def test_a_request_the_api_refuses_is_a_client_error(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    # The fake refuses as the API does: a tool_use left without its result.
    transcript = [
        {"role": "user", "content": "go"},
        assistant_with_calls(("toolu_a", "lookup", {"id": "a"})),
    ]
    with pytest.raises(ProviderError) as caught:
        make_anthropic(endpoint.url).complete(call(transcript, [LOOKUP]))
    assert caught.value.failure_class is FailureClass.CLIENT_ERROR
    assert "tool_result" in str(caught.value)


# -- failures ----------------------------------------------------------------------------------


def test_429_is_a_rate_limit_with_retry_after(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(
        api_error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            retry_after="7",
        )
    )
    error = failure(make_anthropic(endpoint.url))
    assert error.failure_class is FailureClass.RATE_LIMIT
    assert error.retry_after == 7.0
    assert "exceeded your rate limit" in error.message


def test_529_overloaded_is_a_retryable_server_error_and_the_sdk_does_not_retry(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(api_error(529, "overloaded_error", "Overloaded"), message("never sent"))
    error = failure(make_anthropic(endpoint.url))
    assert error.failure_class is FailureClass.SERVER_ERROR
    assert error.failure_class.is_retryable
    assert error.message == "HTTP 529: Overloaded"
    assert len(endpoint.requests) == 1  # max_retries=0: one request, tenure decides the rest


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (500, "api_error", FailureClass.SERVER_ERROR),
        (502, "api_error", FailureClass.SERVER_ERROR),
        (503, "api_error", FailureClass.SERVER_ERROR),
        (504, "api_error", FailureClass.SERVER_ERROR),
        (401, "authentication_error", FailureClass.AUTH),
        (403, "permission_error", FailureClass.AUTH),
        (400, "invalid_request_error", FailureClass.CLIENT_ERROR),
        (413, "request_too_large", FailureClass.CLIENT_ERROR),
    ],
)
def test_status_classes(
    endpoint: Endpoint,
    make_anthropic: MakeAnthropic,
    status: int,
    kind: str,
    expected: FailureClass,
) -> None:
    endpoint.push(api_error(status, kind, f"{kind} happened"))
    error = failure(make_anthropic(endpoint.url))
    assert error.failure_class is expected
    assert error.message == f"HTTP {status}: {kind} happened"
    assert error.retry_after is None


def test_context_too_long_is_a_client_error_that_is_not_retried(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(
        api_error(
            400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
        )
    )
    error = failure(make_anthropic(endpoint.url))
    assert error.failure_class is FailureClass.CLIENT_ERROR
    assert not error.failure_class.is_retryable
    assert error.message.startswith("context too long: HTTP 400: prompt is too long")


def test_unknown_model_is_a_configuration_error(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(api_error(404, "not_found_error", "model: claude-nope"))
    assert failure(make_anthropic(endpoint.url)).failure_class is FailureClass.CONFIGURATION


def test_connection_refused_is_a_connection_failure(
    refused_url: str, make_anthropic: MakeAnthropic
) -> None:
    assert failure(make_anthropic(refused_url)).failure_class is FailureClass.CONNECTION


def test_dropped_connection_is_a_connection_failure(
    endpoint: Endpoint, make_anthropic: MakeAnthropic
) -> None:
    endpoint.push(Reply(drop=True))
    assert failure(make_anthropic(endpoint.url)).failure_class is FailureClass.CONNECTION


def test_slow_answer_is_a_timeout(endpoint: Endpoint, make_anthropic: MakeAnthropic) -> None:
    endpoint.push(Reply(delay=2.0, body={}))
    started = time.monotonic()
    error = failure(make_anthropic(endpoint.url, timeout=0.3))
    assert error.failure_class is FailureClass.TIMEOUT
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"<html>bad gateway</html>", content_type="text/html"),
        Reply(body={"type": "message", "role": "assistant"}),
        Reply(body={"content": [{"type": "tool_use", "id": "x", "input": {}}]}),
    ],
    ids=["html", "no-content", "tool-use-without-name"],
)
def test_malformed_body_is_a_server_error(
    endpoint: Endpoint, make_anthropic: MakeAnthropic, reply: Reply
) -> None:
    endpoint.push(reply)
    error = failure(make_anthropic(endpoint.url))
    assert error.failure_class is FailureClass.SERVER_ERROR
    assert "malformed response" in error.message


def test_bad_settings_are_refused_at_construction() -> None:
    from tenure import InvalidRequest

    with pytest.raises(InvalidRequest, match="model is required"):
        Anthropic("")
    with pytest.raises(InvalidRequest, match="max_tokens"):
        Anthropic(CLAUDE, api_key="k", max_tokens=0)
    with pytest.raises(InvalidRequest, match="timeout"):
        Anthropic(CLAUDE, api_key="k", timeout=0)
