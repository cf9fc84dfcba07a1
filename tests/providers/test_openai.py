"""OpenAICompatible with the real `openai` client against the local chat-completions server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tenure import FailureClass, ProviderError, RunRequest, Usage
from tenure.providers import ModelCall, ToolSpec
from tenure.providers._base import MALFORMED_ARGUMENTS_KEY
from tenure.providers.openai import OpenAICompatible, Price

from .conftest import API_KEY, MODEL, Endpoint, Reply, completion, error

MakeProvider = Callable[..., OpenAICompatible]

LOOKUP = ToolSpec(
    "lookup",
    "Look a customer up.",
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)


def call(tools: list[ToolSpec] | None = None) -> ModelCall:
    request = RunRequest(prompt="hello", model="m")
    return ModelCall(
        messages=[{"role": "user", "content": "hello"}],
        tools=tools or [],
        run_id="run-1",
        attempt=0,
        request=request,
    )


def failure(provider: OpenAICompatible) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        provider.complete(call())
    return caught.value


# -- answers ---------------------------------------------------------------------------------


def test_text_answer_with_usage_and_cost(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(completion("hi there", usage=(1000, 500)))
    provider = make_provider(endpoint.url, prices={MODEL: (2.0, 8.0)})

    reply = provider.complete(call())

    assert reply.text == "hi there"
    assert reply.tool_calls == ()
    assert reply.model == MODEL
    assert reply.usage == Usage(1000, 500, pytest.approx(0.006))


def test_request_carries_model_messages_tools_and_key(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    endpoint.push(completion("ok"))
    provider = make_provider(endpoint.url, temperature=0.0, extra_body={"top_k": 5})

    provider.complete(call([LOOKUP]))

    (seen,) = endpoint.requests
    body = seen["body"]
    assert body["model"] == MODEL
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["tools"] == [LOOKUP.to_openai()]
    assert body["temperature"] == 0.0
    assert body["top_k"] == 5
    assert seen["headers"]["authorization"] == f"Bearer {API_KEY}"


def test_no_tools_sends_no_tools_field(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(completion("ok"))
    make_provider(endpoint.url).complete(call())
    assert "tools" not in endpoint.requests[0]["body"]


def test_tool_calls_are_parsed(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(completion(calls=[("lookup", {"id": "c-1"}), ("lookup", {"id": "c-2"})]))

    reply = make_provider(endpoint.url).complete(call([LOOKUP]))

    assert reply.text is None
    assert [(c.name, c.args) for c in reply.tool_calls] == [
        ("lookup", {"id": "c-1"}),
        ("lookup", {"id": "c-2"}),
    ]
    assert all(c.id.startswith("call_") for c in reply.tool_calls)
    # The journal form goes back to the endpoint on the next turn as valid JSON arguments.
    message = reply.message()
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"id": "c-1"}


@pytest.mark.parametrize("raw", ['{"id": "c-1"', "id=c-1", "[1, 2]"])
def test_malformed_tool_arguments_do_not_crash(
    endpoint: Endpoint, make_provider: MakeProvider, raw: str
) -> None:
    endpoint.push(completion(calls=[("lookup", raw)]))

    (tool_call,) = make_provider(endpoint.url).complete(call([LOOKUP])).tool_calls

    assert tool_call.args == {MALFORMED_ARGUMENTS_KEY: raw}


def test_empty_tool_arguments_are_an_empty_object(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    endpoint.push(completion(calls=[("lookup", "")]))
    (tool_call,) = make_provider(endpoint.url).complete(call([LOOKUP])).tool_calls
    assert tool_call.args == {}


def test_missing_usage_counts_nothing(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(completion("ok", usage=None))
    assert make_provider(endpoint.url).complete(call()).usage == Usage()


def test_price_of_the_answering_snapshot_first(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    endpoint.push(completion("a", usage=(1_000_000, 0), model=f"{MODEL}-2026-01-01"))
    endpoint.push(completion("b", usage=(1_000_000, 0), model=f"{MODEL}-2026-01-01"))
    provider = make_provider(endpoint.url, prices={MODEL: Price(1.0, 1.0)})
    assert provider.complete(call()).usage.cost == pytest.approx(1.0)
    provider.set_price(f"{MODEL}-2026-01-01", 3.0, 4.0)
    assert provider.complete(call()).usage.cost == pytest.approx(3.0)


def test_model_without_a_price_costs_nothing(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    endpoint.push(completion("ok", usage=(100, 100)))
    assert make_provider(endpoint.url).complete(call()).usage.cost == 0.0


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (error(400, "bad request"), FailureClass.CLIENT_ERROR),
        (error(401, "bad key"), FailureClass.AUTH),
        (error(403, "forbidden"), FailureClass.AUTH),
        (error(404, "no such route"), FailureClass.CLIENT_ERROR),
        (error(422, "unprocessable"), FailureClass.CLIENT_ERROR),
        (error(429, "slow down"), FailureClass.RATE_LIMIT),
        (error(500, "boom"), FailureClass.SERVER_ERROR),
        (error(502, "bad gateway"), FailureClass.SERVER_ERROR),
        (error(503, "unavailable"), FailureClass.SERVER_ERROR),
        (error(504, "gateway timeout"), FailureClass.SERVER_ERROR),
        (error(418, "teapot"), FailureClass.UNKNOWN),
    ],
)
def test_error_statuses_are_classified(
    endpoint: Endpoint, make_provider: MakeProvider, reply: Reply, expected: FailureClass
) -> None:
    endpoint.push(reply, completion("never reached"))

    exc = failure(make_provider(endpoint.url))

    assert exc.failure_class is expected
    assert exc.retry_after is None
    assert f"HTTP {reply.status}" in exc.message
    assert len(endpoint.requests) == 1  # the SDK's own retries are off


def test_an_http_date_retry_after_counts_from_the_responses_date(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    """A server whose clock is 10 minutes ahead of this worker's: it asks for 30 s, and 30 s
    it is (by the worker's clock it would be 630 s)."""
    from email.utils import formatdate

    served = time.time() + 600
    endpoint.push(
        error(
            429,
            "slow down",
            Retry_After=formatdate(served + 30, usegmt=True),
            Date=formatdate(served, usegmt=True),
        )
    )
    exc = failure(make_provider(endpoint.url))
    assert exc.failure_class is FailureClass.RATE_LIMIT
    assert exc.retry_after == 30.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({}, None),
    ],
)
def test_rate_limit_carries_retry_after(
    endpoint: Endpoint,
    make_provider: MakeProvider,
    headers: dict[str, str],
    expected: float | None,
) -> None:
    endpoint.push(error(429, "slow down", **headers))
    exc = failure(make_provider(endpoint.url))
    assert exc.failure_class is FailureClass.RATE_LIMIT
    assert exc.retry_after == expected


