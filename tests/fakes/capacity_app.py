"""A worker app for provider-capacity tests and benchmarks (SPEC §17): model "fake" is
`OpenAICompatible` against a fake service, optionally with `tenure.Limits`; each run makes
three model calls (two tool calls, then an answer) when the service answers with
`three_calls`.

    python -m tests.fakes.capacity_app DB BASE_URL [--rpm R] [--tpm T] [--concurrency C]
        [--lease S] [--slots N] [--max-tokens M] [--max-requeues K]

works the queue until SIGTERM (a graceful drain).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import tenure
from tenure.providers import OpenAICompatible

from ._answers import Answer, lorem_policy

MODEL = "fake"
TOOL_CALLS_PER_RUN = 2
ANSWER_WORDS = 40
_answer = lorem_policy(ANSWER_WORDS)


def three_calls(body: dict[str, Any]) -> Answer:
    """A policy for the service: call the first offered tool until the transcript holds two
    results, then answer: three model calls a run."""
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    results = sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
    if not offered or results >= TOOL_CALLS_PER_RUN:
        return _answer(body)
    return Answer(tool_calls=[(offered[0], {"page": results + 1})])


def make_app(
    db_url: str,
    base_url: str,
    limits: tenure.Limits | None,
    *,
    lease: float = 30.0,
    max_tokens: int = 200,
    max_requeues: int = 3,
) -> tenure.Runtime:
    rt = tenure.Runtime(
        db_url, lease_seconds=lease, max_requeues=max_requeues, backoff_base=1.0, backoff_cap=4.0
    )

    @rt.tool
    def lookup(page: int) -> str:
        """Read one page of the record."""
        return f"page {page}: " + "lorem ipsum dolor sit amet " * 8

    provider = OpenAICompatible(MODEL, base_url=base_url, max_tokens=max_tokens, timeout=60)
    rt.add_model(MODEL, provider, limits=limits)
    return rt


def request(index: int) -> tenure.RunRequest:
    prompt = f"Summarise record {index}: read its pages, then answer in a paragraph."
    return tenure.RunRequest(prompt=prompt, model=MODEL, tools=["lookup"], max_iterations=5)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.fakes.capacity_app")
    p.add_argument("db_url")
    p.add_argument("base_url")
    p.add_argument("--rpm", type=float, default=None)
    p.add_argument("--tpm", type=float, default=None)
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--no-limits", action="store_true", help="call the service blindly")
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--max-requeues", type=int, default=3)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    limits = None
    if not args.no_limits:
        limits = tenure.Limits(args.rpm, args.tpm, args.concurrency)
    rt = make_app(
        args.db_url,
        args.base_url,
        limits,
        lease=args.lease,
        max_tokens=args.max_tokens,
        max_requeues=args.max_requeues,
    )
    with rt:
        rt.work(concurrency=args.slots)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
