"""limit: the machine's commit rate, and tenure's drain rate as a fraction of what it allows.

    python bench/limit.py [--size N] [--repeat 3] [--quick] [--postgres URL]

In one invocation: the rate of one-statement UPDATE commits on a scratch table (SQLite: one
writer, WAL, synchronous=NORMAL, tenure's settings; PostgreSQL: 1 and 8 clients), then
tenure draining N trivial runs in a worker process at concurrency 1 and 8, counting its write
transactions. The ceiling is commit rate ÷ commits per run; the fraction is the drain rate
over that ceiling (1.0 would mean tenure adds nothing but its commits).
"""

from __future__ import annotations

import itertools

import _common as c

from tenure import Runtime
from tenure.store import _bench

PROBE_SECONDS = 2.0
QUICK_PROBE_SECONDS = 0.2


def probe(url: str, clients: int, times: int, seconds: float) -> c.Series:
    with Runtime(url) as rt:
        return c.repeat(times, lambda: _bench.commit_rate(rt.store, seconds, clients))  # type: ignore[arg-type]


def drain(url_for: c.Callable[[], str], n: int, conc: int, times: int) -> tuple[c.Series, float]:
    rates, commits = c.Series(), c.Series()
    for _ in range(times):
        url = url_for()
        c.child("enqueue", "tenure", url, n)
        d = c.child("drain", "tenure", url, n, conc)
        rates.add(n / d["seconds"])
        commits.add(d["commits"] / n)
    return rates, commits.median


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=3000, quick_size=40).parse_args()
    n, times = c.size_and_repeat(args)
    seconds = QUICK_PROBE_SECONDS if args.quick else PROBE_SECONDS
    table = c.Table(f"limit: commits/s and tenure's drain of {n} runs against them")
    counter = itertools.count()
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        stores: list[tuple[str, c.Callable[[], str], tuple[int, ...]]] = [
            ("SQLite", lambda: f"sqlite:///{tmp}/l{next(counter)}.db", (1,))
        ]
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("limit"), (1, 8)))
        for name, url_for, clients in stores:
            rate = {k: probe(url_for(), k, times, seconds) for k in clients}
            for k, series in rate.items():
                table.add(name, f"commits/s, {k} client{'s' * (k > 1)}", series)
            for conc in (1, 8):
                runs, per_run = drain(url_for, n, conc, times)
                ceiling = rate[max(k for k in clients if k <= conc)].median / per_run
                table.add(
                    f"tenure/{name}",
                    f"runs/s c={conc}",
                    runs,
                    note=f"{per_run:.2f} commits/run; ceiling {ceiling:,.0f}/s; "
                    f"fraction {runs.median / ceiling:.2f}",
                )
    c.emit(table, preamble=c.machine())


if __name__ == "__main__":
    main()
