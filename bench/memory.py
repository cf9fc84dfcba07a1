"""memory: peak resident memory of one worker process, and its growth over a long drain.

    python bench/memory.py [--size 100000] [--repeat 3] [--quick]

Peak RSS (`ru_maxrss`) of a worker process that drains 3,000 trivial runs at concurrency 1
and 8 (SQLite). Then one worker at concurrency 8 drains SIZE runs; its RSS is read when the
SIZE/10-th run has completed and again at the end. Targets: under 150 MB at concurrency 8,
and no more than 10 % growth from the SIZE/10-th to the SIZE-th run.
"""

from __future__ import annotations

import itertools

import _common as c
from _child import tenure_runtime, trivial

PEAK_RUNS = 3000
ENQUEUE_BATCH = 5000


def enqueue(url: str, n: int) -> None:
    with tenure_runtime(url) as rt:
        for start in range(0, n, ENQUEUE_BATCH):
            rt.enqueue_many([trivial() for _ in range(min(ENQUEUE_BATCH, n - start))])


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=100_000, quick_size=200).parse_args()
    size, times = c.size_and_repeat(args)
    peak_runs = min(PEAK_RUNS, size)
    mark = size // 10
    table = c.Table("memory: one worker process, SQLite")
    counter = itertools.count()
    with c.scratch_dir() as tmp:

        def url() -> str:
            return f"sqlite:///{tmp}/m{next(counter)}.db"

        for conc in (1, 8):
            peak = c.Series()
            for _ in range(times):
                u = url()
                enqueue(u, peak_runs)
                peak.add(c.child("drain", "tenure", u, peak_runs, conc)["peak_rss_mb"])
            table.add("tenure", f"peak RSS MB, c={conc}", peak, fmt=".1f", note=f"{peak_runs} runs")
        at_mark, at_end, growth = c.Series(), c.Series(), c.Series()
        for _ in range(times):
            u = url()
            enqueue(u, size)
            got = c.child("longdrain", u, size, 8, mark)
            at_mark.add(got["rss_mark_mb"])
            at_end.add(got["rss_end_mb"])
            growth.add((got["rss_end_mb"] / got["rss_mark_mb"] - 1) * 100)
        table.add("tenure", f"RSS MB at run {mark:,}", at_mark, fmt=".1f", note="c=8")
        table.add("tenure", f"RSS MB at run {size:,}", at_end, fmt=".1f", note="c=8")
        table.add("tenure", f"growth % {mark:,} → {size:,}", growth, fmt="+.1f")
    c.emit(table, preamble=c.machine())


if __name__ == "__main__":
    main()
