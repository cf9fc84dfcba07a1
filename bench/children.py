"""Child runs (SPEC §21): a parent fanning out to N children against the same N runs flat,
and how soon a parent is claimed once its last child has settled.

    python bench/children.py [--size 1000] [--concurrency 50] [--trials 30] [--repeat 3]
                             [--quick] [--postgres URL] [--no-postgres] [--no-sqlite]

Fan-out: one worker (a thread pool in this process) at concurrency 50 drains, on a fresh
database each time, (a) N runs of one scripted model call each, enqueued together, and (b)
one parent agent function that creates the same N runs as children with `ctx.map` and waits
for all of them with `ctx.gather`. Time from the enqueue to the last run's (the parent's)
completion; the audit must be clean.

Wake-up: a parent waits for one child; the latency is the parent's claim (its `claimed`
event) minus the child's `finished_at`, both from the database's clock. "same worker": the
worker that ran the child settles it and claims the woken parent; "elsewhere": the child is
run by another process's segment (a queue the worker does not serve) while the worker is
idle, so the worker learns of the parent by NOTIFY (PostgreSQL) or by its poll (SQLite).

Without --postgres a private cluster is started (as the other scripts do) and removed;
with it, each measurement gets a fresh database on that server.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable

import _common

import tenure
from tenure import EventKind, RunRequest, RunStatus
from tenure.audit import audit

SAY = [{"say": "ok"}]


def app(url: str) -> tenure.Runtime:
    rt = tenure.Runtime(url)
    rt.add_model("default", tenure.providers.Scripted())

    @rt.agent
    def leaf(ctx: tenure.AgentContext, n: int) -> int:
        """One model call."""
        ctx.model(f"item {n}")
        return n

    @rt.agent
    def fan(ctx: tenure.AgentContext, size: int) -> int:
        """N children of one model call each, gathered."""
        return sum(ctx.gather(*ctx.map("leaf", [{"n": i} for i in range(size)], script=SAY)))

    @rt.agent
    def one(ctx: tenure.AgentContext, queue: str) -> int:
        """Wait for one child."""
        return int(ctx.wait(ctx.child(agent="leaf", input={"n": 1}, queue=queue, script=SAY)))

    return rt


def drain(url: str, requests: list[RunRequest], concurrency: int) -> float:
    rt = app(url)
    try:
        start = time.perf_counter()
        rt.enqueue_many(requests)
        rt.worker(concurrency=concurrency, burst=True).run()
        elapsed = time.perf_counter() - start
        left = [r for r in rt.runs(limit=len(requests) * 2 + 10) if not r.status.is_terminal]
        assert not left, f"{len(left)} runs not done"
        report = audit(rt.store)
        assert report.ok, report.summary()
        return elapsed
    finally:
        rt.close()


def wake_latencies(url: str, trials: int, elsewhere: bool) -> list[float]:
    """Milliseconds from a child's finished_at to its parent's next claim."""
    rt = app(url)
    worker = rt.worker(concurrency=2, queues=["default"], poll_interval=1.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    out = []
    try:
        # The first trial is not counted: the worker's listener may not be listening yet.
        for trial in range(trials + 1):
            parent = rt.enqueue(
                RunRequest(agent="one", input={"queue": "other" if elsewhere else "default"})
            )
            if elsewhere:
                _until(lambda p=parent: _status(rt, p) is RunStatus.WAITING_FOR_CHILDREN)
                (child,) = rt.runs(parent=parent)
                rt.run_queued(child.id)  # this process, not the worker
            _until(lambda p=parent: _ended(rt, p))
            ended = rt.status(parent)
            assert ended is not None and ended.status is RunStatus.COMPLETED, ended
            (child,) = rt.runs(parent=parent)
            settled = rt.status(child.id)
            assert settled is not None and settled.finished_at is not None
            events = rt.events(parent)
            waited = [e.sequence for e in events if e.kind is EventKind.WAITING]
            if not waited:
                continue  # the child ended before the parent asked: it never waited
            (claim,) = [
                e for e in events if e.kind is EventKind.CLAIMED and e.sequence > waited[-1]
            ]
            if trial:
                out.append((claim.created_at - settled.finished_at).total_seconds() * 1000)
    finally:
        worker.stop()
        thread.join(30)
        rt.close()
    return out


def _status(rt: tenure.Runtime, run_id: str) -> RunStatus | None:
    run = rt.status(run_id)
    return run.status if run is not None else None


def _ended(rt: tenure.Runtime, run_id: str) -> bool:
    run = rt.status(run_id)
    return run is not None and run.status.is_terminal


def _until(done: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached in {timeout} s")
        time.sleep(0.002)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def measure(name: str, fresh: Callable[[], str], args: argparse.Namespace) -> list[str]:
    size, c = args.size, args.concurrency
    flat = [RunRequest(agent="leaf", input={"n": i}, script=SAY) for i in range(size)]
    tree = [RunRequest(agent="fan", input={"size": size})]
    flat_s = statistics.median(drain(fresh(), flat, c) for _ in range(args.repeat))
    tree_s = statistics.median(drain(fresh(), tree, c) for _ in range(args.repeat))
    same = wake_latencies(fresh(), args.trials, elsewhere=False)
    other = wake_latencies(fresh(), args.trials, elsewhere=True)
    return [
        f"| {name} | {flat_s:.2f} s | {tree_s:.2f} s | {tree_s / flat_s:.2f}x "
        f"| {statistics.median(same):.1f} / {p95(same):.1f} ms "
        f"| {statistics.median(other):.1f} / {p95(other):.1f} ms |"
    ]


def main() -> None:
    parser = _common.parser(__doc__.splitlines()[0], default_size=1000, quick_size=50)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--trials", type=int, default=30, help="wake-ups per store")
    args = parser.parse_args()
    args.size, args.repeat = _common.size_and_repeat(args)
    if args.quick:
        args.trials = min(args.trials, 5)
    rows = [
        "| system | N flat | 1 parent + N children | ratio | wake, same worker p50 / p95 "
        "| wake, child settled elsewhere p50 / p95 |",
        "|---|---|---|---|---|---|",
    ]
    if not args.no_sqlite:
        with _common.scratch_dir() as tmp:
            count = iter(range(1_000_000))
            rows += measure("tenure/SQLite", lambda: f"sqlite:///{tmp}/b{next(count)}.db", args)
    with _common.maybe_postgres(args) as pg:
        if pg is not None:
            rows += measure("tenure/PostgreSQL", lambda: pg.fresh("children"), args)
    print(f"N = {args.size}, concurrency {args.concurrency}, {args.trials} wake-ups each\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
