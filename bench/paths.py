"""paths: the two writes on every run's path, against the peers and the commit limit.

    python bench/paths.py [--size N] [--repeat 3] [--quick] [--postgres URL] [--no-peers]

In one invocation: N enqueues one call each (tenure and huey on SQLite, tenure and
procrastinate on PostgreSQL), PostgreSQL's 1-client commit rate (one-statement UPDATEs, as
`limit.py`), and the ms per step of runs of 50 read-only tool steps at concurrency 1 (as
`steps.py`) against one durable commit (PostgreSQL) and the same loop persisting nothing.
"""

from __future__ import annotations

import itertools

import _common as c
import steps as st

from tenure import Runtime
from tenure.store import _bench

K = 50
STEP_RUNS = 60
PROBE_SECONDS = 2.0
QUICK_PROBE_SECONDS = 0.2


def enqueue_rate(system: str, url_for: c.Callable[[], str], n: int, times: int) -> c.Series:
    return c.repeat(times, lambda: n / c.child("enqueue", system, url_for(), n)["seconds"])


def commit_ms(url: str, times: int, seconds: float) -> c.Series:
    with Runtime(url) as rt:
        return c.repeat(times, lambda: 1000 / _bench.commit_rate(rt.store, seconds, 1))  # type: ignore[arg-type]


def step_ms(url_for: c.Callable[[], str], runs: int, times: int) -> c.Series:
    per_run = runs * st.steps_per_run(K)
    return c.repeat(times, lambda: st.durable(url_for(), K, runs)[0] / per_run * 1000)


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=2000, quick_size=40).parse_args()
    n, times = c.size_and_repeat(args)
    runs = 3 if args.quick else STEP_RUNS
    seconds = QUICK_PROBE_SECONDS if args.quick else PROBE_SECONDS
    peers = not args.no_peers
    enq = c.Table(f"paths: enqueue/s, {n} jobs one call each")
    step = c.Table(f"paths: ms per read-only step, {runs} runs of {K} steps, concurrency 1")
    counter = itertools.count()
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:

        def sqlite() -> str:
            return f"sqlite:///{tmp}/p{next(counter)}.db"

        mine = enqueue_rate("tenure", sqlite, n, times)
        enq.add("tenure/SQLite", "enqueue/s", mine)
        if peers and c.installed("huey"):
            enq.add(
                "huey/SQLite", "enqueue/s", enqueue_rate("huey", sqlite, n, times), baseline=mine
            )
        base = c.repeat(times, lambda: st.in_memory(K, runs) / (runs * st.steps_per_run(K)) * 1000)
        sq = step_ms(sqlite, runs, times)
        step.add("tenure/SQLite", "ms/step", sq, fmt=".3f")
        step.add("no persistence", "ms/step", base, fmt=".3f", baseline=sq)
        if pg is None:
            c.emit(enq, step, preamble=c.machine())
            return

        def fresh() -> str:
            return pg.fresh("paths")

        mine = enqueue_rate("tenure", fresh, n, times)
        commit = commit_ms(fresh(), times, seconds)
        rate = c.Series()
        for value in commit.values:
            rate.add(1000 / value)
        enq.add("tenure/PostgreSQL", "enqueue/s", mine)
        if peers and c.installed("procrastinate"):
            peer = enqueue_rate("procrastinate", fresh, n, times)
            enq.add("procrastinate/PG", "enqueue/s", peer, baseline=mine)
        enq.add("PostgreSQL", "commits/s, 1 client", rate, baseline=mine)
        pgs = step_ms(fresh, runs, times)
        step.add("tenure/PostgreSQL", "ms/step", pgs, fmt=".3f")
        step.add("PostgreSQL", "ms per commit, 1 client", commit, fmt=".3f", baseline=pgs)
    c.emit(enq, step, preamble=c.machine())


if __name__ == "__main__":
    main()
