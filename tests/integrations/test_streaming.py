"""A framework agent's requests stream like any model step (SPEC §18): a reader in another
process sees the answer of a pydantic-ai agent's request, and of an OpenAI Agents SDK
agent's, grow before its `llm` event."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent as SdkAgent
from pydantic_ai import Agent

from tenure import Outcome, RunRequest
from tenure.integrations import openai_agents as durable_agents
from tenure.integrations import pydantic_ai as durable
from tests.fakes.openai_service import FakeOpenAI
from tests.stream._proc import MODEL, make_runtime
from tests.stream.test_stream import Reader, deltas_of, fake

__all__ = ["fake"]  # the fixture, used by name


def test_a_pydantic_ai_agents_request_streams_to_a_reader(db_url: str, fake: FakeOpenAI) -> None:
    rt = make_runtime(db_url, fake.url)
    durable.register(rt, Agent(name="asker", instructions="Answer briefly."), model=MODEL)
    streamed_before_its_event(db_url, rt)


def test_an_openai_agents_sdk_agents_request_streams_to_a_reader(
    db_url: str, fake: FakeOpenAI
) -> None:
    rt = make_runtime(db_url, fake.url)
    agent = SdkAgent(name="asker", instructions="Answer briefly.")
    durable_agents.register(rt, agent, model=MODEL)
    streamed_before_its_event(db_url, rt)


def streamed_before_its_event(db_url: str, rt: Any) -> None:
    try:
        run_id = rt.enqueue(RunRequest(agent="asker", input={"prompt": "Where is c-42?"}))
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
    assert "".join(pieces) == text and json.loads(result.output or "") == text
    positions = [n for n, i in enumerate(items) if i["kind"] == "delta"]
    assert max(positions) < items.index(llm)
