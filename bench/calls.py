"""calls: Python function calls per trivial run in a drain on SQLite, counted by yappi.

    python bench/calls.py [--size N] [--concurrency C]... [--top K] [--against DIR]...

N trivial runs (one scripted answer, no tools) are enqueued into a fresh SQLite file, then
one worker drains them with `rt.work(concurrency=C, burst=True)` under yappi (every thread,
built-in functions included); the drain's calls divided by N are printed (all, and those
of Python functions: a built-in's call is far cheaper), then the K functions called most
per run and the K with the most own CPU time per run (yappi's CPU clock, which slows
everything down: the times are shares, not costs). Like an instruction
count, the number of calls hardly moves with the machine's load: a change to the run path
shows in it as a difference of calls (and which function made them). A few calls per run
vary between drains (the slots' waits on the buffer and the completer's batches).

`--against DIR` (repeatable) counts another checkout of tenure the same way, in a fresh
child process whose `sys.path` starts at its `src/`. Needs the bench extra (yappi).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as c

HERE = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 900


def child_main(n: int, concurrency: int, top: int) -> None:
    """In a fresh process, with the measured checkout's `src/` first on `sys.path`."""
    import yappi

    from tenure import RunRequest, RunStatus, Runtime

    with tempfile.TemporaryDirectory() as tmp, Runtime(f"sqlite:///{tmp}/c.db") as rt:
        rt.store  # noqa: B018 -- the schema, outside the count
        for _ in range(n):
            rt.enqueue(RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}]))
        yappi.set_clock_type("cpu")
        yappi.start(builtins=True)
        rt.work(concurrency=concurrency, burst=True, poll_interval=0.05)
        yappi.stop()
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=n + 1))
        if done != n:
            raise SystemExit(f"completed {done} of {n}")
        stats = list(yappi.get_func_stats())

    def row(s: yappi.YFuncStat) -> list[object]:
        where = f"{os.path.basename(s.module)}:{s.lineno}" if s.lineno else "builtin"
        return [round(s.ncall / n, 2), round(s.tsub / n * 1e6, 1), f"{where} {s.name}"]

    by_count = sorted(stats, key=lambda s: -s.ncall)[:top]
    by_time = sorted(stats, key=lambda s: -s.tsub)[:top]
    print(
        json.dumps(
            {
                "calls": sum(s.ncall for s in stats) / n,
                "python": sum(s.ncall for s in stats if s.lineno) / n,
                "by_count": [row(s) for s in by_count],
                "by_time": [row(s) for s in by_time],
            }
        )
    )


def count(src: Path, n: int, concurrency: int, top: int) -> dict[str, object]:
    code = (
        f"import sys; sys.path[:0] = [{str(src)!r}, {str(HERE)!r}]; "
        f"import calls; calls.child_main({n}, {concurrency}, {top})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1000, help="runs drained (default 1000)")
    p.add_argument("--concurrency", type=int, action="append", default=[], help="8, then 1")
    p.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    c.add_against(p)
    args = p.parse_args()
    if args.size < 1:
        raise SystemExit("calls: --size must be at least 1")
    if not c.installed("yappi"):
        raise SystemExit("calls: needs yappi (pip install -e '.[bench]')")
    print(c.machine())
    for concurrency in args.concurrency or [8, 1]:
        for name, src in c.checkouts(args).items():
            found = count(src, args.size, concurrency, args.top)
            print(
                f"\n## {name}, SQLite drain c={concurrency}: {found['calls']:.1f} calls per run, "
                f"{found['python']:.1f} of them of Python functions (the rest built-ins)"
            )
            for title in ("by_count", "by_time"):
                print(f"\n{'calls/run':>9} {'own µs/run':>10}  function ({title})")
                for calls, own, what in found[title]:  # type: ignore[attr-defined]
                    print(f"{calls:9.2f} {own:10.1f}  {what}")


if __name__ == "__main__":
    main()
