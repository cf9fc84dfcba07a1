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

The second table is the lease keeper's (SPEC §15): one run whose model call takes 1 s, 60 s
or 300 s (`OpenAICompatible` against the fake service of tests/fakes/openai_service.py, one
service process per step length, a fixed latency), two workers at concurrency 1
(`_child.py modelwork`, SQLite, a database each); the worker that claims it is SIGKILLed
halfway through the call. Shown: seconds from the kill to the re-claim by the other worker
(its `claimed` event) and to the run's completion (the re-claimed run makes the whole call
again), for

- "before the keeper": the keeper closed, so leases are renewed only at step boundaries, as
  they were before it existed; the lease is then the one that step needs, the step plus the
  keeper's lease as a margin (6 s, 65 s, 305 s), with its reap interval (a quarter of it);
- "keeper": lease 5 s, whatever the step length (reap interval 1.25 s).

A control run per step length (keeper, lease 5 s, nobody killed) must end with 0 requeues:
the keeper holds the lease of a live worker's minutes-long call. The target for the keeper is
a re-claim within lease + reap interval + 1 s. Every trial runs at the same time as the others
(a database, two workers each), so the table takes about as long as its slowest trial.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import _common as c
from _child import tenure_runtime
from tests.fakes._app import Latency
from tests.fakes.openai_service import ServiceProcess

from tenure import EventKind, RunRequest, RunStatus
from tenure.providers import Scripted

LEASE_SECONDS = 2.0
REAP_SECONDS = LEASE_SECONDS / 4
PEER_WAIT_SECONDS = 15.0
QUICK_PEER_WAIT_SECONDS = 2.0
KEEPER_STEPS = (1.0, 60.0, 300.0)
KEEPER_LEASE = 5.0
QUICK_KEEPER_STEPS = (2.0, 3.0)
QUICK_KEEPER_LEASE = 2.0


@contextlib.contextmanager
def worker(
    *argv: object, marker: str = "", command: str = "work"
) -> Iterator[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(c.ROOT), *sys.path]),
        "BENCH_MARKER": marker,
    }
    proc = subprocess.Popen(
        [sys.executable, str(c.CHILD), command, *map(str, argv)],
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


@dataclass(frozen=True)
class Trial:
    step: float
    keeper: bool
    kill: bool
    keeper_lease: float

    @property
    def lease(self) -> float:
        # Before the keeper, a lease had to outlast the step: the step plus the same margin.
        return self.keeper_lease if self.keeper else self.step + self.keeper_lease


@dataclass(frozen=True)
class TrialResult:
    reclaimed: float  # seconds from the kill to the other worker's claim (nan: no kill)
    completed: float  # seconds from the kill (or the claim) to completion
    requeues: int


def keeper_trial(trial: Trial, url: str, base_url: str, started: threading.Barrier) -> TrialResult:
    with tenure_runtime(url) as rt, contextlib.ExitStack() as stack:
        rt.add_model("fake", Scripted())  # a stand-in: this process only enqueues and reads
        rt.store  # noqa: B018 -- the schema exists before the workers start
        keeper = "on" if trial.keeper else "off"
        workers = [
            stack.enter_context(worker(url, base_url, trial.lease, keeper, command="modelwork"))
            for _ in "ab"
        ]
        # Dozens of workers starting load both cores: no run starts before they all have.
        started.wait()
        run_id = rt.enqueue(RunRequest(prompt="x", model="fake"))

        def claimed() -> bool:
            run = rt.status(run_id)
            return run is not None and run.started_at is not None

        if not wait_for(claimed, 60, step=0.01):
            raise RuntimeError(f"{trial}: no worker claimed the run")
        claim = next(e for e in rt.events(run_id) if e.kind is EventKind.CLAIMED)
        start = claim.created_at.timestamp()
        if trial.kill:
            # The model call starts as soon as the claim is recorded: halfway is step / 2.
            time.sleep(max(0.0, start + trial.step / 2 - time.time()))
            owner = next(w for w in workers if f":{w.pid}:" in claim.payload["worker"])
            os.kill(owner.pid, signal.SIGKILL)
            start = time.time()
            if any(e.kind is EventKind.LLM for e in rt.events(run_id)):
                raise RuntimeError(f"{trial}: the step ended before the kill")

        def completed() -> bool:
            run = rt.status(run_id)
            return run is not None and run.status is RunStatus.COMPLETED

        if not wait_for(completed, 3 * trial.step + 2 * trial.lease + 120, step=0.25):
            raise RuntimeError(f"{trial}: the run was not completed")
        run = rt.status(run_id)
        assert run is not None and run.finished_at is not None
        events = rt.events(run_id)
    claims = [e.created_at.timestamp() for e in events if e.kind is EventKind.CLAIMED]
    return TrialResult(
        reclaimed=claims[1] - start if trial.kill and len(claims) > 1 else float("nan"),
        completed=run.finished_at.timestamp() - start,
        requeues=sum(e.kind is EventKind.REQUEUED for e in events),
    )


def keeper_table(tmp: Path, quick: bool, times: int) -> c.Table:
    steps = QUICK_KEEPER_STEPS if quick else KEEPER_STEPS
    lease = QUICK_KEEPER_LEASE if quick else KEEPER_LEASE
    target = lease + lease / 4 + 1
    trials = [
        Trial(step, keeper, True, lease)
        for step in steps
        for keeper in (False, True)
        for _ in range(times)
    ] + [Trial(step, True, False, lease) for step in steps]
    counter = itertools.count()
    with contextlib.ExitStack() as stack:
        services = {
            step: stack.enter_context(ServiceProcess(latency=Latency.fixed(step))) for step in steps
        }
        started = threading.Barrier(len(trials))
        with ThreadPoolExecutor(len(trials)) as pool:
            futures = [
                pool.submit(
                    keeper_trial,
                    t,
                    f"sqlite:///{tmp}/k{next(counter)}.db",
                    services[t.step].url,
                    started,
                )
                for t in trials
            ]
            outcomes = [f.result() for f in futures]
    table = c.Table(
        f"recovery with the lease keeper: seconds from SIGKILL halfway through a model call "
        f"(SQLite; keeper lease {lease:g}s, target ≤ {target:g}s to re-claim)"
    )
    for step in steps:
        for keeper in (False, True):
            mine = [
                o
                for t, o in zip(trials, outcomes, strict=True)
                if t.step == step and t.keeper == keeper and t.kill
            ]
            who = f"lease {lease:g}s" if keeper else f"lease {step + lease:g}s, no keeper"
            system = f"tenure/{'keeper' if keeper else 'before the keeper'} ({who})"
            reclaim, done = c.Series(), c.Series()
            for o in mine:
                reclaim.add(o.reclaimed)
                done.add(o.completed)
            met = "" if not keeper else ("met" if reclaim.median <= target else "MISSED")
            table.add(system, f"step {step:g}s: kill → re-claimed", reclaim, fmt=".2f", note=met)
            table.add(system, f"step {step:g}s: kill → completed", done, fmt=".2f")
        control = [
            o for t, o in zip(trials, outcomes, strict=True) if t.step == step and not t.kill
        ]
        requeues = c.Series()
        for o in control:
            requeues.add(o.requeues)
        table.add(
            f"tenure/keeper (lease {lease:g}s)",
            f"step {step:g}s, no kill: requeues",
            requeues,
            fmt=".0f",
            note="target 0: a live worker keeps its run",
        )
    return table


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
        keeper = keeper_table(tmp, args.quick, times)
    c.emit(table, keeper, preamble=c.machine())


if __name__ == "__main__":
    main()
