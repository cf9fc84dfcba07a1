"""Fallback: the next provider on a retryable failure only; exhausted → every attempt kept."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tenure import FailureClass, FallbackExhausted, ProviderError, RunRequest
from tenure.providers import Fallback, ModelCall, ModelReply
from tenure.providers.openai import OpenAICompatible

from .conftest import ChatServer, Endpoint, completion, error

CALL = ModelCall(
    messages=[{"role": "user", "content": "hi"}],
    tools=[],
    run_id="run-1",
    attempt=0,
    request=RunRequest(prompt="hi", model="m"),
)


class Failing:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0

    def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        raise self.exc


class Answering:
    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    def complete(self, call: ModelCall) -> ModelReply:
        self.calls += 1
        return ModelReply(text=self.text, model=self.text)


@pytest.mark.parametrize(
    "exc",
    [
        ProviderError(FailureClass.SERVER_ERROR, "503"),
        ProviderError(FailureClass.RATE_LIMIT, "429", retry_after=3),
        ProviderError(FailureClass.TIMEOUT, "slow"),
        ProviderError(FailureClass.CONNECTION, "refused"),
        ProviderError(FailureClass.CIRCUIT_OPEN, "open"),
        ConnectionResetError("reset"),  # unclassified, but retryable by SPEC §3
    ],
)
def test_retryable_failure_moves_on(exc: Exception) -> None:
    first, second = Failing(exc), Answering("second")
    assert Fallback([first, second]).complete(CALL).text == "second"
    assert (first.calls, second.calls) == (1, 1)


@pytest.mark.parametrize(
    "exc",
    [
        ProviderError(FailureClass.AUTH, "401"),
        ProviderError(FailureClass.CONFIGURATION, "unknown model"),
        ProviderError(FailureClass.CLIENT_ERROR, "400"),
        ProviderError(FailureClass.UNKNOWN, "?"),
        ValueError("a bug"),
    ],
)
def test_non_retryable_failure_raises_at_once(exc: Exception) -> None:
    first, second = Failing(exc), Answering("second")
    with pytest.raises(type(exc)) as caught:
        Fallback([first, second]).complete(CALL)
    assert caught.value is exc
    assert second.calls == 0


def test_non_retryable_after_a_retryable_one_raises_at_once() -> None:
    auth = ProviderError(FailureClass.AUTH, "401")
    third = Answering("third")
    chain = Fallback([Failing(ProviderError(FailureClass.TIMEOUT, "slow")), Failing(auth), third])
    with pytest.raises(ProviderError) as caught:
        chain.complete(CALL)
    assert caught.value is auth
    assert third.calls == 0


def test_first_answer_wins() -> None:
    first, second = Answering("first"), Answering("second")
    assert Fallback([first, second]).complete(CALL).text == "first"
    assert second.calls == 0


def test_exhausted_carries_every_attempt_classified_by_the_last() -> None:
    attempts = [
        ProviderError(FailureClass.SERVER_ERROR, "503"),
        ProviderError(FailureClass.TIMEOUT, "slow"),
        ProviderError(FailureClass.RATE_LIMIT, "429", retry_after=20),
    ]
    with pytest.raises(FallbackExhausted) as caught:
        Fallback([Failing(a) for a in attempts]).complete(CALL)
    exhausted = caught.value
    assert exhausted.attempts == attempts
    assert exhausted.failure_class is FailureClass.RATE_LIMIT
    assert exhausted.retry_after == 20
    assert exhausted.__cause__ is attempts[-1]
    assert "all 3 models failed" in str(exhausted)


def test_a_chain_needs_providers() -> None:
    with pytest.raises(ValueError):
        Fallback([])
    with pytest.raises(ValueError):
        Fallback([object()])  # type: ignore[list-item]


def test_fallback_between_real_endpoints(
    chat_server: ChatServer,
    endpoint: Endpoint,
    make_provider: Callable[..., OpenAICompatible],
    refused_url: str,
) -> None:
    backup = chat_server.endpoint()
    endpoint.push(error(503, "overloaded"))
    backup.push(completion("from the backup"))
    chain = Fallback(
        [make_provider(refused_url), make_provider(endpoint.url), make_provider(backup.url)]
    )

    reply = chain.complete(CALL)

    assert reply.text == "from the backup"
    assert (len(endpoint.requests), len(backup.requests)) == (1, 1)


def test_exhausted_real_endpoints(
    endpoint: Endpoint, make_provider: Callable[..., OpenAICompatible], refused_url: str
) -> None:
    endpoint.push(error(429, "slow down", retry_after="5"))
    chain = Fallback([make_provider(refused_url), make_provider(endpoint.url)])
    with pytest.raises(FallbackExhausted) as caught:
        chain.complete(CALL)
    assert [a.failure_class for a in caught.value.attempts] == [  # type: ignore[attr-defined]
        FailureClass.CONNECTION,
        FailureClass.RATE_LIMIT,
    ]
    assert caught.value.failure_class is FailureClass.RATE_LIMIT
    assert caught.value.retry_after == 5.0
