"""OpenAICompatible(stream=True) through the real `openai` SDK against the fake service,
which streams real Server-Sent Events."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tenure
from tenure import EventKind, FailureClass, Outcome, ProviderError, RunRequest, ToolContext, Usage
from tenure.providers import ModelCall, ToolSpec
from tenure.providers._stream import StreamAssembly
from tenure.providers.openai import MalformedResponse, OpenAICompatible, parse_completion
from tests.fakes._app import Latency
from tests.fakes.openai_service import FakeOpenAI, tool_once_policy
from tests.loopkill import kill_loop

from ._stalls import LEASE_SECONDS, STALL_SECONDS, cancel_while_stalled, established_to, wait_for

MODEL = "fake-model"
LOOKUP = ToolSpec(
    "lookup",
    "Look a customer up.",
    {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
)
ARGS = {"id": "c-42", "why": "to send the invoice to the right address"}

MakeFake = Callable[..., FakeOpenAI]
MakeProvider = Callable[..., OpenAICompatible]


@pytest.fixture
def make_fake() -> Iterator[MakeFake]:
    made: list[FakeOpenAI] = []

    def make(**options: Any) -> FakeOpenAI:
        fake = FakeOpenAI(model=MODEL, **options).start()
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.stop()


Abort = threading.Event | None


@pytest.fixture(params=["blocking", "on-the-loop"])
def abort(request: pytest.FixtureRequest) -> Abort:
    """A call without an abort signal is read on the calling thread; with one, as the engine
    makes every call, it is read on the event loop, where the abort can close it."""
    return threading.Event() if request.param == "on-the-loop" else None


def call(
    tools: list[ToolSpec] | None = None,
    on_delta: Callable[[str], None] | None = None,
    abort: Abort = None,
) -> ModelCall:
    return ModelCall(
        messages=[{"role": "user", "content": "Where does c-42 live?"}],
        tools=tools or [],
        run_id="run-1",
        attempt=0,
        request=RunRequest(prompt="Where does c-42 live?", model="m"),
        on_delta=on_delta,
        abort=abort,
    )


def both(make_provider: MakeProvider, fake: FakeOpenAI, **kwargs: Any) -> list[OpenAICompatible]:
    """A provider that does not stream and one that does, on the same endpoint."""
    return [make_provider(fake.url, model=MODEL, stream=s, **kwargs) for s in (False, True)]


def test_the_streamed_answer_equals_the_answer_not_streamed(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake(chunk_interval=0.001)
    whole, streamed = both(make_provider, fake)

    expected = whole.complete(call(abort=abort))
    got = streamed.complete(call(abort=abort))

    assert got == expected
    assert got.text and len(got.text) > 100
    assert got.tool_calls == ()
    sent = fake.received[-1]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert "stream" not in fake.received[0]
    assert fake.stats().streamed == 1


def test_tool_calls_are_assembled_from_their_deltas(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake(policy=tool_once_policy(ARGS))
    whole, streamed = both(make_provider, fake)
    assert len(json.dumps(ARGS)) > 3 * 8  # the fake sends the arguments in 8-character pieces

    expected = whole.complete(call([LOOKUP], abort=abort))
    got = streamed.complete(call([LOOKUP], abort=abort))

    assert got == expected
    (tool_call,) = got.tool_calls
    assert (tool_call.name, tool_call.args) == ("lookup", ARGS)
    assert tool_call.id.startswith("call_")
    assert got.text is None


def test_usage_is_recorded_from_the_last_chunk(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake()
    provider = make_provider(fake.url, model=MODEL, stream=True, prices={MODEL: (2.0, 8.0)})

    reply = provider.complete(call(abort=abort))

    stats = fake.stats()
    assert stats.prompt_tokens == 6  # "Where does c-42 live?": 21 characters
    assert stats.completion_tokens > 10
    cost = (6 * 2.0 + stats.completion_tokens * 8.0) / 1_000_000
    assert reply.usage == Usage(6, stats.completion_tokens, pytest.approx(cost))
    assert reply.model == MODEL


def test_deltas_are_delivered_in_order_while_the_answer_streams(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake(chunk_interval=0.01)
    provider = make_provider(fake.url, model=MODEL, stream=True)
    deltas: list[tuple[float, str]] = []

    reply = provider.complete(
        call(on_delta=lambda text: deltas.append((time.monotonic(), text)), abort=abort)
    )
    returned = time.monotonic()

    assert "".join(text for _, text in deltas) == reply.text
    assert len(deltas) > 20  # a delta per word
    assert all(text for _, text in deltas)
    # The first delta came while the rest of the answer was still on its way.
    assert returned - deltas[0][0] >= 0.01 * (len(deltas) - 2)


def test_a_stream_dropped_midway_fails_as_connection(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake()
    provider = make_provider(fake.url, model=MODEL, stream=True)
    fake.drop_next(after_chunks=4)  # the role, then three words
    deltas: list[str] = []

    with pytest.raises(ProviderError) as caught:
        provider.complete(call(on_delta=deltas.append, abort=abort))

    assert caught.value.failure_class is FailureClass.CONNECTION
    assert len(deltas) == 3
    assert provider.complete(call(abort=abort)).text  # the next call streams again, whole


def test_a_rate_limit_before_the_stream_keeps_retry_after(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake(rpm=60)
    provider = make_provider(fake.url, model=MODEL, stream=True)
    for _ in range(6):
        provider.complete(call(abort=abort))

    with pytest.raises(ProviderError) as caught:
        provider.complete(call(abort=abort))

    assert caught.value.failure_class is FailureClass.RATE_LIMIT
    assert caught.value.retry_after is not None
    assert 0 < caught.value.retry_after <= 1.0


def test_a_server_error_before_the_stream_is_a_server_error(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake()
    fake.fail_next(status=502)
    with pytest.raises(ProviderError) as caught:
        make_provider(fake.url, model=MODEL, stream=True).complete(call(abort=abort))
    assert caught.value.failure_class is FailureClass.SERVER_ERROR


def test_what_on_delta_raises_is_raised_unchanged(
    make_fake: MakeFake, make_provider: MakeProvider, abort: Abort
) -> None:
    fake = make_fake()
    provider = make_provider(fake.url, model=MODEL, stream=True)

    def refuse(text: str) -> None:
        raise KeyError(text)

    with pytest.raises(KeyError):
        provider.complete(call(on_delta=refuse, abort=abort))
    assert provider.complete(call(abort=abort)).text  # the connection was released


# -- the assembly, without a server ------------------------------------------------------------


def chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "choices": [{"index": 0, "delta": delta, **extra}]}


def test_a_stream_without_choices_is_malformed() -> None:
    assembly = StreamAssembly()
    assembly.add({"model": MODEL, "choices": [], "usage": {"prompt_tokens": 3}})
    with pytest.raises(MalformedResponse):
        parse_completion(assembly.body(), MODEL, {})


def test_assembly_tolerates_repeated_names_and_object_arguments() -> None:
    assembly = StreamAssembly()
    head = {"index": 0, "id": "c1", "function": {"name": "lookup", "arguments": ""}}
    assembly.add(chunk({"tool_calls": [head]}))
    again = {"index": 0, "id": "c1", "function": {"name": "lookup", "arguments": '{"id":'}}
    assembly.add(chunk({"tool_calls": [again]}))
    assembly.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"c-1"}'}}]}))
    other = {"index": 1, "function": {"name": "note", "arguments": {"text": "hi"}}}
    assembly.add(chunk({"tool_calls": [other]}, finish_reason="tool_calls"))

    reply = parse_completion(assembly.body(), MODEL, {})

    assert [(c.id, c.name, c.args) for c in reply.tool_calls] == [
        ("c1", "lookup", {"id": "c-1"}),
        ("call_1", "note", {"text": "hi"}),
    ]


def test_a_streamed_refusal_is_the_answer() -> None:
    assembly = StreamAssembly()
    assert assembly.add(chunk({"refusal": "I can"})) == ""
    assembly.add(chunk({"refusal": "not help."}))
    assert parse_completion(assembly.body(), MODEL, {}).text == "I cannot help."


# -- a real run --------------------------------------------------------------------------------


def test_a_run_with_a_streaming_model_completes(
    make_runtime: Callable[..., tenure.Runtime], make_fake: MakeFake, make_provider: MakeProvider
) -> None:
    fake = make_fake(policy=tool_once_policy({"id": "c-42"}), chunk_interval=0.001)
    rt = make_runtime()
    looked_up: list[str] = []

    @rt.tool
    def lookup(ctx: ToolContext, id: str) -> dict[str, str]:
        """Look a customer up.

        Args:
            id: the customer's id
        """
        looked_up.append(id)
        return {"city": "Lyon"}

    rt.add_model("gpt", make_provider(fake.url, model=MODEL, stream=True))

    result = rt.run(RunRequest(prompt="Where does c-42 live?", model="gpt", tools=["lookup"]))

    assert result.outcome is Outcome.COMPLETED
    assert looked_up == ["c-42"]
    assert result.output and result.output.startswith("You asked: Where does c-42 live?")
    llm = [e for e in rt.events(result.run_id) if e.kind is EventKind.LLM]
    assert len(llm) == 2
    run = rt.status(result.run_id)
    assert run is not None
    stats = fake.stats()
    assert (stats.streamed, stats.answered) == (2, 2)
    assert (run.input_tokens, run.output_tokens) == (stats.prompt_tokens, stats.completion_tokens)
    assert run.input_tokens > 0


def test_an_aborted_streaming_call_stops_between_chunks_and_closes_the_stream(
    make_fake: MakeFake, make_provider: MakeProvider
) -> None:
    """SPEC §15: the lease keeper aborts a model call whose run is no longer the segment's;
    a streaming call stops at the next chunk and closes its HTTP response."""
    fake = make_fake(chunk_interval=0.02)
    provider = make_provider(fake.url, model=MODEL, stream=True)
    abort = threading.Event()
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        if len(deltas) == 3:
            abort.set()

    aborted = dataclasses.replace(call(on_delta=on_delta), abort=abort)
    with pytest.raises(tenure.Cancelled):
        provider.complete(aborted)
    assert len(deltas) == 3  # nothing after the abort
    assert provider.complete(call()).text  # the provider works on


# -- a stalled stream, cancelled (SPEC §15) ----------------------------------------------------


@pytest.mark.parametrize(
    "stall",
    [
        pytest.param({"chunk_interval": STALL_SECONDS}, id="mid-stream"),
        pytest.param({"latency": Latency.fixed(STALL_SECONDS)}, id="before-the-answer"),
    ],
)
def test_cancel_reaches_a_streaming_call_that_stalls(
    make_runtime: Callable[..., tenure.Runtime],
    make_fake: MakeFake,
    make_provider: MakeProvider,
    stall: dict[str, Any],
) -> None:
    """The server stops sending for 30 s (after the first chunk, or before the answer):
    the keeper's round finds the run cancelled, the stream is closed and the slot is free
    again within a keeper round (lease / 3), not when the next chunk or the HTTP timeout
    comes."""
    fake = make_fake(**stall)
    rt = make_runtime(lease_seconds=LEASE_SECONDS)
    rt.add_model("gpt", make_provider(fake.url, model=MODEL, stream=True, timeout=60.0))

    took, rt, run_id = cancel_while_stalled(
        rt, "gpt", lambda: fake.stats().requests == 1 and established_to(fake.port) == 1
    )

    assert took < STALL_SECONDS / 3, took
    wait_for(lambda: established_to(fake.port) == 0, timeout=5.0)  # the stream was closed
    assert fake.stats().answered == 0
    assert EventKind.LLM not in [e.kind for e in rt.events(run_id)]


def test_a_stream_whose_loop_stops_between_chunks_fails_at_once_as_a_timeout(
    make_fake: MakeFake, make_provider: MakeProvider
) -> None:
    """The stream's connection belonged to the loop that stopped: the next read is not
    tried on the new loop, it fails at once as in doubt (a retryable `timeout` that names
    the loop); the provider's next call works, on a new loop with a new client."""
    fake = make_fake(chunk_interval=0.01)
    provider = make_provider(fake.url, model=MODEL, stream=True)
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        if len(deltas) == 2:
            kill_loop()

    stopping = dataclasses.replace(call(on_delta=on_delta, abort=threading.Event()), timeout=60)
    with pytest.raises(ProviderError) as caught:
        provider.complete(stopping)

    assert caught.value.failure_class is FailureClass.TIMEOUT
    assert "event loop thread" in str(caught.value)
    assert len(deltas) == 2
    assert provider.complete(call(abort=threading.Event())).text
