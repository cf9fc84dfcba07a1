"""The fake OpenAI-compatible service, through the real `openai` SDK (no retries)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.openai_service import (
    FakeOpenAI,
    Latency,
    ServiceProcess,
    prompt_tokens,
    tool_once_policy,
)

QUESTION = [{"role": "user", "content": "x" * 40}]  # 40 characters: 10 prompt tokens
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a customer up.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


@pytest.fixture
def make_fake() -> Iterator[Any]:
    made: list[tuple[FakeOpenAI, openai.OpenAI]] = []

    def make(**options: Any) -> tuple[FakeOpenAI, openai.OpenAI]:
        fake = FakeOpenAI(**options).start()
        client = openai.OpenAI(base_url=fake.url, api_key="k", max_retries=0, timeout=10)
        made.append((fake, client))
        return fake, client

    yield make
    for fake, client in made:
        client.close()
        fake.stop()


def ask(client: openai.OpenAI, **params: Any) -> Any:
    params.setdefault("messages", QUESTION)
    return client.chat.completions.create(model="fake-model", **params)


def hammer(client: openai.OpenAI, seconds: float) -> tuple[int, list[openai.RateLimitError]]:
    """Ask as fast as possible for `seconds`; the answers counted and the 429s kept."""
    answered, refused = 0, []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            ask(client, max_tokens=10)
            answered += 1
        except openai.RateLimitError as exc:
            refused.append(exc)
    return answered, refused


# -- limits ----------------------------------------------------------------------------------


def test_requests_per_minute_allow_a_tenth_at_once_then_refill_evenly(make_fake: Any) -> None:
    fake, client = make_fake(rpm=120)  # a burst of 12, then 2 a second
    started = time.monotonic()

    answered, refused = hammer(client, 2.0)

    elapsed = time.monotonic() - started
    # Asked for 2.0 s: a request still in flight then (a slow one on a loaded machine) ends
    # the hammer later, but nothing asks in that tail, so the refill counted below is the
    # asking window's, and above it the whole time's.
    assert 12 + 2 * min(elapsed, 2.0) - 2 <= answered <= 12 + 2 * elapsed + 1
    assert refused
    first = refused[0]
    assert first.status_code == 429
    assert first.code == "rate_limit_exceeded"
    assert isinstance(first.body, dict)
    assert first.body["type"] == "requests"
    assert "requests per min (RPM): Limit 120" in first.body["message"]
    waited_ms = int(first.response.headers["retry-after-ms"])
    assert 0 < waited_ms <= 500  # at 2 a second, the next one is at most half a second away
    assert first.response.headers["retry-after"] == "1"
    stats = fake.stats()
    assert (stats.answered, stats.rate_limited) == (answered, len(refused))
    assert stats.requests == answered + len(refused)


def test_retry_after_is_when_the_next_request_is_admitted(make_fake: Any) -> None:
    _, client = make_fake(rpm=60)
    answered, refused = hammer(client, 0.3)
    assert answered == 6
    wait = int(refused[-1].response.headers["retry-after-ms"]) / 1000

    time.sleep(wait + 0.05)
    ask(client)  # admitted

    with pytest.raises(openai.RateLimitError):
        ask(client)


def test_tokens_per_minute_reserve_the_output_limit_and_settle_to_usage(make_fake: Any) -> None:
    fake, client = make_fake(tpm=6000)  # a bucket of 600 tokens, refilled at 100 a second
    # Each request reserves 10 prompt + 200 output tokens; its answer uses fewer.
    used = ask(client, max_tokens=200).usage.total_tokens
    assert used < 100
    answered = 1
    with pytest.raises(openai.RateLimitError) as refused:
        for _ in range(30):
            ask(client, max_tokens=200)
            answered += 1

    # Reservations alone would admit 2; settled to usage, (600 - 210) / used + 1 (plus what
    # refilled meanwhile, at 100 tokens a second).
    expected = (600 - 210) // used + 1
    assert expected >= 5
    assert expected <= answered <= expected + 2
    assert refused.value.body["type"] == "tokens"  # type: ignore[index]
    assert "Requested 210" in refused.value.body["message"]  # type: ignore[index]
    assert fake.stats().total_tokens == answered * used


def test_a_request_larger_than_the_bucket_waits_for_a_full_bucket(make_fake: Any) -> None:
    _, client = make_fake(tpm=600)  # a bucket of 60 tokens
    ask(client, max_tokens=500)  # a full bucket admits it, into debt
    with pytest.raises(openai.RateLimitError) as refused:
        ask(client, max_tokens=500)
    assert int(refused.value.response.headers["retry-after-ms"]) > 1000


def test_two_processes_share_the_limit_of_a_separate_service() -> None:
    with ServiceProcess(rpm=60) as service:
        counts: list[int] = []

        def client() -> None:
            with openai.OpenAI(base_url=service.url, api_key="k", max_retries=0) as sdk:
                counts.append(hammer(sdk, 1.5)[0])

        threads = [threading.Thread(target=client) for _ in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        stats = service.stats()

    assert sum(counts) == stats.answered
    assert 6 <= sum(counts) <= 6 + elapsed + 1
    assert stats.rate_limited > 0


# -- answers ---------------------------------------------------------------------------------


def test_usage_counts_the_prompt_text_and_the_answer(make_fake: Any) -> None:
    fake, client = make_fake()

    reply = ask(client)

    text = reply.choices[0].message.content
    assert reply.usage.prompt_tokens == 10
    assert reply.usage.completion_tokens == math.ceil(len(text) / 4)
    assert reply.usage.total_tokens == 10 + reply.usage.completion_tokens
    assert reply.choices[0].finish_reason == "stop"
    (seen,) = fake.received
    assert prompt_tokens(seen) == 10
    stats = fake.stats()
    assert stats.tokens_by_minute == [reply.usage.total_tokens]
    assert stats.requests_by_minute == [1]


def test_tools_count_as_prompt_and_the_output_limit_cuts_the_answer(make_fake: Any) -> None:
    _, client = make_fake()

    reply = ask(client, tools=[LOOKUP], max_completion_tokens=5)

    tools_text = json.dumps([LOOKUP], separators=(",", ":"))
    assert reply.usage.prompt_tokens == math.ceil((40 + len(tools_text)) / 4)
    assert reply.usage.completion_tokens == 5
    assert len(reply.choices[0].message.content) == 20
    assert reply.choices[0].finish_reason == "length"


def test_the_policy_answers_with_a_tool_call_then_with_text(make_fake: Any) -> None:
    _, client = make_fake(policy=tool_once_policy({"id": "c-42"}))

    first = ask(client, tools=[LOOKUP])
    (call,) = first.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"id": "c-42"})
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.usage.completion_tokens == math.ceil(len('lookup{"id":"c-42"}') / 4)

    result = {"role": "tool", "tool_call_id": call.id, "content": "Ada"}
    assistant = first.choices[0].message.model_dump(exclude_none=True)
    second = ask(client, tools=[LOOKUP], messages=[*QUESTION, assistant, result])
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].message.content


def test_latency_is_drawn_from_the_distribution(make_fake: Any) -> None:
    _, client = make_fake(latency=Latency.uniform(0.2, 0.3))
    started = time.monotonic()
    ask(client)
    assert time.monotonic() - started >= 0.2


# -- streaming -------------------------------------------------------------------------------


def test_stream_chunks_add_up_to_the_answer_and_end_with_usage(make_fake: Any) -> None:
    fake, client = make_fake(chunk_interval=0.005)
    whole = ask(client)

    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))

    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert len(chunks) > 10  # a delta per word
    assert chunks[-2].choices[0].finish_reason == "stop"
    usage = chunks[-1]
    assert usage.choices == []
    assert usage.usage is not None
    assert usage.usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])
    assert fake.stats().streamed == 1


def test_stream_without_include_usage_has_no_usage_chunk(make_fake: Any) -> None:
    _, client = make_fake()
    chunks = list(ask(client, stream=True))
    assert all(c.choices for c in chunks)
    assert all(getattr(c, "usage", None) is None for c in chunks)


def test_streamed_tool_call_arguments_come_in_pieces(make_fake: Any) -> None:
    _, client = make_fake(policy=tool_once_policy({"id": "c-42", "note": "a longer text"}))
    whole = ask(client, tools=[LOOKUP]).choices[0].message.tool_calls[0]

    deltas = [
        d
        for c in ask(client, tools=[LOOKUP], stream=True)
        if c.choices
        for d in c.choices[0].delta.tool_calls or []
    ]

    assert deltas[0].id == whole.id
    assert deltas[0].function.name == "lookup"
    assert len(deltas) > 3
    assert "".join(d.function.arguments or "" for d in deltas) == whole.function.arguments


def test_a_dropped_stream_raises_in_the_sdk_after_k_chunks(make_fake: Any) -> None:
    fake, client = make_fake()
    fake.drop_next(after_chunks=3)
    received = []

    with pytest.raises(openai.APIConnectionError):
        for chunk in ask(client, stream=True):
            received.append(chunk)

    assert len(received) == 3
    assert fake.stats().dropped == 1
    assert len(list(ask(client, stream=True))) > 3  # only the next answer was dropped


def test_a_dropped_answer_that_is_not_streamed_raises_too(make_fake: Any) -> None:
    fake, client = make_fake()
    fake.drop_next()
    with pytest.raises(openai.APIConnectionError):
        ask(client)
    assert fake.stats().answered == 0


# -- server errors ---------------------------------------------------------------------------


def test_server_errors_on_demand(make_fake: Any) -> None:
    fake, client = make_fake()
    fake.fail_next(2, status=503)

    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as failed:
            ask(client)
        assert failed.value.status_code == 503
    assert ask(client).choices[0].message.content

    stats = fake.stats()
    assert (stats.server_errors, stats.answered) == (2, 1)


def test_server_errors_at_a_seeded_rate(make_fake: Any) -> None:
    fake, client = make_fake(error_rate=0.5, seed=7)
    failed = 0
    for _ in range(40):
        try:
            ask(client)
        except openai.InternalServerError as exc:
            assert exc.status_code == 503
            failed += 1
    assert 10 <= failed <= 30
    assert fake.stats().server_errors == failed


def test_a_separate_service_is_controlled_over_http() -> None:
    with (
        ServiceProcess(chunk_interval=0.001) as service,
        openai.OpenAI(base_url=service.url, api_key="k", max_retries=0) as client,
    ):
        service.fail_next(1, status=502)
        with pytest.raises(openai.InternalServerError):
            ask(client)
        service.drop_next(1, after_chunks=2)
        with pytest.raises(openai.APIConnectionError):
            list(ask(client, stream=True))
        assert ask(client).usage.prompt_tokens == 10
        stats = service.stats()
        service.reset()
        after = service.stats()

    assert (stats.requests, stats.server_errors, stats.dropped, stats.answered) == (3, 1, 1, 1)
    assert (after.requests, after.answered) == (0, 0)
