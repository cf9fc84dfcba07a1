"""Provider capacity (SPEC §17) checked against a quota nobody here wrote: llmock enforces a
requests-per-minute limit the way providers do (a bucket refilled continuously, 429 with the
true wait in `retry-after` / `retry-after-ms`). Two runtimes on one database (two workers of
four slots, in threads) drain a burst of runs through `OpenAICompatible` and `Anthropic`:

- with `Limits` equal to llmock's quota, llmock never answers 429 (SPEC §17: the engine's
  bucket holds a tenth of the minute and keeps a second of refill in hand);
- without them it does, and every 429 is a `rate_limit` whose `retry-after` the run obeys:
  the run is parked uncharged and asks again no sooner than the server said.

llmock's bucket holds a whole minute's quota at first, where a provider's spreads it (the
shape tenure keeps, a tenth of the minute): a fresh llmock lets any burst under a minute's
quota through and would prove nothing. Each test therefore spends llmock's quota down to a
tenth of the minute first, as a client that has been sending at its quota finds it; the two
buckets then start level.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import tenure
from tenure import Limits, RunRequest, RunStatus
from tenure.providers.anthropic import Anthropic
from tenure.providers.openai import OpenAICompatible

pytest.importorskip("llmock.pytest_plugin")

KEY = "llmock-capacity-key"
RPM = 120  # llmock's quota and tenure's limit: 12 at once, then 2 a second
BURST = RPM // 10
RUNS = 20  # eight more than the bucket holds
MakeRuntime = Callable[..., tenure.Runtime]


def make_provider(llmock: Any, kind: str) -> Any:
    if kind == "openai":
        return OpenAICompatible(
            model="gpt-4o-mini", base_url=llmock.base_url("openai"), api_key=KEY, max_tokens=64
        )
    return Anthropic(
        "claude-3-5-haiku-latest",
        base_url=llmock.base_url("anthropic"),
        api_key=KEY,
        max_tokens=64,
    )


def spend_down(llmock: Any, kind: str, left: int) -> int:
    """Spend llmock's request bucket (per provider and key) until at most `left` requests
    remain; return what remains, as llmock's rate-limit header says."""
    body: dict[str, Any] = {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    if kind == "openai":
        path, header = "/chat/completions", "x-ratelimit-remaining-requests"
        headers = {"authorization": f"Bearer {KEY}"}
        body["model"] = "gpt-4o-mini"
    else:
        path, header = "/v1/messages", "anthropic-ratelimit-requests-remaining"
        # llmock keys its buckets by the first credential it finds, `authorization` before
        # `x-api-key`: the Anthropic SDK sends both.
        headers = {
            "authorization": f"Bearer {KEY}",
            "x-api-key": KEY,
            "anthropic-version": "2023-06-01",
        }
        body["model"] = "claude-3-5-haiku-latest"
    with httpx.Client(headers=headers, timeout=10) as client:
        while True:
            answer = client.post(llmock.base_url(kind) + path, json=body)
            assert answer.status_code == 200, answer.text
            remaining = int(answer.headers[header])
            if remaining <= left:
                return remaining


@pytest.fixture
def quota(llmock: Any) -> Iterator[Any]:
    llmock.limits(rpm=RPM)
    yield llmock
    llmock.limits()


def drain(runtimes: list[tenure.Runtime], ids: list[str], timeout: float = 60.0) -> None:
    """Two workers, in threads, until every run has ended (a parked run comes back later)."""
    deadline = time.monotonic() + timeout

    def ended() -> bool:
        return all(runtimes[0].status(i).status.is_terminal for i in ids)  # type: ignore[union-attr]

    while not ended():
        assert time.monotonic() < deadline, "the runs did not end"
        threads = [
            threading.Thread(target=rt.work, kwargs={"concurrency": 4, "burst": True})
            for rt in runtimes
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not ended():
            time.sleep(0.05)  # parked runs: claimable again at their available_at


def requests_of(llmock: Any, kind: str) -> list[Any]:
    """The requests of the runs (not of `spend_down`: their prompts are "x")."""
    return [r for r in llmock.requests if r.provider == kind and prompt_of(r) != "x"]


def prompt_of(record: Any) -> str:
    content = record.body["messages"][-1]["content"]
    if isinstance(content, list):  # Anthropic's blocks
        return "".join(str(block.get("text", "")) for block in content)
    return str(content)


def burst(
    kind: str, runtimes: list[tenure.Runtime], llmock: Any, limits: Limits | None
) -> list[str]:
    for rt in runtimes:
        rt.add_model("m", make_provider(llmock, kind), limits=limits)
    return runtimes[0].enqueue_many(
        [RunRequest(prompt=f"run {i}: say hello", model="m") for i in range(RUNS)]
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_with_limits_equal_to_the_quota_the_server_never_answers_429(
    quota: Any, make_runtime: MakeRuntime, kind: str
) -> None:
    runtimes = [make_runtime(), make_runtime()]
    ids = burst(kind, runtimes, quota, Limits(requests_per_minute=RPM))
    left = spend_down(quota, kind, left=BURST)
    drain(runtimes, ids)

    for run_id in ids:
        run = runtimes[0].status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
        assert run.requeue_count == 0
    records = requests_of(quota, kind)
    assert [r.status for r in records] == [200] * RUNS
    # The burst was larger than what llmock had left: sent at once, some would have been
    # refused (the test below); paced by the engine's bucket, none was.
    assert left < RUNS
    starts = sorted(r.started_at for r in records)
    assert starts[-1] - starts[0] >= 0.8 * (RUNS - BURST) / (RPM / 60)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_without_limits_the_server_answers_429_and_runs_wait_its_retry_after(
    quota: Any, make_runtime: MakeRuntime, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure")
    runtimes = [make_runtime(), make_runtime()]
    ids = burst(kind, runtimes, quota, None)
    spend_down(quota, kind, left=BURST)
    drain(runtimes, ids)

    records = requests_of(quota, kind)
    refused = [r for r in records if r.status == 429]
    assert refused, "the burst went through: nothing was checked"
    assert all(r.retry_after is not None and r.retry_after > 0 for r in refused)
    by_prompt: dict[str, list[Any]] = {}
    for r in sorted(records, key=lambda r: r.started_at):
        by_prompt.setdefault(prompt_of(r), []).append(r)
    for asked in by_prompt.values():
        for earlier, later in itertools.pairwise(asked):
            if earlier.status == 429:
                # The run asked again no sooner than the server's retry-after.
                assert later.started_at >= earlier.ended_at + earlier.retry_after - 0.05
    for run_id in ids:
        run = runtimes[0].status(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, run
        assert run.requeue_count == 0  # parked for the 429, not charged
    # Each 429 was classified `rate_limit` with the server's wait: it opened the model's
    # circuit in the store for that long (within the log's tenth of a second).
    opened = sorted(
        float(m.group(1))
        for rec in caplog.records
        if (m := re.fullmatch(r"model m: rate limited; circuit open for ([0-9.]+)s", rec.message))
    )
    waits = sorted(r.retry_after for r in refused)
    assert len(opened) == len(waits)
    assert all(abs(o - w) <= 0.051 for o, w in zip(opened, waits, strict=True))
