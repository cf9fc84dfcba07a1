"""instructions: instructions per trivial run (or per step), counted by callgrind.

    python bench/instructions.py [--size N] [--quick] [--repeat R] [--concurrency C]...
                                 [--against DIR]... [--keep DIR] [--valgrind-arg OPTION]...
                                 [--steps] [--enqueue] [--store sqlite|postgres]

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

`--steps`: instructions per step of runs of 10 read-only tool steps, made by the built-in
loop and by an agent function (steps.py's agent table), N/25 runs of each, at concurrency 1;
the ratio loop/agent is the figure to read.

`--enqueue`: instructions per `rt.enqueue(request)` of a trivial run on a fresh SQLite file
(validation, the stored JSON, the INSERTs and their transaction): N enqueues, counted
between the same two toggles, after one enqueue outside the count (imports, the
statements' first preparations); at concurrency 1 only, since nothing runs concurrently.

`--store postgres` counts both sides: the worker process (as above) and the PostgreSQL
backends that serve it. A private cluster is started with its server under
`valgrind --tool=callgrind` (`pg_ctl -p` names a script that runs `postgres` under it);
backends are forked without exec, so each is counted on its own and writes its count when it
exits, while the long-lived processes (checkpointer, WAL writer) write theirs only when the
cluster stops. Autovacuum, the logical replication launcher, parallel query and JIT are off,
and no checkpoint falls in a drain. For each count, the runs are queued into a fresh
database by a process outside valgrind; once its backends have exited, the worker drains
under callgrind, and the backends that exit after it (every connection it opened: pool,
listener) are its server side. `callgrind_control` cannot reach a forked backend, so the
counts are whole backends' (connecting included): each figure is
(count(2n) - count(n)) / n from drains of n and 2n runs, which cancels what a drain does
once. n is N/5 trivial runs, N/25 runs of steps (valgrind slows the server too). Rows:
client, server and total instructions per run (per step), and the transactions the
backends committed per run (per step; `pg_stat_database.xact_commit`): how many runs the
worker's batches hold depends on timing, which valgrind changes, and a count moves with it.
The worker's timed wake-ups (its claim loop looks again every `poll_interval` while runs are
in flight, heartbeats) are counted too, in proportion to the drain's wall time: about 2.3M
instructions a second under valgrind, a fifth of the worker's count per step, which is why
the client's figure moves by a few per cent with the machine's load and the server's does
not. `--postgres URL` is not used.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as c

HERE = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 1800


# `--steps`: runs of this many read-only tool steps (steps.py's agent-function table).
STEPS_K = 10
WORKLOADS = ("trivial", "loop", "agent")
# `--store postgres`: drains of N // this many runs and of twice as many (trivial runs, runs
# of STEPS_K steps): valgrind slows the server too.
PG_TRIVIAL_DIVISOR = 5
PG_STEPS_DIVISOR = 25


def child_main(
    url: str, n: int, concurrency: int, workload: str = "trivial", queue: bool = True
) -> None:
    """In the process valgrind runs, with the measured checkout's `src/` on `sys.path`;
    without `queue`, the runs are already queued (`enqueue_main`). The workload "enqueue"
    counts the enqueues themselves, not a drain."""

    if workload == "enqueue":
        enqueue_counted(url, n)
        return
    rt, request = runtime_and_request(url, workload)
    with rt:
        rt.store  # noqa: B018 -- the schema, outside the count
        for _ in range(n if queue else 0):
            rt.enqueue(request)
        toggle("on")
        rt.work(concurrency=concurrency, burst=True, poll_interval=0.05)
        toggle("off")
    if queue:  # else checked by another process: the query's rows would count on the server
        check(url, n, workload)


def enqueue_counted(url: str, n: int) -> None:
    """`--enqueue`: n enqueues of a trivial run between the toggles, after one outside."""
    rt, request = runtime_and_request(url, "trivial")
    with rt:
        rt.enqueue(request)  # the schema, imports, the statements' first preparations
        toggle("on")
        for _ in range(n):
            rt.enqueue(request)
        toggle("off")
    check(url, n + 1, "trivial", "queued")


def check(url: str, n: int, workload: str, status: str = "completed") -> None:
    """Exit unless exactly `n` runs of the database are in `status`."""
    from tenure import RunStatus

    rt, _ = runtime_and_request(url, workload)
    with rt:
        found = len(rt.runs(status=RunStatus(status), limit=n + 1))
    if found != n:
        raise SystemExit(f"{status} {found} of {n}")


def enqueue_main(url: str, n: int, workload: str) -> None:
    """`--store postgres`: the runs are queued by a process of their own, outside valgrind,
    so that the server's backends that serve the counted process only drain."""
    rt, request = runtime_and_request(url, workload)
    with rt:
        for _ in range(n):
            rt.enqueue(request)


