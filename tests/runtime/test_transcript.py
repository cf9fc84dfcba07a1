"""A crash never changes what the model is shown (prefix continuation, recovery
determinism): the live transcript is built from what is stored, so a resumed run's model
messages are exactly the uncrashed run's, even for values JSON cannot hold. On both stores."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure import FailureClass, Outcome, RunRequest, RunStatus

MakeRuntime = Callable[..., tenure.Runtime]

ODD_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "minus_inf": -math.inf,
    "big": 2**70,
    "surrogate": "half \udc80 of a pair",
    "nested": [{"x": math.nan, "y": -(2**65)}],
}


class RecordingModel:
    """Calls `odd` once, then answers; keeps the messages of every call it was shown. With
    `fail_second_call`, its second call fails once (retryable) and the run resumes."""

    def __init__(self, fail_second_call: bool = False, text: str = "calling") -> None:
        self.shown: list[list[dict[str, Any]]] = []
        self.fail_second_call = fail_second_call
        self.text = text

    def complete(self, call: tenure.providers.ModelCall) -> tenure.providers.ModelReply:
        self.shown.append([dict(m) for m in call.messages])
        usage = tenure.Usage(input_tokens=1, output_tokens=1)
        if not any(m["role"] == "tool" for m in call.messages):
            calls = (tenure.providers.ToolCall("c1", "odd", {}),)
            return tenure.providers.ModelReply(self.text, calls, usage, "recording")
        if self.fail_second_call:
            self.fail_second_call = False
            raise tenure.RetryableError("the model is busy", failure_class=FailureClass.TIMEOUT)
        return tenure.providers.ModelReply("done", (), usage, "recording")


def odd_app(make_runtime: MakeRuntime, model: RecordingModel) -> tenure.Runtime:
    rt = make_runtime()
    rt.add_model("recording", model)

    @rt.tool
    def odd() -> dict[str, Any]:
        """Values JSON cannot hold."""
        return ODD_VALUES

    return rt


def request() -> RunRequest:
    return RunRequest(prompt="show me", model="recording", tools=["odd"])


@pytest.mark.parametrize("text", ["calling", "half \udc81 a pair"], ids=["plain", "surrogate"])
def test_a_resumed_run_is_shown_exactly_what_the_uncrashed_run_was_shown(
    make_runtime: MakeRuntime, text: str
) -> None:
    straight = RecordingModel(text=text)
    rt = odd_app(make_runtime, straight)
    result = rt.run(request())
    assert result.outcome is Outcome.COMPLETED

    resumed = RecordingModel(fail_second_call=True, text=text)
    rt2 = odd_app(make_runtime, resumed)
    run_id = rt2.enqueue(request())
    first = rt2.run_queued(run_id)
    assert first is not None and first.outcome is Outcome.REQUEUED
    while (second := rt2.run_queued(run_id)) is None:  # past the retry's short backoff
        time.sleep(0.01)
    assert second.outcome is Outcome.COMPLETED
    run = rt2.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED

    # The uncrashed run's last call, the failed call before the resume, and the call after
    # it: one and the same transcript.
    assert straight.shown[-1] == resumed.shown[1] == resumed.shown[2]
    (tool_message,) = [m for m in straight.shown[-1] if m["role"] == "tool"]
    assert json.loads(tool_message["content"]) == {
        "result": {
            "nan": "nan",
            "inf": "inf",
            "minus_inf": "-inf",
            "big": str(2**70),
            "surrogate": "half \\udc80 of a pair",
            "nested": [{"x": "nan", "y": str(-(2**65))}],
        }
    }
