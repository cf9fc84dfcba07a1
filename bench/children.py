"""Child runs (SPEC §21): a parent fanning out to N children against the same N runs flat,
and how soon a parent is claimed once its last child has settled.

    python bench/children.py [--size 1000] [--concurrency 50] [--trials 30] [--repeat 3]
                             [--quick] [--postgres URL] [--no-postgres] [--no-sqlite]
                             [--against DIR]

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

Each drain runs in a fresh child process, which reports its wall time and CPU time: its own
(the worker, every thread) and, when the database is PostgreSQL on this machine, its
server's (every process of the cluster, read from /proc). `--against DIR` (repeatable)
drains another checkout of tenure (its `src/`) too, alternating with this one, flat and tree
in turn, so that the machine's drift falls on all of them alike; its rows are shown beside
this one's.

Without --postgres a private cluster is started (as the other scripts do) and removed;
with it, each measurement gets a fresh database on that server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

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


def drain(url: str, requests: list[RunRequest], concurrency: int) -> dict[str, float]:
    """Wall and CPU seconds from the enqueue to the last run's end."""
    rt = app(url)
    try:
        rt.store  # noqa: B018 -- the schema, before timing
        server = _common.cluster_cpu(url)
        start, cpu = time.perf_counter(), time.process_time()
        rt.enqueue_many(requests)
        rt.worker(concurrency=concurrency, burst=True).run()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        server_after = _common.cluster_cpu(url)
        left = [r for r in rt.runs(limit=len(requests) * 2 + 10) if not r.status.is_terminal]
        assert not left, f"{len(left)} runs not done"
        report = audit(rt.store)
        assert report.ok, report.summary()
        db = server_after - server if server is not None and server_after is not None else -1.0
        return {"wall": elapsed, "cpu": cpu, "db_cpu": db}
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


def requests_of(kind: str, size: int) -> list[RunRequest]:
    if kind == "flat":
        return [RunRequest(agent="leaf", input={"n": i}, script=SAY) for i in range(size)]
    return [RunRequest(agent="fan", input={"size": size})]


def child_main(url: str, kind: str, size: int, concurrency: int) -> None:
    """In a child process whose `sys.path` starts at the checkout being measured."""
    print(json.dumps(drain(url, requests_of(kind, size), concurrency)))


def run_child(src: Path, url: str, kind: str, args: argparse.Namespace) -> dict[str, float]:
    return _common.checkout_child(__file__, src, "--child", url, kind, args.size, args.concurrency)


def measure(
    name: str, fresh: Callable[[], str], checkouts: dict[str, Path], args: argparse.Namespace
) -> tuple[list[str], list[str]]:
    """The fan-out rows (one per checkout) and the wake-up row (this checkout's)."""
    drains: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for label, src in checkouts.items():  # alternating: the drift falls on every one
            for kind in ("flat", "tree"):
                drains.setdefault((label, kind), []).append(run_child(src, fresh(), kind, args))
    rows = []
    for label in checkouts:
        flat, tree = drains[(label, "flat")], drains[(label, "tree")]
        system = name if label == "this" else f"{name} ({label})"
        rows.append(
            f"| {system} | {_med(flat, 'wall'):.2f} s | {_med(tree, 'wall'):.2f} s "
            f"| {_med(tree, 'wall') / _med(flat, 'wall'):.2f}x "
            f"| {_cpu(flat)} | {_cpu(tree)} | {_cpu_ratio(flat, tree)} |"
        )
    same = wake_latencies(fresh(), args.trials, elsewhere=False)
    other = wake_latencies(fresh(), args.trials, elsewhere=True)
    wake = [
        f"| {name} | {statistics.median(same):.1f} / {p95(same):.1f} ms "
        f"| {statistics.median(other):.1f} / {p95(other):.1f} ms |"
    ]
    return rows, wake


def _med(drains: list[dict[str, float]], key: str) -> float:
    return statistics.median(d[key] for d in drains)


def _cpu(drains: list[dict[str, float]]) -> str:
    """Worker CPU + database CPU (the database's only when it could be read)."""
    if _med(drains, "db_cpu") < 0:
        return f"{_med(drains, 'cpu'):.2f} s"
    return f"{_med(drains, 'cpu'):.2f} + {_med(drains, 'db_cpu'):.2f} s"


def _cpu_ratio(flat: list[dict[str, float]], tree: list[dict[str, float]]) -> str:
    def total(drains: list[dict[str, float]]) -> float:
        return _med(drains, "cpu") + max(_med(drains, "db_cpu"), 0.0)

    return f"{total(tree) / total(flat):.2f}x"


def main() -> None:
    parser = _common.parser(__doc__.splitlines()[0], default_size=1000, quick_size=50)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--trials", type=int, default=30, help="wake-ups per store")
    _common.add_against(parser)
    args = parser.parse_args()
    args.size, args.repeat = _common.size_and_repeat(args)
    if args.quick:
        args.trials = min(args.trials, 5)
    checkouts = _common.checkouts(args)
    rows = [
        "| system | N flat | 1 parent + N children | ratio | CPU flat (worker + database) "
        "| CPU tree | CPU ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    wakes = [
        "| system | wake, same worker p50 / p95 | wake, child settled elsewhere p50 / p95 |",
        "|---|---|---|",
    ]
    if not args.no_sqlite:
        with _common.scratch_dir() as tmp:
            count = iter(range(1_000_000))
            fan, wake = measure(
                "tenure/SQLite", lambda: f"sqlite:///{tmp}/b{next(count)}.db", checkouts, args
            )
            rows += fan
            wakes += wake
    with _common.maybe_postgres(args) as pg:
        if pg is not None:
            fan, wake = measure("tenure/PostgreSQL", lambda: pg.fresh("children"), checkouts, args)
            rows += fan
            wakes += wake
    print(_common.machine())
    print(
        f"N = {args.size}, concurrency {args.concurrency}, {args.trials} wake-ups each, "
        f"median of {args.repeat} drains\n"
    )
    print("\n".join(rows))
    print()
    print("\n".join(wakes))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
