"""SPEC §18 on both stores: a run's model output streamed through the database to a reader
in another process, with the fake OpenAI-compatible service streaming real SSE chunks
through the real `openai` SDK."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import EventKind, Outcome, RunRequest, RunStatus
from tenure._reaper import Reaper
from tenure.store._base import NewEvent
from tenure.store._deltas import DeltaPiece
from tests.crash._workers import wait_for
from tests.fakes._answers import Answer
from tests.fakes.openai_service import FakeOpenAI

from ._proc import MODEL, make_runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(model="fake-model", chunk_interval=0.01) as service:
        yield service


class Reader:
    """`Runtime.stream` in a process of its own, printing what it yields."""

    def __init__(self, db_url: str, run_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.stream._proc", "read", db_url, run_id],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        # Its first item is the run's `request` event: from then on it is following.
        self.items = [json.loads(self.proc.stdout.readline())]
        assert self.items[0]["kind"] == "request"

    def rest(self) -> list[dict[str, Any]]:
        out, _ = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0
        self.items += [json.loads(line) for line in out.splitlines()]
        return self.items


def deltas_of(items: list[dict[str, Any]], sequence: int) -> list[str]:
    return [i["text"] for i in items if i["kind"] == "delta" and i["sequence"] == sequence]


def test_a_reader_in_another_process_sees_every_delta_then_the_llm_event(
    db_url: str, fake: FakeOpenAI
) -> None:
    rt = make_runtime(db_url, fake.url)
    try:
        run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
        reader = Reader(db_url, run_id)
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
        items = reader.rest()
    finally:
        rt.close()

    kinds = [i["kind"] for i in items if i["kind"] != "delta"]
    assert kinds == ["request", "claimed", "llm", "assembled"]
    llm = next(i for i in items if i["kind"] == "llm")
    pieces = deltas_of(items, llm["sequence"])
    # One word a chunk every 10 ms: the reader saw the answer grow, piece by piece.
    assert len(pieces) >= 10
    assert "".join(pieces) == llm["payload"]["message"]["content"] == result.output
    # Every delta comes before its call's event, none after.
    positions = [n for n, i in enumerate(items) if i["kind"] == "delta"]
    assert max(positions) < items.index(llm)
    received = [i["received"] for i in items if i["kind"] == "delta"]
    assert received[-1] - received[0] > 0.1  # live, not all at once at the end
    # Deltas are never journal events, and none is left behind.
    journal = {str(e.kind) for e in rt_events(db_url, run_id)}
    assert journal == {"request", "claimed", "llm", "assembled"}
    assert leftover(db_url, run_id) == []


def test_a_call_that_fails_mid_stream_streams_again_under_a_new_sequence(
    db_url: str, fake: FakeOpenAI
) -> None:
    rt = make_runtime(db_url, fake.url)
    try:
        run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
        reader = Reader(db_url, run_id)
        fake.drop_next(1, after_chunks=6)  # the connection drops after 6 chunks
        first = rt.run_queued(run_id)
        assert first is not None and first.outcome is Outcome.REQUEUED
        wait_for(lambda: retried(rt, run_id), what="the retry to complete")
        items = reader.rest()
    finally:
        rt.close()

    events = [i for i in items if i["kind"] != "delta"]
    assert [e["kind"] for e in events] == [
        "request", "claimed", "requeued", "claimed", "llm", "assembled"
    ]  # fmt: skip
    requeued = events[2]
    llm = events[4]
    abandoned = deltas_of(items, requeued["sequence"])
    final = llm["payload"]["message"]["content"]
    # The failed call streamed a few words under the sequence its `requeued` event took: a
    # reader tells it was abandoned by that event's kind, and the retry by its new sequence.
    assert abandoned and final.startswith("".join(abandoned)) and "".join(abandoned) != final
    assert llm["sequence"] > requeued["sequence"] and llm["attempt"] == 1
    assert "".join(deltas_of(items, llm["sequence"])) == final
    order = [(i["kind"], i["sequence"]) for i in items]
    assert order.index(("requeued", requeued["sequence"])) < next(
        n for n, i in enumerate(items) if i["kind"] == "delta" and i["sequence"] == llm["sequence"]
    )


FIRST = "Let me look that order up in the shipping system for you."
# Long enough (40 words, one every 10 ms) to be still streaming when the stall ends.
SECOND = " ".join(["Order o-1 left the Lyon warehouse on Monday and arrives on Thursday."] * 4)


def _look_up_then_answer(body: dict[str, Any]) -> Answer:
    """Text and a tool call, then (with the tool's result) a text answer."""
    if any(m.get("role") == "tool" for m in body.get("messages") or []):
        return Answer(text=SECOND)
    return Answer(text=FIRST, tool_calls=[("lookup", {"order": "o-1"})])


def test_a_publication_that_stalls_past_its_calls_end_is_refused_not_shown_as_the_next(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #30: the last deltas of a call are published more than 2 s late (the call's end
    # stops waiting for them), after its `llm` event and the tool's event. They name their
    # call: the store refuses them, and the next call's text is shown whole, under its own
    # sequence.
    with FakeOpenAI(model="fake-model", chunk_interval=0.01, policy=_look_up_then_answer) as fake:
        rt = make_runtime(db_url, fake.url)
        try:

            @rt.tool()
            def lookup(order: str) -> str:
                """Where an order is."""
                return f"{order}: shipped"

            run_id = rt.enqueue(RunRequest(prompt="Where is o-1?", model=MODEL, tools=["lookup"]))
            store = rt.store
            publish = store.publish_deltas
            late: list[list[DeltaPiece]] = []

            def stalling(pieces: list[DeltaPiece]) -> None:
                # The first publication goes out at once (a reader sees the call start);
                # the next one stalls until the tool's event is recorded and the second
                # call is streaming, then goes to the real store.
                if late or not published:
                    published.append(pieces)
                    return publish(pieces)
                late.append(pieces)
                wait_for(lambda: last_sequence(rt, run_id) >= 3, what="the tool's event")
                wait_for(lambda: len(fake.received) >= 2, what="the second call")
                time.sleep(0.05)  # its first pieces wait behind this publication
                return publish(pieces)

            published: list[list[DeltaPiece]] = []
            monkeypatch.setattr(store, "publish_deltas", stalling)
            reader = Reader(db_url, run_id)
            result = rt.run_queued(run_id)
            assert result is not None and result.outcome is Outcome.COMPLETED, result
            items = reader.rest()
        finally:
            rt.close()

    assert late, "no publication stalled"
    events = [i for i in items if i["kind"] != "delta"]
    assert [(e["kind"], e["sequence"]) for e in events] == [
        ("request", 0), ("claimed", 1), ("llm", 2), ("tool", 3), ("llm", 4), ("assembled", 5)
    ]  # fmt: skip
    # Each call's text, exactly, under its own sequence: nothing of the first call's shown
    # under the second's, no piece of the second's dropped.
    assert "".join(deltas_of(items, 2)) == FIRST
    assert "".join(deltas_of(items, 4)) == SECOND
    assert {i["sequence"] for i in items if i["kind"] == "delta"} == {2, 4}
    assert result.output == SECOND


def last_sequence(rt: tenure.Runtime, run_id: str) -> int:
    progress = rt.store.run_progress(run_id)
    return -1 if progress is None else progress[1]


def test_a_reader_of_an_unknown_run_gets_nothing(runtime: tenure.Runtime) -> None:
    assert list(runtime.stream("no-such-run")) == []


def test_the_stream_ends_when_the_run_waits_for_a_person(runtime: tenure.Runtime) -> None:
    @runtime.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE)
    def refund(amount: int) -> str:
        """Refund."""
        return "ok"

    script = [{"call": [{"tool": "refund", "args": {"amount": 5}}]}, {"say": "done"}]
    request = RunRequest(prompt="refund", model="scripted", tools=["refund"], script=script)
    run_id = runtime.enqueue(request)
    rt = tenure.Runtime(runtime.database_url, approve_writes=True)
    rt.tool(effect=tenure.ToolEffect.NON_IDEMPOTENT_WRITE)(refund)
    try:
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.AWAITING_APPROVAL
        items = list(runtime.stream(run_id))  # returns: the run waits for a person
    finally:
        rt.close()
    assert items and all(isinstance(i, tenure.Event) for i in items)
    status = runtime.status(run_id)
    assert status is not None and status.status is RunStatus.WAITING_FOR_APPROVAL


def retried(rt: tenure.Runtime, run_id: str) -> bool:
    found = rt.run_queued(run_id)
    return found is not None and found.outcome is Outcome.COMPLETED


def rt_events(db_url: str, run_id: str) -> list[tenure.Event]:
    with tenure.Runtime(db_url) as rt:
        return rt.events(run_id)


def leftover(db_url: str, run_id: str) -> list[Any]:
    """What a new reader finds of the run's deltas now (on SQLite: the rows still stored)."""
    with tenure.Runtime(db_url) as rt:
        feed = rt.store.follow_deltas(run_id)
        try:
            return list(feed.take(0))
        finally:
            feed.close()


def test_publishing_a_long_delta_splits_it_under_the_notify_limit(
    db_url: str, fake: FakeOpenAI
) -> None:
    rt = make_runtime(db_url, fake.url)
    try:
        run_id = rt.enqueue(RunRequest(prompt="x", model=MODEL))
        claimed = rt.store.claim_run(run_id, "worker:test:1:0", 30.0)
        assert claimed is not None
        feed = rt.store.follow_deltas(run_id)
        text = "é" * 5000  # 10,000 bytes in UTF-8: over PostgreSQL's payload limit
        stream = rt.engine.deltas.open(claimed.lease, 2)  # type: ignore[union-attr]
        stream.add(text)
        stream.close()
        got: list[Any] = []
        deadline = time.monotonic() + 5
        while "".join(d.text for d in got) != text and time.monotonic() < deadline:
            got += feed.take(0.1)
        feed.close()
    finally:
        rt.close()
    assert "".join(d.text for d in got) == text
    assert len(got) >= 3 and [d.chunk for d in got] == list(range(len(got)))
    assert {d.sequence for d in got} == {2}  # request 0, claimed 1: the call's llm will be 2


def test_only_the_segment_holding_the_run_publishes(runtime: tenure.Runtime) -> None:
    run_id = runtime.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "hi"}]))
    claimed = runtime.store.claim_run(run_id, "worker:test:1:0", 30.0)
    assert claimed is not None
    lease = claimed.lease
    feed = runtime.store.follow_deltas(run_id)
    try:
        stale = [
            DeltaPiece(dataclasses.replace(lease, token=lease.token + 1), 2, 0, "stale token"),
            DeltaPiece(dataclasses.replace(lease, owner="worker:other:2:0"), 2, 1, "not the owner"),
        ]
        runtime.store.publish_deltas(stale)
        runtime.store.publish_deltas([DeltaPiece(lease, 2, 2, "ours")])
        got = _first_deltas(feed)
    finally:
        feed.close()
    assert [(d.sequence, d.chunk, d.text) for d in got] == [(2, 2, "ours")]


