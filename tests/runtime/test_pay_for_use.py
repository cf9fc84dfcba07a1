"""A run pays only for what it uses (issue: CPU per trivial run): a provider that does not
stream is handed no delta callback, so no publisher is opened for its calls. On both
stores."""

from __future__ import annotations

from collections.abc import Callable

import tenure
from tenure import Outcome, RunRequest
from tenure.providers import Fallback, ModelCall, ModelReply

MakeRuntime = Callable[..., tenure.Runtime]


class Seeing:
    """Answers at once, keeping whether it was handed a delta callback."""

    def __init__(self, streams: bool | None) -> None:
        if streams is not None:
            self.streams = streams
        self.on_delta: list[bool] = []

    def complete(self, call: ModelCall) -> ModelReply:
        self.on_delta.append(call.on_delta is not None)
        return ModelReply("ok", (), tenure.Usage(1, 1), "seeing")


def test_only_a_provider_that_may_stream_is_handed_a_delta_callback(
    make_runtime: MakeRuntime,
) -> None:
    rt = make_runtime()
    whole, silent, streaming = Seeing(False), Seeing(None), Seeing(True)
    rt.add_model("whole", whole)
    rt.add_model("silent", silent)  # says nothing: taken to stream, as before
    first = Seeing(False)
    rt.add_model("chain", Fallback([first, streaming]))  # one member may stream: the chain may
    for model in ("whole", "silent", "chain"):
        run_id = rt.enqueue(RunRequest(prompt="p", model=model))
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
    assert whole.on_delta == [False]
    assert silent.on_delta == [True]
    assert first.on_delta == [True] and streaming.on_delta == []  # the first one answered
    assert tenure.providers.Scripted.streams is False