def test_rate_limit_retry_after_as_http_date(
    endpoint: Endpoint, make_provider: MakeProvider
) -> None:
    from email.utils import formatdate

    endpoint.push(error(429, "slow down", Retry_After=formatdate(time.time() + 120, usegmt=True)))
    exc = failure(make_provider(endpoint.url))
    assert exc.retry_after is not None
    assert 110 <= exc.retry_after <= 121


@pytest.mark.parametrize(
    "reply",
    [
        error(404, "The model `nope` does not exist or you do not have access to it.",
              code="model_not_found"),
        error(404, "The model `nope` does not exist."),  # vLLM
        error(404, 'model "nope" not found, try pulling it first'),  # Ollama
    ],
)  # fmt: skip
def test_unknown_model_is_configuration(
    endpoint: Endpoint, make_provider: MakeProvider, reply: Reply
) -> None:
    endpoint.push(reply)
    assert failure(make_provider(endpoint.url)).failure_class is FailureClass.CONFIGURATION


def test_slow_answer_is_a_timeout(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(Reply(delay=3.0, body=completion("late").body))
    started = time.monotonic()
    exc = failure(make_provider(endpoint.url, timeout=0.3))
    assert exc.failure_class is FailureClass.TIMEOUT
    assert time.monotonic() - started < 2.5


def test_dropped_connection(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(Reply(drop=True))
    assert failure(make_provider(endpoint.url)).failure_class is FailureClass.CONNECTION


def test_connection_refused(refused_url: str, make_provider: MakeProvider) -> None:
    assert failure(make_provider(refused_url)).failure_class is FailureClass.CONNECTION


def test_base_url_without_a_scheme_is_configuration(make_provider: MakeProvider) -> None:
    provider = make_provider("ftp://127.0.0.1:1/v1")
    assert failure(provider).failure_class is FailureClass.CONFIGURATION


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b'{"choices": [', content_type="application/json"),
        Reply(body=b"<html>502 from the proxy</html>", content_type="text/html"),
        Reply(body={"object": "chat.completion"}),
        Reply(body={"choices": [{"message": {"role": "assistant", "content": 5}}]}),
        Reply(body={"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}),
        Reply(body=[1, 2, 3]),
    ],
)
def test_malformed_body_is_a_server_error(
    endpoint: Endpoint, make_provider: MakeProvider, reply: Reply
) -> None:
    endpoint.push(reply)
    exc = failure(make_provider(endpoint.url))
    assert exc.failure_class is FailureClass.SERVER_ERROR
    assert "malformed response" in exc.message


def test_sdk_retries_can_be_turned_on(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(error(503, "busy", retry_after_ms="10"), completion("second time lucky"))
    reply = make_provider(endpoint.url, max_retries=1).complete(call())
    assert reply.text == "second time lucky"
    assert len(endpoint.requests) == 2


# -- configuration ---------------------------------------------------------------------------


def test_missing_key_for_openai_itself_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=r"(?i)api_key|credentials"):
        OpenAICompatible(model="gpt-4.1-mini")


def test_local_server_needs_no_key(
    endpoint: Endpoint, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    endpoint.push(completion("ok"))
    assert make_provider(endpoint.url, api_key=None).complete(call()).text == "ok"


@pytest.mark.parametrize(
    "kwargs", [{"model": ""}, {"model": "m", "timeout": 0}, {"model": "m", "max_retries": -1}]
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        OpenAICompatible(base_url="http://127.0.0.1:1/v1", api_key="k", **kwargs)


def test_error_message_is_the_servers_own(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(error(503, "The engine is currently overloaded"))
    assert failure(make_provider(endpoint.url)).message == (
        "HTTP 503: The engine is currently overloaded"
    )


def test_error_inside_a_200_is_reported(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    endpoint.push(Reply(body={"error": {"message": "context length exceeded"}}))
    exc = failure(make_provider(endpoint.url))
    assert exc.failure_class is FailureClass.SERVER_ERROR
    assert "context length exceeded" in exc.message


def test_refusal_is_the_answer(endpoint: Endpoint, make_provider: MakeProvider) -> None:
    body = completion(None).body
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    endpoint.push(Reply(body=body))
    assert make_provider(endpoint.url).complete(call()).text == "I can't help with that."
