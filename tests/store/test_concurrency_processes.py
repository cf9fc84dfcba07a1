"""A concurrency key's limit holds across worker processes (SPEC §22): three workers, standing
in for three hosts, claim side by side from one database, and never more than the limit of
the key's runs run at once. Checked twice: by sampling the running count all along, and
afterwards from the database's own timestamps (each run ran from its `claimed` event to its
`finished_at`)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
LIMIT = 2
KEYED = 24
OTHERS = 12
pytestmark = pytest.mark.slow

WORKER = """
import sys
import tenure

rt = tenure.Runtime(sys.argv[1])
rt.status("warm-up")  # opens and migrates the store before the start line
print("ready", flush=True)
sys.stdin.readline()
rt.worker(concurrency=4, poll_interval=0.02).run()
rt.close()
"""


@contextlib.contextmanager
def workers(url: str) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()


def request(i: int, key: str | None) -> RunRequest:
    return RunRequest(
        prompt=f"run {i}",
        model="scripted",
        script=[{"sleep": 0.05}, {"say": "ok"}],
        concurrency_key=key,
    )


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = best = 0
    for _, step in edges:  # at a tie an end comes first: -1 sorts before 1
        now += step
        best = max(best, now)
    return best


def test_a_key_never_runs_more_than_its_limit_across_worker_processes(db_url: str) -> None:
    with workers(db_url) as procs, tenure.Runtime(db_url) as rt:
        rt.set_concurrency_limit("tenant-a", LIMIT)
        ids = rt.enqueue_many(
            [request(i, "tenant-a") for i in range(KEYED)]
            + [request(i, None) for i in range(OTHERS)]
        )
        samples: list[int] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                keys = {k.key: k for k in rt.concurrency_keys()}
                samples.append(keys["tenant-a"].running if "tenant-a" in keys else 0)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            deadline = time.monotonic() + 120
            while len(rt.runs(status=RunStatus.COMPLETED, limit=len(ids) + 1)) < len(ids):
                assert time.monotonic() < deadline, "the runs did not complete"
                time.sleep(0.05)
        finally:
            done.set()
            sampler.join()
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
        spans = []
        for run_id in ids[:KEYED]:
            run = rt.status(run_id)
            assert run is not None and run.finished_at is not None
            claims = [e for e in rt.events(run_id) if e.kind is EventKind.CLAIMED]
            assert len(claims) == 1  # a run waiting for its key was never claimed
            spans.append((claims[0].created_at, run.finished_at))
    assert max(samples) == LIMIT, f"sampled {len(samples)} times: {sorted(set(samples))}"
    assert most_at_once(spans) == LIMIT
