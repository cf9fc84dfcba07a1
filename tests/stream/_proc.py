"""The processes of the streaming tests: a reader that follows a run with `Runtime.stream`
and prints what it yields, one JSON line each; a worker whose model streams from the fake
service.

    python -m tests.stream._proc read DB_URL RUN_ID
    python -m tests.stream._proc work DB_URL BASE_URL [--lease S] [--concurrency N] [--burst]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import tenure
from tenure.providers.openai import OpenAICompatible

MODEL = "streamed"


def make_runtime(db_url: str, base_url: str, lease: float = 30.0) -> tenure.Runtime:
    """A Runtime whose model `streamed` streams from the fake service at `base_url`."""
    rt = tenure.Runtime(db_url, lease_seconds=lease, backoff_base=0.05, backoff_cap=0.1)
    provider = OpenAICompatible(
        model="fake-model", base_url=base_url, api_key="k", timeout=30.0, stream=True
    )
    rt.add_model(MODEL, provider)
    return rt


def read(db_url: str, run_id: str) -> None:
    with tenure.Runtime(db_url) as rt:
        for item in rt.stream(run_id):
            line = item.to_json(run_id) if isinstance(item, tenure.Delta) else item.to_json()
            line["received"] = time.monotonic()
            print(json.dumps(line), flush=True)


def work(db_url: str, base_url: str, lease: float, concurrency: int, burst: bool) -> None:
    rt = make_runtime(db_url, base_url, lease)
    print("working", flush=True)
    rt.work(concurrency=concurrency, burst=burst)
    rt.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["read", "work"])
    parser.add_argument("db_url")
    parser.add_argument("target")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args(argv)
    if args.mode == "read":
        read(args.db_url, args.target)
    else:
        work(args.db_url, args.target, args.lease, args.concurrency, args.burst)


if __name__ == "__main__":
    main(sys.argv[1:])
