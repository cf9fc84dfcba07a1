"""A stored request read back (`_requests.from_json`): the same request `RunRequest(**data)`
would build, for every field enqueue writes or leaves out."""

from __future__ import annotations

import pytest

from tenure import RunRequest
from tenure._requests import dumps_checked, from_json, to_json


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
