"""`tenure events RUN --follow` prints a streaming call's deltas as they arrive (SPEC §18),
the real executable against both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure import Outcome, RunRequest
from tests.cli.conftest import Cli
from tests.fakes.openai_service import FakeOpenAI

from ._proc import MODEL, make_runtime


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(model="fake-model", chunk_interval=0.01) as service:
        yield service


def follow(db_url: str, tmp_path: Path, fake: FakeOpenAI, *options: str) -> tuple[str, str]:
    """Follow a run with the CLI while it runs here; (the CLI's output, the answer)."""
    rt = make_runtime(db_url, fake.url)
    try:
        run_id = rt.enqueue(RunRequest(prompt="Where does c-42 live?", model=MODEL))
        proc = Cli(tmp_path, db_url).popen("events", run_id, "--follow", *options)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the `request` event: it is following
        result = rt.run_queued(run_id)
        assert result is not None and result.outcome is Outcome.COMPLETED
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert result.output
        return first + out, result.output
    finally:
        rt.close()


def test_follow_json_prints_delta_objects_then_the_llm_event(
    db_url: str, tmp_path: Path, fake: FakeOpenAI
) -> None:
    out, answer = follow(db_url, tmp_path, fake, "--json")
    items = [json.loads(line) for line in out.splitlines()]
    deltas = [i for i in items if i["kind"] == "delta"]
    llm = next(i for i in items if i["kind"] == "llm")
    assert len(deltas) >= 10
    assert {d["sequence"] for d in deltas} == {llm["sequence"]}
    assert set(deltas[0]) == {"kind", "run_id", "sequence", "text"}
    assert "".join(d["text"] for d in deltas) == answer
    assert items.index(llm) > items.index(deltas[-1])
    assert [i["kind"] for i in items if i["kind"] != "delta"] == [
        "request", "claimed", "llm", "assembled"
    ]  # fmt: skip


def test_follow_prints_the_answer_growing_on_its_own_line(
    db_url: str, tmp_path: Path, fake: FakeOpenAI
) -> None:
    out, answer = follow(db_url, tmp_path, fake)
    lines = out.splitlines()
    streamed = [line for line in lines if line.strip().startswith("2  … ")]
    assert streamed == [f"   2  … {answer}"]
    assert lines.index(streamed[0]) < next(n for n, line in enumerate(lines) if " llm " in line)
