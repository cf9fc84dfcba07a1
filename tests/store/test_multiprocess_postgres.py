"""Three worker processes, standing in for three hosts, drain one PostgreSQL queue.

The audit reads only the event log: every run completed exactly once, each claim of a run
carries a larger lease token than the one before, and every tool step was written under
the token of the claim that was current when it was written (a segment that had lost its
run could have written nothing).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
RUNS = 300
pytestmark = pytest.mark.slow

# A worker process: a `stamp` tool that reports the fencing token it ran under, then work
# the queue in burst mode once told to start, then print what it did.
WORKER = """
import json, sys
import tenure

rt = tenure.Runtime(sys.argv[1], lease_seconds=10)

@rt.tool(effect=tenure.ToolEffect.IDEMPOTENT_WRITE)
def stamp(ctx: tenure.ToolContext) -> dict:
    \"\"\"Report the lease this step runs under.\"\"\"
    return {"token": ctx.fencing_token, "run": ctx.run_id}

rt.status("warm-up")  # opens and migrates the store before the start line
print("ready", flush=True)
sys.stdin.readline()
worker = rt.worker(concurrency=4, burst=True, poll_interval=0.2)
stats = worker.run()
rt.close()
print(json.dumps({"identity": worker.identity, "claimed": stats.claimed}), flush=True)
"""


def stamp(ctx: tenure.ToolContext) -> dict[str, object]:
    """Report the lease this step runs under (the enqueuing side only checks the name)."""
    return {"token": ctx.fencing_token, "run": ctx.run_id}


def requests() -> list[RunRequest]:
    with_tool = [{"call": [{"tool": "stamp"}]}, {"say": "ok"}]
    return [
        RunRequest(
            prompt=f"run {i}",
            model="scripted",
            tools=["stamp"] if i % 2 else [],
            script=with_tool if i % 2 else [{"say": "ok"}],
        )
        for i in range(RUNS)
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


def test_three_worker_processes_drain_one_queue_without_sharing_a_run(pg_url: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, pg_url],
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
        with tenure.Runtime(pg_url) as rt:
            rt.tool(effect=tenure.ToolEffect.IDEMPOTENT_WRITE)(stamp)
            ids = rt.enqueue_many(requests())
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            reports = []
            for p in procs:
                out, _ = p.communicate(timeout=240)
                assert p.returncode == 0
                reports.append(json.loads(out.strip().splitlines()[-1]))
            finishers = Counter(audit(rt, run_id) for run_id in ids)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert sum(r["claimed"] for r in reports) >= RUNS
    assert all(r["claimed"] > 0 for r in reports), reports  # all three took part
    assert set(finishers) <= {r["identity"] for r in reports}
    assert sum(finishers.values()) == RUNS
