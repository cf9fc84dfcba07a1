"""stream: how late a streamed model delta reaches a reader in another process (SPEC §18).

    python bench/stream.py [--size WORDS] [--repeat 3] [--quick] [--postgres URL]

The fake OpenAI-compatible service runs in this process and streams each run's answer one
word a chunk every CHUNK_INTERVAL seconds; every word is unique, and the service notes when
it sends it. One worker process (concurrency = the number of runs) executes the runs through
the real `openai` SDK with `OpenAICompatible(stream=True)`; one reader process follows every
run with `Runtime.stream` (a thread each) and notes when each word arrives. A word's latency
is its arrival minus its sending, on CLOCK_MONOTONIC, which every process of this machine
shares. Rows: p50, p95, p99 in ms over every word, on SQLite and PostgreSQL, with 1 and 50
runs streaming at once (1 and 5 with --quick). The target is p95 <= 100 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _common as c

STREAMS = (1, 50)
QUICK_STREAMS = (1, 5)
CHUNK_INTERVAL = 0.05
WORKER_TIMEOUT_SECONDS = 300


def _policy(body: dict[str, Any]) -> Any:
    from tests.fakes.openai_service import Answer

    prompt = str(body["messages"][-1]["content"])  # "bench RUN WORDS"
    _, run, words = prompt.split()
    return Answer(text=" ".join(f"r{run}w{i}" for i in range(int(words))))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(c.ROOT), *sys.path])}


def measure(url: str, streams: int, words: int) -> list[float]:
    """Latencies in ms of every word of `streams` runs streamed at once."""
    from tests.fakes.openai_service import FakeOpenAI
    from tests.stream._proc import MODEL, make_runtime

    import tenure

    sent: dict[str, float] = {}

    def on_chunk(chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices") or [{}]
        word = str((choices[0].get("delta") or {}).get("content") or "").strip()
        if word:
            sent[word] = time.monotonic()

    with FakeOpenAI(model="fake-model", chunk_interval=CHUNK_INTERVAL, policy=_policy) as fake:
        fake.service.on_chunk = on_chunk
        with make_runtime(url, fake.url) as rt:
            requests = [
                tenure.RunRequest(prompt=f"bench {i} {words}", model=MODEL) for i in range(streams)
            ]
            run_ids = rt.enqueue_many(requests)
        received = _read_while_working(url, fake.url, run_ids)
    return [(received[w] - sent[w]) * 1000 for w in sent if w in received]


def _read_while_working(url: str, fake_url: str, run_ids: list[str]) -> dict[str, float]:
    reader = subprocess.Popen(
        [sys.executable, __file__, "--reader", url, *run_ids],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert reader.stdout is not None
    if reader.stdout.readline().strip() != "ready":
        raise RuntimeError("the reader did not start")
    worker = [sys.executable, "-m", "tests.stream._proc", "work", url, fake_url]
    subprocess.run(
        [*worker, "--concurrency", str(len(run_ids)), "--burst"],
        cwd=c.ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=WORKER_TIMEOUT_SECONDS,
    )
    out, _ = reader.communicate(timeout=WORKER_TIMEOUT_SECONDS)
    if reader.returncode != 0:
        raise RuntimeError(f"the reader failed ({reader.returncode})")
    received: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return received


def read(url: str, run_ids: list[str]) -> None:
    """The reader process: follows every run, prints "ready" once it follows them all,
    then {word: arrival} as one JSON line once they have all ended."""
    import tenure

    received: dict[str, float] = {}
    following = threading.Semaphore(0)

    def follow(rt: tenure.Runtime, run_id: str) -> None:
        first = True
        for item in rt.stream(run_id):
            now = time.monotonic()
            if isinstance(item, tenure.Delta):
                for word in item.text.split():
                    received.setdefault(word, now)
            if first:  # the run's `request` event: from now on it is followed
                first = False
                following.release()

    with tenure.Runtime(url) as rt:
        threads = [threading.Thread(target=follow, args=(rt, r), daemon=True) for r in run_ids]
        for thread in threads:
            thread.start()
        for _ in run_ids:
            following.acquire()
        print("ready", flush=True)
        for thread in threads:
            thread.join()
    print(json.dumps(received), flush=True)


def quantiles(values: list[float]) -> tuple[float, float, float]:
    return c.pick(values, 0.50), c.pick(values, 0.95), c.pick(values, 0.99)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        read(sys.argv[2], sys.argv[3:])
        return
    args = c.parser(__doc__.split("\n")[0], default_size=40, quick_size=10).parse_args()
    words, times = c.size_and_repeat(args)
    streams = QUICK_STREAMS if args.quick else STREAMS
    table = c.Table(f"delta latency, fake chunk to reader in another process ({words} words)")
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        stores: list[tuple[str, Any]] = []
        if not args.no_sqlite:
            stores.append(("sqlite", lambda n: f"sqlite:///{Path(tmp) / f'stream{n}.db'}"))
        if pg is not None:
            stores.append(("postgres", lambda n: pg.fresh("stream")))
        made = 0
        for store, url_for in stores:
            for n in streams:
                p50, p95, p99 = c.Series(), c.Series(), c.Series()
                for _ in range(times):
                    made += 1
                    url = url_for(made)
                    values = measure(url, n, words)
                    if store == "postgres" and pg is not None:
                        pg.drop(url)
                    for series, value in zip((p50, p95, p99), quantiles(values), strict=True):
                        series.add(value)
                for name, series in (("p50", p50), ("p95", p95), ("p99", p99)):
                    metric = f"{store}, {n} stream{'s' * (n > 1)}, {name} ms"
                    table.add("tenure", metric, series, fmt=",.1f")
    c.emit(table, preamble=f"machine: {c.machine()}")


if __name__ == "__main__":
    main()