def runtime_and_request(url: str, workload: str) -> tuple[Any, Any]:
    from tenure import RunRequest, Runtime

    if workload == "trivial":
        rt = Runtime(url, lease_seconds=900.0)
        return rt, RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}])
    # steps.py's runs: the built-in loop's, or the same steps by an agent function
    import steps as st
    from _child import tenure_runtime

    request = st.request(STEPS_K) if workload == "loop" else st.agent_request(STEPS_K)
    return tenure_runtime(url), request


def have_valgrind() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


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
    url: str | None = None,
) -> int:
    """The drain's instructions (Ir) in one fresh child process under callgrind, on a fresh
    SQLite file, or on `url` where the runs are already queued."""
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
            url or f"sqlite:///{tmp}/i.db",
            str(n),
            str(concurrency),
            workload,
            "queued" if url else "queue",
        ]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, check=False, timeout=TIMEOUT_SECONDS
        )
        if done.returncode != 0:
            raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
        text = out.read_text()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            store = "pg-" if url else ""
            name = f"{src.parent.name}-{store}{workload}-n{n}-c{concurrency}.callgrind.out"
            shutil.copy(out, keep / name)
    found = totals(text)
    if found is None:
        raise RuntimeError("no totals in callgrind's output")
    return found


def totals(text: str) -> int | None:
    # `totals:` is the sum over the whole output; `summary:` may be written as 0 when the
    # instrumentation was off at the start.
    found = re.search(r"^totals:\s*(\d+)", text, re.MULTILINE)
    return None if found is None else int(found.group(1))


# -- `--store postgres` ---------------------------------------------------------------------

# After the benchmarks' durable settings: nothing that a backend serving the worker does by
# the clock or by chance (autovacuum's workers, a checkpoint's full-page images, a parallel
# query's workers, JIT compilation), and no process the server starts after it is ready
# (the logical replication launcher): those that run when it is ready stay till the end.
COUNTED_SETTINGS = {
    "autovacuum": "off",
    "max_logical_replication_workers": "0",
    "checkpoint_timeout": "'1d'",
    "max_wal_size": "'10GB'",
    "max_parallel_workers_per_gather": "0",
    "jit": "off",
}
SERVER_START_SECONDS = 300
SETTLE_SECONDS = 300


@dataclass
class Count:
    """One drain's instructions, in the worker process and in the backends that served it,
    and the transactions those backends committed (read-only ones too)."""

    client: float
    server: float
    commits: float

    def __sub__(self, other: Count) -> Count:
        return Count(
            self.client - other.client, self.server - other.server, self.commits - other.commits
        )

    def __truediv__(self, by: float) -> Count:
        return Count(self.client / by, self.server / by, self.commits / by)


