"""A stored request read back (`_requests.from_json`): the same request `RunRequest(**data)`
would build, for every field enqueue writes or leaves out."""

from __future__ import annotations

import pytest

from tenure import RunRequest
from tenure._errors import InvalidRequest
from tenure._requests import claimed, dumps_checked, from_json, to_json


@pytest.mark.parametrize(
    "request_",
    [
        RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}]),
        RunRequest(
            prompt="p",
            model="m",
            tools=["a", "b"],
            max_iterations=3,
            queue="q",
            idempotency_key="k",
            metadata={"tenant": "acme", "n": [1, 2]},
            system="s",
            max_tokens=100,
            max_cost=0.5,
            priority=-7,
            concurrency_key="acme",
        ),
        RunRequest(agent="summarise", input={"doc": "d"}, model="default"),
    ],
)
def test_a_stored_request_reads_back_as_it_was_enqueued(request_: RunRequest) -> None:
    assert from_json(dumps_checked(to_json(request_))) == request_


def test_fields_left_out_take_their_defaults_each_its_own() -> None:
    first, second = from_json('{"prompt": "x"}'), from_json('{"prompt": "x"}')
    assert first == RunRequest(prompt="x")
    assert first.tools == () and type(first.tools) is tuple
    first.metadata["changed"] = True  # a default made per request, as the dataclass does
    assert second.metadata == {}


def test_a_claimed_text_is_decoded_once_and_its_request_shared() -> None:
    text = dumps_checked(to_json(RunRequest(prompt="shared", model="scripted")))
    first = claimed(text)
    assert first == from_json(text)
    assert claimed(text) is first


def test_an_agent_functions_request_is_decoded_at_every_claim() -> None:
    # Its `input` is handed to the function's code, which may change it.
    text = dumps_checked(to_json(RunRequest(agent="summarise", input={"doc": "d"})))
    first = claimed(text)
    assert first == from_json(text)
    assert claimed(text) is not first


def test_a_long_text_is_not_kept() -> None:
    text = dumps_checked(to_json(RunRequest(prompt="x" * 5000, model="scripted")))
    assert claimed(text) is not claimed(text)


@pytest.mark.parametrize("text", ['{"prompt": ""}', "not json", None])
def test_a_text_that_is_not_a_request_is_refused_at_every_claim(text: str | None) -> None:
    for _ in range(2):
        with pytest.raises(InvalidRequest):
            claimed(text)
