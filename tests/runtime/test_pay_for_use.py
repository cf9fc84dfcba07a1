"""A run pays only for what it uses (issue: CPU per trivial run): a provider that does not
stream is handed no delta callback, so no publisher is opened for its calls. On both
stores."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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


def test_writes_from_many_threads_share_one_sqlite_connection(tmp_path: Path) -> None:
    """A worker's slots commit on their own threads; the writes share one connection (they
    take turns anyway), so that a worker does not read the schema and prepare every
    statement once per slot. SQLite only: PostgreSQL's writes go through its pool."""
    import threading

    from tenure.store.sqlite import SQLiteStore

    rt = tenure.Runtime(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        store = rt.store
        assert isinstance(store, SQLiteStore)
        before = len(store._all)
        start = threading.Barrier(8)

        def enqueue() -> None:
            start.wait()
            for _ in range(5):
                rt.enqueue(RunRequest(prompt="p", model="scripted", script=[{"say": "ok"}]))

        threads = [threading.Thread(target=enqueue) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(rt.runs(limit=100)) == 40
        # At most the writers' connection is new (the schema's write may have opened it).
        assert len(store._all) - before <= 1, f"{len(store._all) - before} new connections"
    finally:
        rt.close()