def test_a_piece_published_once_its_calls_sequence_is_taken_is_refused(
    runtime: tenure.Runtime,
) -> None:
    run_id = runtime.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "hi"}]))
    claimed = runtime.store.claim_run(run_id, "worker:test:1:0", 30.0)
    assert claimed is not None
    lease = claimed.lease
    feed = runtime.store.follow_deltas(run_id)
    try:
        llm = NewEvent(EventKind.LLM, {"message": {"role": "assistant", "content": "hi"}})
        assert runtime.store.record_step(lease, 30.0, [llm]) == [2]
        runtime.store.publish_deltas([DeltaPiece(lease, 2, 7, "late")])  # the call is over
        tool = NewEvent(EventKind.TOOL, {"name": "t"})
        assert runtime.store.record_step(lease, 30.0, [tool]) == [3]
        # Later still, while the next call streams (issue #30): refused all the same, and
        # the next call's pieces, numbered from 0 again, are all delivered.
        runtime.store.publish_deltas([DeltaPiece(lease, 2, 8, "later")])
        runtime.store.publish_deltas(
            [DeltaPiece(lease, 4, 0, "next "), DeltaPiece(lease, 4, 1, "call")]
        )
        # A piece that names a call ahead of the run's next event is refused too.
        runtime.store.publish_deltas([DeltaPiece(lease, 5, 0, "ahead")])
        got = _first_deltas(feed)
    finally:
        feed.close()
    assert [(d.sequence, d.chunk, d.text) for d in got] == [(4, 0, "next "), (4, 1, "call")]


