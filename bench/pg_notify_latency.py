"""Enqueue-to-start latency on PostgreSQL, with LISTEN/NOTIFY and with polling alone.

    python bench/pg_notify_latency.py [--database postgresql://...] [--runs 30] [--poll 1.0]

Without --database it starts a private cluster (as the test suite does) and removes it at the
end. One idle worker (a thread, its own pool and listener) waits for work; runs are enqueued
one at a time at random moments, and the latency of each is `started_at - created_at`, both
read from the database's clock. Prints one table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests._postgres, the private cluster

import tenure  # noqa: E402
from tenure import RunRequest, RunStatus  # noqa: E402

DEFAULT_RUNS = 30
DEFAULT_POLL_SECONDS = 1.0
SEED = 4


@contextmanager
def database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from tests._postgres import Cluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        sys.exit("PostgreSQL binaries not found: pass --database postgresql://...")
    cluster = Cluster(bindir)
    try:
        cluster.init()
        cluster.start()
        cluster.make_template()
        yield cluster.url(cluster.create_database())
    finally:
        cluster.destroy()


def _no_subscription(wake: Callable[[], None]) -> Callable[[], None]:
    return lambda: None


def measure(url: str, runs: int, poll: float, notify: bool) -> list[float]:
    """Latencies in milliseconds of `runs` runs enqueued one by one to an idle worker."""
    rng = random.Random(SEED)
    latencies = []
    with tenure.Runtime(url) as rt:
        if not notify:
            rt.store.subscribe = _no_subscription  # type: ignore[method-assign]
        worker = rt.worker(concurrency=2, poll_interval=poll)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        time.sleep(0.5)  # the worker is idle and, with NOTIFY, listening
        try:
            for i in range(runs):
                time.sleep(rng.uniform(0, poll))  # land anywhere in the polling cycle
                run_id = rt.enqueue(
                    RunRequest(prompt=f"bench {i}", model="scripted", script=[{"say": "ok"}])
                )
                while (run := rt.status(run_id)) is not None and run.status is RunStatus.QUEUED:
                    time.sleep(0.002)
                assert run is not None and run.started_at is not None
                latencies.append((run.started_at - run.created_at).total_seconds() * 1000)
        finally:
            worker.stop()
            thread.join(30)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", help="a PostgreSQL URL (default: a private cluster)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--poll", type=float, default=DEFAULT_POLL_SECONDS)
    args = parser.parse_args()
    with database(args.database) as url:
        results = {
            "LISTEN/NOTIFY": measure(url, args.runs, args.poll, notify=True),
            "polling only": measure(url, args.runs, args.poll, notify=False),
        }
    print(f"enqueue-to-start latency, {args.runs} runs each, worker poll interval {args.poll:g}s")
    print(f"{'mode':<15} {'median ms':>10} {'p90 ms':>10} {'max ms':>10} {'mean ms':>10}")
    for mode, values in results.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(
            f"{mode:<15} {statistics.median(values):>10.1f} {p90:>10.1f} "
            f"{max(values):>10.1f} {statistics.fmean(values):>10.1f}"
        )


if __name__ == "__main__":
    main()
