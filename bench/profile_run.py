"""profile_run: where a trivial run's CPU goes, end to end, in one worker process.

    python bench/profile_run.py [--size N] [--repeat 3] [--postgres URL] [--against DIR]

N trivial runs (one scripted answer, no tools) are enqueued one call each, then drained by
one worker at concurrency 1 and 8. CPU is this process's user + system time, every thread,
divided by the runs; on PostgreSQL also the cluster's (every process of it, from /proc:
the server's share of each run, which the worker's time does not show); beside it, the
drain's minor page faults per run (the kernel's share, which an instruction count such as
`instructions.py`'s does not see). The stage split comes from a second drain under yappi's
CPU clock (which slows everything down, so only the shares are used, applied to the
unprofiled total): claim and settle (the completer's
commits), the segment (journal, model step, ending), and the rest of the worker (slots,
buffer, keeper, heartbeats).

`--against DIR` (repeatable) measures another checkout of tenure (its `src/`) in the same
invocation, all alternating, each in a fresh child process: DIR's rows are shown beside this
one's, with this checkout's drain over DIR's as the ratio.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

# Each stage's function, by its names across versions (the first one found counts).
STAGES = {
    "claim + settle": [("_completer.py", "Completer._commit"), ("_worker.py", "Worker._commit")],
    "segment": [("_ladder.py", "Segment._execute"), ("_ladder.py", "Segment.execute")],
}


def child_main(url: str, n: int, concurrency: int, profiled: bool) -> None:
    """In a child process whose `sys.path` starts at the checkout being measured."""
    from tenure import RunRequest, RunStatus, Runtime

    def trivial() -> RunRequest:
        return RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}])

    with Runtime(url, lease_seconds=900.0) as rt:
        rt.store  # noqa: B018 -- the schema, before timing
        # One-time work of the first enqueue (validators built on first use), as the schema.
        try:
            from tenure.providers.scripted import parse_script

            parse_script([{"say": "ok"}])
        except ImportError:  # a checkout without it builds them at import
            pass
        requests = [trivial() for _ in range(n)]
        server = c.cluster_cpu(url)
        cpu = time.process_time()
        for request in requests:
            rt.enqueue(request)
        enqueue = time.process_time() - cpu
        enqueue_server = _since(url, server)
        shares: dict[str, float] = {}
        if profiled:
            import yappi

            yappi.set_clock_type("cpu")
            yappi.start()
        server = c.cluster_cpu(url)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.process_time()
        rt.work(concurrency=concurrency, burst=True, poll_interval=0.05)
        drain = time.process_time() - cpu
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        drain_server = _since(url, server)
        if profiled:
            yappi.stop()
            stats = {(s.module, s.name): s.ttot for s in yappi.get_func_stats()}
            total = sum(t.ttot for t in yappi.get_thread_stats()) or 1.0
            for stage, names in STAGES.items():
                for module, name in names:
                    spent = sum(
                        t for (m, f), t in stats.items() if m.endswith(module) and f == name
                    )
                    if spent:
                        shares[stage] = spent / total
                        break
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=n + 1))
        if done != n:
            raise SystemExit(f"completed {done} of {n}")
    out = {"enqueue": enqueue / n, "drain": drain / n, "faults": faults / n, "shares": shares}
    print(json.dumps(out | _per_run(n, enqueue_server=enqueue_server, drain_server=drain_server)))


def _per_run(n: int, **seconds: float | None) -> dict[str, float]:
    return {name: value / n for name, value in seconds.items() if value is not None}


def _since(url: str, before: float | None) -> float | None:
    """The cluster's CPU seconds since `before` (PostgreSQL's processes, from /proc)."""
    now = c.cluster_cpu(url)
    return None if now is None or before is None else now - before


def run_child(src: Path, url: str, n: int, concurrency: int, profiled: bool) -> dict[str, Any]:
    return c.checkout_child(
        __file__, src, "--child", url, n, concurrency, int(profiled), timeout=600
    )


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0], default_size=2000, quick_size=100)
    c.add_against(parser)
    args = parser.parse_args()
    n, times = c.size_and_repeat(args)
    checkouts = c.checkouts(args)
    table = c.Table(f"profile_run: CPU µs per trivial run, {n} runs, one worker process")
    stores: list[tuple[str, Any]] = []
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        count = iter(range(10**6))
        if not args.no_sqlite:
            stores.append(("SQLite", lambda: f"sqlite:///{tmp}/p{next(count)}.db"))
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("profile")))
        for store, fresh in stores:
            for concurrency in (1, 8):
                measure(table, store, fresh, checkouts, n, concurrency, times)
    c.emit(table, preamble=c.machine())


def measure(
    table: c.Table,
    store: str,
    fresh: Any,
    checkouts: dict[str, Path],
    n: int,
    concurrency: int,
    times: int,
) -> None:
    series: dict[tuple[str, str], c.Series] = {}
    shares: dict[str, dict[str, c.Series]] = {}
    for _ in range(times):
        for name, src in checkouts.items():  # alternating: the machine's drift falls on both
            plain = run_child(src, fresh(), n, concurrency, profiled=False)
            series.setdefault((name, "enqueue"), c.Series()).add(plain["enqueue"] * 1e6)
            series.setdefault((name, "drain"), c.Series()).add(plain["drain"] * 1e6)
            for side in ("enqueue_server", "drain_server"):
                if side in plain:
                    series.setdefault((name, side), c.Series()).add(plain[side] * 1e6)
            series.setdefault((name, "faults"), c.Series()).add(plain["faults"])
            if not c.installed("yappi"):  # the stage split needs the bench extra
                continue
            profiled = run_child(src, fresh(), n, concurrency, profiled=True)
            for stage, share in profiled["shares"].items():
                shares.setdefault(name, {}).setdefault(stage, c.Series()).add(share)
    base = series.get(("this", "drain"))
    for name in checkouts:
        label = f"{name}/{store}"
        table.add(label, f"enqueue c={concurrency}", series[(name, "enqueue")])
        drain = series[(name, "drain")]
        baseline = None if name == "this" else base
        table.add(label, f"drain c={concurrency}", drain, baseline=baseline)
        if (name, "drain_server") in series:
            table.add(label, f"enqueue c={concurrency}, cluster", series[(name, "enqueue_server")])
            other = None if name == "this" else series.get(("this", "drain_server"))
            table.add(
                label, f"drain c={concurrency}, cluster", series[(name, "drain_server")],
                baseline=other,
            )  # fmt: skip
        table.add(
            label,
            f"  page faults c={concurrency}",
            series[(name, "faults")],
            fmt=",.1f",
            note="minor faults per run (kernel time: callgrind does not count it)",
        )
        for stage, share in shares.get(name, {}).items():
            table.add(
                label,
                f"  {stage}",
                c.Series([drain.median * share.median]),
                note=f"{share.median:.0%} of the drain (yappi)",
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
    else:
        main()
