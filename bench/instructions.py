"""instructions: instructions per trivial run on SQLite, counted by callgrind.

    python bench/instructions.py [--size N] [--quick] [--repeat R] [--concurrency C]...
                                 [--against DIR]... [--keep DIR] [--valgrind-arg OPTION]...

N trivial runs (one scripted answer, no tools) are enqueued into a fresh SQLite file, then
one worker drains them with `rt.work(concurrency=C, burst=True)`, the whole child process
under `valgrind --tool=callgrind --instr-atstart=no`; instrumentation is switched on (by
`callgrind_control -i on`) just before the drain and off just after it, so only the drain's
instructions are counted (every thread of the process), divided by N. Unlike CPU time, the
count does not move with the machine's load: use it to compare two trees. Valgrind runs the
process's threads one at a time, so the completer's batches are not those of a real drain.

`--against DIR` (repeatable) counts another checkout of tenure (its `src/` first on
`sys.path`) the same way in the same invocation; its row's ratio is this checkout's count
over its own. One repetition by default (the count hardly moves between runs). `--keep DIR`
keeps each callgrind output file there (for `callgrind_annotate`); `--valgrind-arg` passes
an option to valgrind (for example `--dump-instr=no`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _common as c

HERE = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 1800


# `--steps`: runs of this many read-only tool steps (steps.py's agent-function table).
STEPS_K = 10
WORKLOADS = ("trivial", "loop", "agent")


def child_main(url: str, n: int, concurrency: int, workload: str = "trivial") -> None:
    """In the process valgrind runs, with the measured checkout's `src/` on `sys.path`."""
    from tenure import RunRequest, RunStatus, Runtime

    if workload == "trivial":
        rt = Runtime(url, lease_seconds=900.0)
        request = RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}])
    else:  # steps.py's runs: the built-in loop's, or the same steps by an agent function
        import steps as st
        from _child import tenure_runtime

        rt = tenure_runtime(url)
        request = st.request(STEPS_K) if workload == "loop" else st.agent_request(STEPS_K)
    with rt:
        rt.store  # noqa: B018 -- the schema, outside the count
        for _ in range(n):
            rt.enqueue(request)
        toggle("on")
        rt.work(concurrency=concurrency, burst=True, poll_interval=0.05)
        toggle("off")
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=n + 1))
        if done != n:
            raise SystemExit(f"completed {done} of {n}")


def toggle(state: str) -> None:
    subprocess.run(
        ["callgrind_control", "-i", state, str(os.getpid())],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=120,
    )


def count(
    src: Path,
    n: int,
    concurrency: int,
    keep: Path | None,
    extra: list[str],
    workload: str = "trivial",
) -> int:
    """The drain's instructions (Ir) in one fresh child process under callgrind."""
    with tempfile.TemporaryDirectory(prefix="tenure-instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE)])}
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            *extra,
            sys.executable,
            __file__,
            "--child",
            f"sqlite:///{tmp}/i.db",
            str(n),
            str(concurrency),
            workload,
        ]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, check=False, timeout=TIMEOUT_SECONDS
        )
        if done.returncode != 0:
            raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
        text = out.read_text()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = f"{src.parent.name}-{workload}-c{concurrency}.callgrind.out"
            shutil.copy(out, keep / name)
    # `totals:` is the sum over the whole output; `summary:` may be written as 0 when the
    # instrumentation was off at the start.
    found = re.search(r"^totals:\s*(\d+)", text, re.MULTILINE)
    if found is None:
        raise RuntimeError("no totals in callgrind's output")
    return int(found.group(1))


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0], default_size=1000, quick_size=20)
    parser.set_defaults(repeat=1)  # a count, not a time: it hardly moves between runs
    c.add_against(parser)
    parser.add_argument(
        "--concurrency", type=int, action="append", default=[], help="slots (8, then 1)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep callgrind's files here")
    parser.add_argument("--valgrind-arg", action="append", default=[], help="a valgrind option")
    parser.add_argument(
        "--steps",
        action="store_true",
        help=f"per step of runs of {STEPS_K} tool steps: the loop's and an agent function's",
    )
    args = parser.parse_args()
    n, times = c.size_and_repeat(args)
    if n < 1:
        raise SystemExit("instructions: --size must be at least 1")
    checkouts = c.checkouts(args)
    if args.steps:
        c.emit(steps_table(checkouts, max(1, n // 25), times, args), preamble=c.machine())
        return
    table = c.Table(f"instructions: per trivial run, SQLite, {n} runs, one worker process")
    levels = args.concurrency or [8, 1]
    have = shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None
    for concurrency in levels:
        series = {name: c.Series() for name in checkouts}
        for _ in range(times if have else 0):
            for name, src in checkouts.items():  # alternating, as the other scripts do
                total = count(src, n, concurrency, args.keep, args.valgrind_arg)
                series[name].add(total / n)
        for name in checkouts:
            label = f"{name}/SQLite"
            if not have:
                table.missing(label, f"drain c={concurrency}", "valgrind not installed")
                continue
            baseline = None if name == "this" else series["this"]
            table.add(label, f"drain c={concurrency}", series[name], baseline=baseline)
    c.emit(table, preamble=c.machine())


def steps_table(
    checkouts: dict[str, Path], runs: int, times: int, args: argparse.Namespace
) -> c.Table:
    """Instructions per step of the built-in loop's runs and of the same steps made by an
    agent function (steps.py's agent table: the same tool, model and steps), at
    concurrency 1; the ratio agent / loop is the figure that does not move with the load."""
    import steps as st

    per_run = st.steps_per_run(STEPS_K)
    table = c.Table(
        f"instructions: per step, runs of {STEPS_K} tool steps, SQLite, {runs} runs, c=1"
    )
    have = shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None
    for name, src in checkouts.items():
        label = f"{name}/SQLite"
        if not have:
            table.missing(label, "step", "valgrind not installed")
            continue
        series = {kind: c.Series() for kind in ("loop", "agent")}
        for _ in range(times):
            for kind in series:
                total = count(src, runs, 1, args.keep, args.valgrind_arg, kind)
                series[kind].add(total / (runs * per_run))
        table.add(label, "built-in loop step", series["loop"])
        table.add(
            label,
            "agent function step",
            series["agent"],
            baseline=series["loop"],
            note="tenure/peer = loop / agent; target >= 0.91x (agent <= 1.1x)",
        )
    return table


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
