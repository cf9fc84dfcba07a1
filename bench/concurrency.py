"""concurrency: one worker process at concurrency 200, each run one model call of 2 s.

    python bench/concurrency.py [--size RUNS] [--repeat 3] [--quick] [--postgres URL]

The model is `tenure.providers.OpenAICompatible` against the fake OpenAI-compatible service
of the test suite (tests/fakes/openai_service.py), in a process of its own so that its CPU
is not counted, answering every request after a fixed 2 s. The runs are enqueued first; one
worker process (bench/_child.py modeldrain) then drains them at concurrency 200. Shown:
runs per second (the ideal is 200 / 2 s = 100), the worker's CPU seconds per run (user +
system, from the start of the drain to its end) and its peak RSS. The gap to the ideal is
what claiming, recording and settling 200 runs at once cost on this machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import _common as c
from tests.fakes._app import Latency
from tests.fakes.openai_service import ServiceProcess

from tenure import RunRequest, Runtime
from tenure.providers import Scripted

CONCURRENCY = 200
MODEL_SECONDS = 2.0


def drain(url: str, base_url: str, runs: int) -> dict[str, float]:
    with Runtime(url) as rt:
        rt.add_model("fake", Scripted())  # a stand-in: this process only enqueues
        rt.enqueue_many([RunRequest(prompt="x", model="fake") for _ in range(runs)])
    return c.child("modeldrain", url, base_url, runs, CONCURRENCY)


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=2000, quick_size=40).parse_args()
    runs, times = c.size_and_repeat(args)
    table = c.Table(
        f"concurrency: {runs} runs, one worker at c={CONCURRENCY}, model calls of "
        f"{MODEL_SECONDS:g} s (ideal {CONCURRENCY / MODEL_SECONDS:.0f} runs/s)"
    )
    counter = itertools.count()
    with (
        c.scratch_dir() as tmp,
        c.maybe_postgres(args) as pg,
        ServiceProcess(latency=Latency.fixed(MODEL_SECONDS)) as service,
    ):
        stores: list[tuple[str, Callable[[], str]]] = []
        if not args.no_sqlite:
            stores.append(("SQLite", lambda: f"sqlite:///{tmp}/c{next(counter)}.db"))
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("concurrency")))
        for name, url_for in stores:
            rate, cpu, rss = c.Series(), c.Series(), c.Series()
            for _ in range(times):
                got = drain(url_for(), service.url, runs)
                rate.add(runs / got["seconds"])
                cpu.add(got["cpu_seconds"] / runs * 1000)
                rss.add(got["peak_rss_mb"])
            table.add(f"tenure/{name}", "runs/s", rate, fmt=",.1f")
            table.add(f"tenure/{name}", "CPU ms per run", cpu, fmt=".2f", note="user + system")
            table.add(f"tenure/{name}", "peak RSS MB", rss, fmt=".1f")
    c.emit(table, preamble=c.machine())


if __name__ == "__main__":
    main()
