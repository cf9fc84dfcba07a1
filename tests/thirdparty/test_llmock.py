"""tenure's providers against a fake LLM server nobody here wrote (llmock, from the package
registry; its pytest plugin's `llmock` fixture starts it on 127.0.0.1), beside our own fakes:
answers streamed and whole, tool calls, 429 with `retry-after` and broken streams classified
the way the ladder needs them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tenure
from tenure import FailureClass, Outcome, ProviderError, RunRequest
from tenure.providers._base import ModelCall
from tenure.providers.anthropic import Anthropic
from tenure.providers.openai import OpenAICompatible

llmock_plugin = pytest.importorskip("llmock.pytest_plugin")
LLMock = llmock_plugin.LLMock

KEY = "llmock-test-key"


@pytest.fixture
def make(llmock: Any) -> Iterator[Callable[..., Any]]:
    """The provider of `kind` pointed at llmock; all closed at the end."""
    made: list[Any] = []

    def provider(kind: str, **kwargs: Any) -> Any:
        if kind == "openai":
            p: Any = OpenAICompatible(
                model="gpt-4o-mini", base_url=llmock.base_url("openai"), api_key=KEY, **kwargs
            )
        else:
            p = Anthropic(
                "claude-3-5-haiku-latest",
                base_url=llmock.base_url("anthropic"),
                api_key=KEY,
                **kwargs,
            )
        made.append(p)
        return p

    yield provider
    for p in made:
        p.close()


def call(prompt: str = "What is the capital of France?") -> ModelCall:
    return ModelCall(
        messages=[{"role": "user", "content": prompt}],
        tools=[],
        run_id="run-1",
        attempt=0,
        request=RunRequest(prompt=prompt, model="m"),
    )


@pytest.mark.parametrize(
    ("kind", "stream"), [("openai", True), ("openai", False), ("anthropic", False)]
)
def test_a_run_answered_by_llmock(
    llmock: Any,
    make: Callable[..., Any],
    make_runtime: Callable[..., tenure.Runtime],
    kind: str,
    stream: bool,
) -> None:
    llmock.reply("Paris is the capital of France.")
    rt = make_runtime()
    options = {"stream": stream} if kind == "openai" else {}
    rt.add_model("m", make(kind, **options))

    result = rt.run(RunRequest(prompt="What is the capital of France?", model="m"))

    assert result.outcome is Outcome.COMPLETED, result.error
    assert result.output == "Paris is the capital of France."
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    (request,) = llmock.requests
    assert (request.provider, request.stream, request.status) == (kind, stream, 200)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_tool_call_from_llmock_runs_the_tool(
    llmock: Any, make: Callable[..., Any], make_runtime: Callable[..., tenure.Runtime], kind: str
) -> None:
    llmock.call_tool("lookup", {"order_id": "o7"}, provider=kind)
    llmock.reply("Order o7 is paid.", provider=kind)
    rt = make_runtime()
    rt.add_model("m", make(kind))
    seen: list[str] = []

    @rt.tool
    def lookup(order_id: str) -> dict[str, str]:
        """Read an order."""
        seen.append(order_id)
        return {"order_id": order_id, "state": "paid"}

    result = rt.run(RunRequest(prompt="Is order o7 paid?", model="m", tools=["lookup"]))

    assert result.outcome is Outcome.COMPLETED, result.error
    assert seen == ["o7"] and result.output == "Order o7 is paid."


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_429_with_retry_after_is_a_rate_limit_with_the_server_wait(
    llmock: Any, make: Callable[..., Any], kind: str
) -> None:
    llmock.rate_limit(retry_after=7, provider=kind)
    with pytest.raises(ProviderError) as caught:
        make(kind).complete(call())
    assert caught.value.failure_class is FailureClass.RATE_LIMIT
    assert caught.value.retry_after == pytest.approx(7, abs=1)
    (request,) = llmock.requests  # tenure's own ladder retries, not the SDK
    assert request.status == 429


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_outage_is_a_retryable_server_error(
    llmock: Any, make: Callable[..., Any], kind: str
) -> None:
    llmock.fail(503, provider=kind)
    with pytest.raises(ProviderError) as caught:
        make(kind).complete(call())
    assert caught.value.failure_class is FailureClass.SERVER_ERROR


def test_a_stream_cut_mid_answer_is_a_retryable_failure_not_a_short_answer(
    llmock: Any, make: Callable[..., Any]
) -> None:
    llmock.disconnect(after_chunks=2, provider="openai")
    with pytest.raises(ProviderError) as caught:
        make("openai", stream=True).complete(call())
    assert caught.value.failure_class.is_retryable, caught.value