class CountedServer:
    """A private PostgreSQL cluster whose server runs under callgrind. Backends are forked
    without exec, so each is counted on its own and writes its count to `pg.PID` when it
    exits. The long-lived processes (checkpointer, WAL writer...) write theirs only when the
    cluster stops: a file that appears is a backend's."""

    def __init__(self, extra: list[str]) -> None:
        self._extra = extra
        self._dbs = 0

    def __enter__(self) -> CountedServer:
        from tests._postgres import SERVER_USER, Cluster, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL binaries not found")
        self.cluster = Cluster(bindir, start_timeout=SERVER_START_SECONDS)
        self.out = self.cluster.root / "callgrind"
        self.cluster.wrapper = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={self.out}/pg.%p",
            *self._extra,
        ]
        try:
            self.cluster.init()
            self.out.mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.out, SERVER_USER)
            with (self.cluster.data / "postgresql.conf").open("a") as conf:
                for key, value in {**c.DURABLE_SETTINGS, **COUNTED_SETTINGS}.items():
                    conf.write(f"{key} = {value}\n")
            self.cluster.start()
            pid_file = (self.cluster.data / "postmaster.pid").read_text()
            self.postmaster = int(pid_file.split()[0])
            self.resident = self.children() - {self._admin_backend()}
            self.settle()
        except BaseException:
            self.cluster.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.destroy()

    def children(self) -> set[int]:
        found = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):  # gone since the listing
                    if int(c._stat(int(entry))[1]) == self.postmaster:
                        found.add(int(entry))
        return found

    def _admin_backend(self) -> int:
        """The pid of a backend that served one admin connection, now closed."""
        import psycopg

        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    def settle(self) -> None:
        """Wait until every backend has exited (and so written its count): until only the
        processes that were there once the server had started remain."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while (left := self.children() - self.resident) and time.monotonic() < deadline:
            time.sleep(0.5)
        if left:
            raise RuntimeError(f"backends still running after {SETTLE_SECONDS} s: {sorted(left)}")

    def take(self, keep: Path | None, name: str) -> int:
        """The sum of the counts written since the last call; the files are removed."""
        total = 0
        for path in sorted(self.out.iterdir()):
            total += totals(path.read_text()) or 0
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, keep / f"{name}-server-{path.name}.callgrind.out")
            path.unlink()
        return total

    def count(
        self, src: Path, n: int, concurrency: int, workload: str, args: argparse.Namespace
    ) -> Count:
        """One drain of `n` runs queued beforehand (by a process outside valgrind) into a
        fresh database: the worker's count and its backends'."""
        self._dbs += 1
        db = f"counted_{self._dbs}"
        self.cluster.admin(f"CREATE DATABASE {db}")
        url = self.cluster.url(db)
        native(src, "--queue", url, n, workload)
        self.settle()
        self.take(None, "")  # the set-up's backends: schema, enqueue, the admin connection
        before = self.commits(db)
        client = count(src, n, concurrency, args.keep, args.valgrind_arg, workload, url=url)
        self.settle()
        name = f"{src.parent.name}-{workload}-n{n}-c{concurrency}"
        server = self.take(args.keep, name)
        commits = self.commits(db) - before
        native(src, "--check", url, n, workload)
        self.cluster.admin(f"DROP DATABASE {db}")
        return Count(client, server, commits)

    def commits(self, db: str) -> int:
        """Transactions committed in `db` so far by backends that have exited (a backend
        reports its own when it exits, at the latest)."""
        import psycopg

        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    def per_run(
        self, src: Path, n: int, concurrency: int, workload: str, args: argparse.Namespace
    ) -> Count:
        """Instructions per run, from drains of n and 2n runs: (count(2n) - count(n)) / n,
        which cancels what a drain does once (connecting, the first statements' plans)."""
        once = self.count(src, n, concurrency, workload, args)
        twice = self.count(src, 2 * n, concurrency, workload, args)
        return (twice - once) / n


def native(src: Path, *argv: object) -> None:
    """This script in a process outside valgrind, with `src` first on its path."""
    c.run_child([__file__, *argv], [str(src), str(HERE)], TIMEOUT_SECONDS)


def add_counts(
    table: c.Table,
    label: str,
    metric: str,
    series: dict[str, c.Series],
    baseline: dict[str, c.Series] | None = None,
    note: str = "",
) -> None:
    """Four rows: the worker's instructions, its backends', their sum, and the transactions
    its backends committed (a timing-dependent batching shows there)."""
    for side in SIDES:
        table.add(
            label,
            f"{metric}, {side}",
            series[side],
            baseline=None if baseline is None else baseline[side],
            note=note if side == "total" else "",
            fmt=".2f" if side == "commits" else ",.0f",
        )


SIDES = ("client", "server", "total", "commits")


def pg_series() -> dict[str, c.Series]:
    return {side: c.Series() for side in SIDES}


def add_count(series: dict[str, c.Series], count_: Count, per: float) -> None:
    series["client"].add(count_.client / per)
    series["server"].add(count_.server / per)
    series["total"].add((count_.client + count_.server) / per)
    series["commits"].add(count_.commits / per)


def pg_main(args: argparse.Namespace, checkouts: dict[str, Path], n: int, times: int) -> None:
    """The trivial-run table, or `--steps`'s, with the server's backends counted too."""
    have = have_valgrind()
    if args.steps:
        runs = max(1, n // PG_STEPS_DIVISOR)
        title = (
            f"instructions: per step, runs of {STEPS_K} tool steps, PostgreSQL, "
            f"drains of {runs} and {2 * runs} runs, c=1"
        )
    else:
        runs = max(1, n // PG_TRIVIAL_DIVISOR)
        title = f"instructions: per trivial run, PostgreSQL, drains of {runs} and {2 * runs} runs"
    table = c.Table(title)
    from tests._postgres import find_bindir

    if not have or find_bindir() is None:
        why = "valgrind not installed" if not have else "PostgreSQL binaries not found"
        table.missing("this/PostgreSQL", "client, server, total", why)
        c.emit(table, preamble=c.machine())
        return
    with CountedServer(args.valgrind_arg) as server:
        if args.steps:
            steps_rows(table, server, checkouts, runs, times, args)
        else:
            for concurrency in args.concurrency or [8, 1]:
                found = {name: pg_series() for name in checkouts}
                for _ in range(times):
                    for name, src in checkouts.items():
                        add_count(
                            found[name], server.per_run(src, runs, concurrency, "trivial", args), 1
                        )
                for name in checkouts:
                    baseline = None if name == "this" else found["this"]
                    add_counts(
                        table, f"{name}/PostgreSQL", f"drain c={concurrency}", found[name], baseline
                    )
    c.emit(table, preamble=c.machine())


def steps_rows(
    table: c.Table,
    server: CountedServer,
    checkouts: dict[str, Path],
    runs: int,
    times: int,
    args: argparse.Namespace,
) -> None:
    import steps as st

    per_run = st.steps_per_run(STEPS_K)
    for name, src in checkouts.items():
        found = {kind: pg_series() for kind in ("loop", "agent")}
        for _ in range(times):
            for kind in found:
                add_count(found[kind], server.per_run(src, runs, 1, kind, args), per_run)
        label = f"{name}/PostgreSQL"
        add_counts(table, label, "built-in loop step", found["loop"])
        add_counts(
            table,
            label,
            "agent function step",
            found["agent"],
            baseline=found["loop"],
            note="tenure/peer = loop / agent; target >= 0.91x (agent <= 1.1x)",
        )


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
    parser.add_argument(
        "--enqueue",
        action="store_true",
        help="per rt.enqueue of a trivial run on SQLite, instead of per run drained",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: a private cluster whose server runs under callgrind too",
    )
    args = parser.parse_args()
    n, times = c.size_and_repeat(args)
    if n < 1:
        raise SystemExit("instructions: --size must be at least 1")
    checkouts = c.checkouts(args)
    if args.store == "postgres":
        pg_main(args, checkouts, n, times)
        return
    if args.steps:
        c.emit(steps_table(checkouts, max(1, n // 25), times, args), preamble=c.machine())
        return
    if args.enqueue:
        c.emit(enqueue_table(checkouts, n, times, args), preamble=c.machine())
        return
    table = c.Table(f"instructions: per trivial run, SQLite, {n} runs, one worker process")
    for concurrency in args.concurrency or [8, 1]:
        alternated(
            table,
            checkouts,
            times,
            f"drain c={concurrency}",
            lambda src, cc=concurrency: count(src, n, cc, args.keep, args.valgrind_arg) / n,
        )
    c.emit(table, preamble=c.machine())


def enqueue_table(
    checkouts: dict[str, Path], n: int, times: int, args: argparse.Namespace
) -> c.Table:
    """Instructions per `rt.enqueue` of a trivial run on SQLite (`--enqueue`)."""
    table = c.Table(f"instructions: per enqueue of a trivial run, SQLite, {n} enqueues")
    alternated(
        table,
        checkouts,
        times,
        "enqueue",
        lambda src: count(src, n, 1, args.keep, args.valgrind_arg, "enqueue") / n,
    )
    return table


def alternated(
    table: c.Table,
    checkouts: dict[str, Path],
    times: int,
    metric: str,
    once: Callable[[Path], float],
) -> None:
    """A row per checkout on SQLite of `once(src)`, measured `times` times for each, the
    checkouts alternating (as the other scripts do); each row's ratio is against this one."""
    have = have_valgrind()
    series = {name: c.Series() for name in checkouts}
    for _ in range(times if have else 0):
        for name, src in checkouts.items():
            series[name].add(once(src))
    for name in checkouts:
        label = f"{name}/SQLite"
        if not have:
            table.missing(label, metric, "valgrind not installed")
            continue
        baseline = None if name == "this" else series["this"]
        table.add(label, metric, series[name], baseline=baseline)


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
    have = have_valgrind()
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
        a = sys.argv
        child_main(a[2], int(a[3]), int(a[4]), a[5], queue=a[6] == "queue")
    elif len(sys.argv) > 1 and sys.argv[1] == "--queue":
        enqueue_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "--check":
        check(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
