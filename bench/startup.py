"""startup: wall time of a `tenure` command, from exec to exit, in fresh processes.

    python bench/startup.py [--size N] [--repeat 3] [--quick] [--against DIR]

What a shell loop or a cron job pays per command: `tenure --help`, `tenure runs` on a SQLite
file of N runs (default 20) and `tenure enqueue` of one scripted run, each started as
`python -m tenure` in a new process: wall time until it exits, and the CPU time it used
(user + system: what the wall time would be on an idle machine); `python -c pass` is the
floor no command can go under. Each repetition starts every command SAMPLES times; the median is
shown. Targets on a 2-CPU machine: `--help` at most 300 ms, `runs` at most 500 ms.

`--against DIR` measures another checkout of tenure (its `src/`) in the same invocation, the
two alternating command by command, so that the load of a shared machine falls on both.
PostgreSQL plays no part (its options are accepted and ignored).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import _common as c

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLES = 5
TARGET_MS = {"--help": 300, "runs": 500}
SCRIPT = [{"say": "ok"}]


def child_main(url: str, n: int) -> None:
    """In a child process of the checkout being measured: a SQLite file of `n` runs."""
    from tenure import RunRequest, Runtime

    rt = Runtime(url)
    rt.store.schema_version()  # the schema, even for no runs
    if n:
        rt.enqueue_many([RunRequest(prompt="x", model="scripted", script=SCRIPT)] * n)
    rt.close()


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DATABASE_URL"}
    env["PYTHONPATH"] = str(src)
    return env


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(argv: list[str], src: Path, cwd: Path) -> tuple[float, float]:
    """Milliseconds from start to exit of one fresh process, and of CPU it used (on a loaded
    machine the wall time is mostly waiting for a CPU); it must succeed."""
    cpu, start = _cpu(), time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=_env(src), capture_output=True, text=True)
    elapsed, used = (time.perf_counter() - start) * 1000, (_cpu() - cpu) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, used


def main() -> None:
    parser = c.parser(__doc__.splitlines()[0], default_size=20, quick_size=5)
    parser.add_argument("--against", type=Path, help="another checkout of tenure to compare")
    args = parser.parse_args()
    n, times = c.size_and_repeat(args)
    checkouts = {"tenure": ROOT / "src"}
    if args.against is not None:
        checkouts[f"tenure {args.against}"] = args.against.resolve() / "src"
    table = c.Table(f"startup: wall ms of one command in a fresh process ({n}-run SQLite file)")
    with c.scratch_dir() as tmp:
        script = tmp / "script.json"
        script.write_text(json.dumps(SCRIPT))
        commands: dict[str, dict[str, list[str]]] = {}
        for i, (name, src) in enumerate(checkouts.items()):
            # Each checkout reads a file its own schema made: an older one refuses a newer.
            runs_db, enqueue_db = f"sqlite:///{tmp}/runs{i}.db", f"sqlite:///{tmp}/enq{i}.db"
            for url, size in ((runs_db, n), (enqueue_db, 0)):
                prepare = [sys.executable, str(Path(__file__).resolve()), "--child", url, str(size)]
                _timed(prepare, src, tmp)
            tenure = [sys.executable, "-m", "tenure"]
            commands[name] = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "--help": [*tenure, "--help"],
                "runs": [*tenure, "--database", runs_db, "runs"],
                "enqueue": [
                    *tenure,
                    "--database",
                    enqueue_db,
                    "enqueue",
                    "--prompt",
                    "x",
                    "--model",
                    "scripted",
                    "--script",
                    str(script),
                ],
            }
        series: dict[tuple[str, str], c.Series] = {}
        for _ in range(times * SAMPLES):
            for metric in commands["tenure"]:
                for name, src in checkouts.items():  # alternating: drift falls on both
                    elapsed, used = _timed(commands[name][metric], src, tmp)
                    series.setdefault((name, metric), c.Series()).add(elapsed)
                    series.setdefault((name, f"{metric} (CPU)"), c.Series()).add(used)
    for metric in commands["tenure"]:
        for shown in (metric, f"{metric} (CPU)"):
            for name in checkouts:
                target = TARGET_MS.get(shown)
                note = f"target <= {target} ms" if target and name == "tenure" else ""
                baseline = series[("tenure", shown)] if name != "tenure" else None
                table.add(name, shown, series[(name, shown)], note=note, baseline=baseline)
    c.emit(table, preamble=c.machine())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], int(sys.argv[3]))
    else:
        main()
