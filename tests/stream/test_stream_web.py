"""The HTTP event stream of a run carries `delta` messages while its model call streams
(SPEC §18), on both stores."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tenure import RunRequest
from tenure.web import create_app
from tests.fakes.openai_service import FakeOpenAI

from ._proc import MODEL, make_runtime

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(model="fake-model", chunk_interval=0.01) as service:
        yield service


def messages(body: str) -> list[tuple[str, dict[str, object]]]:
    out = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


@pytest.mark.parametrize("reveal", [True, False])
def test_the_event_stream_carries_delta_messages(
    db_url: str, fake: FakeOpenAI, reveal: bool
) -> None:
    rt = make_runtime(db_url, fake.url)
    try:
        run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
        worker = threading.Thread(target=rt.run_queued, args=(run_id,))
        url = f"/api/runs/{run_id}/events/stream?after=0&reveal={str(reveal).lower()}"
        with (
            TestClient(create_app(rt, token=TOKEN)) as client,
            client.stream("GET", url, headers=AUTH) as response,
        ):
            worker.start()
            body = response.read().decode()
        worker.join()
        answer = rt.status(run_id).output  # type: ignore[union-attr]
    finally:
        rt.close()
    found = messages(body)
    deltas = [data for kind, data in found if kind == "delta"]
    kinds = [data["kind"] for kind, data in found if kind == "event"]
    assert kinds == ["claimed", "llm", "assembled"] and found[-1][0] == "end"
    assert len(deltas) >= 10 and {d["sequence"] for d in deltas} == {2}
    assert sum(int(str(d["chars"])) for d in deltas) == len(answer or "")
    if reveal:
        assert "".join(str(d["text"]) for d in deltas) == answer
    else:  # model text is content: hidden, as the llm event's is
        assert {d["text"] for d in deltas} == {"<hidden>"}
        assert (answer or "")[:20] not in body
    llm_at = next(n for n, (k, d) in enumerate(found) if k == "event" and d["kind"] == "llm")
    assert max(n for n, (k, _) in enumerate(found) if k == "delta") < llm_at