def test_a_segment_whose_lease_expired_publishes_nothing(runtime: tenure.Runtime) -> None:
    """No reaper acted yet, but the lease's time is over: its pieces are dropped. The next
    segment's pieces, published after them, are the only ones a reader gets."""
    run_id = runtime.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "hi"}]))
    claimed = runtime.store.claim_run(run_id, "worker:test:1:0", 0.2)
    assert claimed is not None
    feed = runtime.store.follow_deltas(run_id)
    try:
        time.sleep(0.35)
        runtime.store.publish_deltas(
            [DeltaPiece(claimed.lease, claimed.last_sequence + 1, 0, "after its lease")]
        )
        # Were it stored, SQLite's poller (every 10 ms) would deliver it before the reaper's
        # requeue deletes the run's deltas.
        time.sleep(0.3)
        assert Reaper(runtime.store, 3).run_once().requeued == 1
        again = runtime.store.claim_run(run_id, "worker:test:2:0", 30.0)
        assert again is not None
        runtime.store.publish_deltas(
            [DeltaPiece(again.lease, again.last_sequence + 1, 0, "the next segment's")]
        )
        got = _first_deltas(feed)
    finally:
        feed.close()
    assert [d.text for d in got] == ["the next segment's"]


def _first_deltas(feed: Any) -> list[Any]:
    """What a feed delivers: waited for up to 5 s, then whatever follows within 0.2 s."""
    got: list[Any] = []
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        got += feed.take(0.1)
    return got + feed.take(0.2)


def test_an_agent_functions_model_step_streams_like_the_built_in_loops(
    db_url: str, fake: FakeOpenAI
) -> None:
    """`ctx.model` goes through the same model step: its text is published while it
    arrives, and a reader in another process sees it grow before the `llm` event."""
    rt = make_runtime(db_url, fake.url)

    @rt.agent
    def asker(ctx: tenure.AgentContext, question: str) -> str:
        first = ctx.model(question, model=MODEL).text or ""
        return first.upper()

    try:
        run_id = rt.enqueue(RunRequest(agent="asker", input={"question": "Where is c-42?"}))
        reader = Reader(db_url, run_id)
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED, result
        items = reader.rest()
    finally:
        rt.close()
    llm = next(i for i in items if i["kind"] == "llm")
    assert llm["payload"]["position"] == 0 and llm["payload"]["step"] == "model"
    pieces = deltas_of(items, llm["sequence"])
    assert len(pieces) >= 10
    text = llm["payload"]["message"]["content"]
    assert "".join(pieces) == text and json.loads(result.output or "") == text.upper()
    positions = [n for n, i in enumerate(items) if i["kind"] == "delta"]
    assert max(positions) < items.index(llm)
    assert leftover(db_url, run_id) == []
