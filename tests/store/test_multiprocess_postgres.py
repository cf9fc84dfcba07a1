"""Three worker processes, standing in for three hosts, drain one PostgreSQL queue.

The audit reads only the event log: every run completed exactly once, each claim of a run
carries a larger lease token than the one before, and every tool step was written under
the token of the claim that was current when it was written (a segment that had lost its
run could have written nothing).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
RUNS = 300
pytestmark = pytest.mark.slow

# A worker process: a `stamp` tool that reports the fencing token it ran under; once told to
# start, work the queue (in burst mode, or until SIGTERM drains it), then print what it did.
WORKER = """
import json, sys
import tenure

url, lease, burst = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "burst"
rt = tenure.Runtime(url, lease_seconds=lease)

@rt.tool(effect=tenure.ToolEffect.IDEMPOTENT_WRITE)
def stamp(ctx: tenure.ToolContext) -> dict:
    \"\"\"Report the lease this step runs under.\"\"\"
    return {"token": ctx.fencing_token, "run": ctx.run_id}

rt.status("warm-up")  # opens and migrates the store before the start line
print("ready", flush=True)
sys.stdin.readline()
worker = rt.worker(concurrency=4, burst=burst, poll_interval=0.2)
stats = worker.run()
rt.close()
report = {"identity": worker.identity, "claimed": stats.claimed, "outcomes": stats.outcomes}
print(json.dumps(report), flush=True)
"""


def stamp(ctx: tenure.ToolContext) -> dict[str, object]:
    """Report the lease this step runs under (the enqueuing side only checks the name)."""
    return {"token": ctx.fencing_token, "run": ctx.run_id}


def requests(n: int, pause: float = 0.0) -> list[RunRequest]:
    """Half of the runs call `stamp`; `pause` makes each model call take that long."""
    head = [{"sleep": pause}] if pause else []
    with_tool = [*head, {"call": [{"tool": "stamp"}]}, {"say": "ok"}]
    return [
        RunRequest(
            prompt=f"run {i}",
            model="scripted",
            tools=["stamp"] if i % 2 else [],
            script=with_tool if i % 2 else [*head, {"say": "ok"}],
        )
        for i in range(n)
    ]


def audit(rt: tenure.Runtime, run_id: str) -> str:
    """The worker that claimed the run last; fails on any sign of two executions."""
    run = rt.status(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED, run
    events = rt.events(run_id)
    assert [e.sequence for e in events] == list(range(len(events)))
    kinds = Counter(e.kind for e in events)
    assert kinds[EventKind.ASSEMBLED] == 1, kinds
    current = 0
    owner = ""
    for event in events:
        if event.kind is EventKind.CLAIMED:
            assert event.payload["lease_token"] > current, "lease tokens must grow"
            current = event.payload["lease_token"]
            owner = event.payload["worker"]
        elif event.kind is EventKind.TOOL:
            assert event.payload["result"]["token"] == current, (
                "a tool step was written under a lease that was no longer current"
            )
    assert current == run.lease_token
    return owner


@contextlib.contextmanager
def workers(url: str, lease: float, mode: str) -> Iterator[list[subprocess.Popen[str]]]:
    """WORKERS worker processes, ready (store open) but not yet started; killed if left."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(lease), mode],
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


def start(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def reports(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=240)
        assert p.returncode == 0
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def app(url: str) -> tenure.Runtime:
    rt = tenure.Runtime(url)
    rt.tool(effect=tenure.ToolEffect.IDEMPOTENT_WRITE)(stamp)
    return rt


def test_three_worker_processes_drain_one_queue_without_sharing_a_run(pg_url: str) -> None:
    with workers(pg_url, lease=10, mode="burst") as procs, app(pg_url) as rt:
        ids = rt.enqueue_many(requests(RUNS))
        start(procs)
        done = reports(procs)
        finishers = Counter(audit(rt, run_id) for run_id in ids)
    assert sum(r["claimed"] for r in done) >= RUNS
    assert all(r["claimed"] > 0 for r in done), done  # all three took part
    assert set(finishers) <= {r["identity"] for r in done}
    assert sum(finishers.values()) == RUNS


PAUSED_RUNS = 90
LEASE = 2.0


def test_a_worker_paused_past_its_leases_comes_back_a_zombie_and_writes_nothing(
    pg_url: str,
) -> None:
    """SIGSTOP one worker mid-run: the others reap and finish its runs. After SIGCONT its
    segments find their leases gone: every write of theirs is refused."""
    with workers(pg_url, lease=LEASE, mode="until-stopped") as procs, app(pg_url) as rt:
        ids = rt.enqueue_many(requests(PAUSED_RUNS, pause=0.3))
        start(procs)
        victim = procs[0]

        def completed() -> int:
            return len(rt.runs(status=RunStatus.COMPLETED, limit=PAUSED_RUNS + 1))

        wait_until(lambda: completed() >= 15)
        victim.send_signal(signal.SIGSTOP)
        time.sleep(LEASE * 2.5)  # its leases expire and the others' reapers requeue them
        victim.send_signal(signal.SIGCONT)
        wait_until(lambda: completed() == PAUSED_RUNS)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        done = reports(procs)
        for run_id in ids:
            audit(rt, run_id)
        stale = sum(
            1
            for run_id in ids
            for e in rt.events(run_id)
            if e.kind is EventKind.REQUEUED and e.payload.get("cause") == "stale"
        )
    assert stale >= 1, "the paused worker held no run"
    assert done[0]["outcomes"].get("lease_lost", 0) >= 1, done[0]


def wait_until(predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)
