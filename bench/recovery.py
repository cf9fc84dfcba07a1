"""recovery: a worker SIGKILLed mid-run; how long until another worker completes the run.

    python bench/recovery.py [--repeat 3] [--quick] [--postgres URL] [--no-peers]

tenure (lease 2 s, reap interval 0.5 s, a quarter of the lease): one run whose read-only tool
sleeps on the run's first attempt. Two workers idle; the one that claims it is SIGKILLed as
soon as its model step is recorded (the lease was just renewed: the slow case); the time is
from the kill until the run's `finished_at`.
The target is lease + reap interval + 1 s.

Each peer gets the same kill: a job that sleeps the first time it runs, worker A killed while
it sleeps, worker B running meanwhile (DBOS: B is started after the kill, as a restart,
because DBOS recovers a dead executor's workflows when an executor with its id launches; a
second one launched before the kill would re-run the workflow while A still runs it). The
row says what happened within the wait.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import _common as c
from _child import tenure_runtime

from tenure import RunRequest, RunStatus

LEASE_SECONDS = 2.0
REAP_SECONDS = LEASE_SECONDS / 4
PEER_WAIT_SECONDS = 15.0
QUICK_PEER_WAIT_SECONDS = 2.0


@contextlib.contextmanager
def worker(*argv: object, marker: str = "") -> Iterator[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(c.ROOT), *sys.path]),
        "BENCH_MARKER": marker,
    }
    proc = subprocess.Popen(
        [sys.executable, str(c.CHILD), "work", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("{") or not json.loads(line).get("ready"):
            raise RuntimeError(f"worker {argv} did not start")
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def wait_for(predicate: c.Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def tenure_once(url: str) -> float:
    """Two idle workers; the one that claims the run is killed just after its step boundary
    (its lease is then nearly whole: the slow case)."""
    with tenure_runtime(url) as rt, contextlib.ExitStack() as stack:
        rt.store  # noqa: B018 -- the schema exists before the workers start
        workers = [stack.enter_context(worker("tenure", url, 1, LEASE_SECONDS)) for _ in "ab"]
        run_id = rt.enqueue(
            RunRequest(
                prompt="x",
                model="scripted",
                tools=["slow"],
                script=[{"call": [{"tool": "slow"}]}, {"say": "done"}],
            )
        )

        def in_tool() -> bool:
            return any(e.kind == "llm" for e in rt.events(run_id))

        if not wait_for(in_tool, 30, step=0.001):
            raise RuntimeError("no worker reached the tool")
        run = rt.status(run_id)
        assert run is not None
        owner = next(w for w in workers if f":{w.pid}:" in run.claimed_by)
        killed = time.time()
        os.kill(owner.pid, signal.SIGKILL)

        def finished() -> bool:
            run = rt.status(run_id)
            return run is not None and run.status is RunStatus.COMPLETED

        if not wait_for(finished, 60):
            raise RuntimeError("the run was not completed after the kill")
        run = rt.status(run_id)
        assert run is not None and run.finished_at is not None
        return run.finished_at.timestamp() - killed


def peer_once(peer: str, url: str, tmp: Path, wait: float) -> str:
    marker = str(tmp / f"{peer}-{time.monotonic_ns()}.marker")
    os.environ["BENCH_MARKER"] = marker
    c.child("enqueue_slow", peer, url)
    with worker(peer, url, 1, LEASE_SECONDS, marker=marker) as a:
        if not wait_for(lambda: os.path.exists(marker), 60):
            return "the job never started"
        if peer == "dbos":
            killed = time.time()
            os.kill(a.pid, signal.SIGKILL)
            a.wait()
            with worker(peer, url, 1, LEASE_SECONDS, marker=marker):
                done = wait_for(lambda: os.path.exists(marker + ".done"), wait)
                seconds = time.time() - killed
        else:
            with worker(peer, url, 1, LEASE_SECONDS, marker=marker):
                time.sleep(0.1)
                killed = time.time()
                os.kill(a.pid, signal.SIGKILL)
                done = wait_for(lambda: os.path.exists(marker + ".done"), wait)
                seconds = time.time() - killed
    if done:
        return f"completed {seconds:.1f}s after the kill (by the restarted executor)"
    return f"not completed {wait:.0f}s after the kill (another worker was running)"


PEER_BEHAVIOUR = {
    "huey": "the job was dequeued (deleted) at start: lost, nobody runs it again",
    "procrastinate": "the job stays `doing` until user code calls retry_stalled_jobs",
    "dbos": "an executor restarted with the same id recovers its pending workflows",
}


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=1, quick_size=1).parse_args()
    _, times = c.size_and_repeat(args)
    wait = QUICK_PEER_WAIT_SECONDS if args.quick else PEER_WAIT_SECONDS
    target = LEASE_SECONDS + REAP_SECONDS + 1
    table = c.Table(
        f"recovery: seconds from SIGKILL to completion (lease {LEASE_SECONDS:g}s, "
        f"target ≤ {target:g}s)"
    )
    counter = itertools.count()
    with c.scratch_dir() as tmp:
        series = c.repeat(times, lambda: tenure_once(f"sqlite:///{tmp}/r{next(counter)}.db"))
        table.add("tenure/SQLite", "kill → completed, s", series, fmt=".2f")
        if not args.no_peers:
            for peer, store in (("huey", "SQLite"), ("dbos", "SQLite")):
                if not c.installed(peer):
                    table.missing(f"{peer}/{store}", "kill → completed")
                    continue
                what = peer_once(peer, f"sqlite:///{tmp}/{peer}{next(counter)}.db", tmp, wait)
                table.missing(f"{peer}/{store}", PEER_BEHAVIOUR[peer], what)
        with c.maybe_postgres(args) as pg:
            if pg is not None:
                series = c.repeat(times, lambda: tenure_once(pg.fresh("recovery")))
                table.add("tenure/PostgreSQL", "kill → completed, s", series, fmt=".2f")
                for peer in ("procrastinate", "dbos"):
                    if args.no_peers:
                        break
                    if not c.installed(peer):
                        table.missing(f"{peer}/PostgreSQL", "kill → completed")
                        continue
                    what = peer_once(peer, pg.fresh("recovery"), tmp, wait)
                    table.missing(f"{peer}/PostgreSQL", PEER_BEHAVIOUR[peer], what)
    c.emit(table, preamble=c.machine())


if __name__ == "__main__":
    main()
