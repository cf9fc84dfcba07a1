"""growth: claim latency and drain rate as history piles up, and behind a backlog.

    python bench/growth.py [--size 1000000] [--repeat 3] [--quick] [--postgres URL]

Scenarios, each on its own database: 0, SIZE/10 and SIZE finished runs in the table (each
with the four events of a one-step run, inserted in bulk by a store helper), and a backlog of
SIZE/10 queued runs, and the same backlog with a concurrency key per run (SIZE/10 keys,
SPEC §22: the claim's fair order and its check of keys). After the fill comes the
background maintenance a table that size would have had: a WAL checkpoint (SQLite), VACUUM
ANALYZE and a CHECKPOINT (PostgreSQL). All are
filled first; each repetition then measures every scenario in turn, so the machine's noise
falls on all of them alike: the latency of `claim` of one run (p50 and p99 over CLAIMS
claims, in this process), then the drain rate of DRAIN more trivial runs by a worker process
at concurrency 8 (behind the backlog: the first DRAIN runs of it). The ratio column compares
with the empty table; the keyed backlog's claim also with the backlog without keys.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import _common as c
from _child import tenure_runtime, trivial

from tenure.store import _bench

Measures = tuple[c.Series, c.Series, c.Series]  # claim p50, claim p99, drain rate

CLAIMS = 2000
DRAIN = 3000
ENQUEUE_BATCH = 5000


def fill(url: str, finished: int, backlog: int, keyed: bool = False) -> None:
    with tenure_runtime(url) as rt:
        _bench.seed_finished(rt.store, finished)  # type: ignore[arg-type]
        for start in range(0, backlog, ENQUEUE_BATCH):
            batch = [trivial() for _ in range(min(ENQUEUE_BATCH, backlog - start))]
            if keyed:
                batch = [
                    dataclasses.replace(r, concurrency_key=f"tenant-{start + i}")
                    for i, r in enumerate(batch)
                ]
            rt.enqueue_many(batch)
        _bench.quiesce(rt.store)  # type: ignore[arg-type]


def claim_latencies(url: str, claims: int, enqueue: bool) -> list[float]:
    with tenure_runtime(url) as rt:
        if enqueue:
            rt.enqueue_many([trivial() for _ in range(claims)])
        store = rt.store
        out = []
        for _ in range(claims):
            began = time.perf_counter()
            got = store.claim("worker:bench:0:1", None, 900.0, 1)
            out.append((time.perf_counter() - began) * 1000)
            assert len(got) == 1
        return out


def measure(url: str, backlog: int, claims: int, drain_n: int, into: Measures) -> None:
    """One repetition on a filled database: claim latencies, then a drain."""
    lat = claim_latencies(url, claims, enqueue=backlog == 0)
    into[0].add(c.pick(lat, 0.5))
    into[1].add(c.pick(lat, 0.99))
    if backlog == 0:
        c.child("enqueue", "tenure", url, drain_n)
    d = c.child("drain_some", "tenure", url, drain_n, 8)
    into[2].add(drain_n / d["seconds"])


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=1_000_000, quick_size=1000).parse_args()
    size, times = c.size_and_repeat(args)
    claims = min(CLAIMS, max(10, size // 40))
    drain_n = min(DRAIN, max(10, size // 40))
    # Each repetition claims and drains from the backlog: it must last every repetition.
    if (claims + drain_n) * times > size // 10:
        raise SystemExit(
            f"growth: a backlog of {size // 10:,} runs is too small for {times} repetitions "
            f"of {claims + drain_n:,} claims and runs; use a larger --size"
        )
    scenarios = [
        ("0 finished", 0, 0),
        (f"{size // 10:,} finished", size // 10, 0),
        (f"{size:,} finished", size, 0),
        (f"{size // 10:,} queued", 0, size // 10),
        (f"{size // 10:,} queued, {size // 10:,} keys", 0, size // 10),
    ]
    keyed = len(scenarios) - 1
    tables = []
    counter = itertools.count()
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        stores: list[tuple[str, c.Callable[[], str]]] = []
        if not args.no_sqlite:
            stores.append(("SQLite", lambda: f"sqlite:///{tmp}/g{next(counter)}.db"))
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("growth")))
        for name, url_for in stores:
            table = c.Table(
                f"growth on {name}: claim latency (ms, {claims} claims) and drain "
                f"(runs/s, {drain_n} runs, c=8)"
            )
            # Every scenario is filled first, then measured in turn in each repetition: the
            # machine's noise (other load, reclaim) falls on all of them alike.
            urls = []
            for i, (label, finished, backlog) in enumerate(scenarios):
                began = time.perf_counter()
                urls.append(url_for())
                fill(urls[-1], finished, backlog, keyed=i == keyed)
                print(f"{name}: {label} filled in {time.perf_counter() - began:.0f}s")
            measures = [(c.Series(), c.Series(), c.Series()) for _ in scenarios]
            for _ in range(times):
                for url, (_, _, backlog), into in zip(urls, scenarios, measures, strict=True):
                    measure(url, backlog, claims, drain_n, into)
            base = measures[0]
            unkeyed = measures[keyed - 1]
            for i, ((label, _, _), (p50, p99, rate)) in enumerate(
                zip(scenarios, measures, strict=True)
            ):
                against = (
                    f"; {p50.median / unkeyed[0].median:.2f}x of no keys" if i == keyed else ""
                )
                table.add(
                    label,
                    "claim p50 ms",
                    p50,
                    fmt=".3f",
                    note=f"{p50.median / base[0].median:.2f}x of empty{against}",
                )
                table.add(
                    label,
                    "claim p99 ms",
                    p99,
                    fmt=".3f",
                    note=f"{p99.median / base[1].median:.2f}x of empty",
                )
                table.add(
                    label,
                    "drain runs/s",
                    rate,
                    note=f"{rate.median / base[2].median:.2f}x of empty",
                )
            tables.append(table)
    c.emit(*tables, preamble=c.machine())


if __name__ == "__main__":
    main()
