"""drain: N trivial runs enqueued one by one, then drained by one worker process.

    python bench/drain.py [--size N] [--repeat 3] [--quick] [--postgres URL] [--no-peers]

tenure on SQLite against huey (SqliteHuey, 1/2/4/8 threads) and DBOS on SQLite; tenure on
PostgreSQL against procrastinate and DBOS on PostgreSQL. A tenure run is one step (a
scripted answer, no tools); a peer job is a no-op. Every repetition gets a fresh database.
Rows: enqueue/s (one call per job) and runs/s of the drain. The ratio is tenure's median
over the peer's, tenure at the same concurrency; for huey also against its best thread count.
A third table gives the worker process's CPU time (user + system, every thread) per run
drained: it depends less on the machine's load than a rate does, so a regression in the
work done per run shows there first.

Each worker process loads its job's code before the clock starts, as the peers' children
define their task functions before theirs: for tenure, the scripted model's turns (pydantic
models, loaded on a script's first use). That one-off CPU is on a row of the third table of
its own ("ms once per process"); inside the clock it was a third of a 2,000-run drain.
"""

from __future__ import annotations

import itertools

import _common as c

THREADS_HUEY = (1, 2, 4, 8)
CONCURRENCY = (1, 8)
# DBOS drains tens of workflows a second here: it gets at most this many jobs (a rate is a
# rate; the row says so), so that a full run of this script stays within minutes.
DBOS_MAX_JOBS = 500


# The CPU table, filled by `measure` as it goes: (system, concurrency) -> µs per run.
CPU = c.Table("drain: CPU µs per run, worker process (user + system, every thread)")


def measure(
    system: str, url_for: c.Callable[[], str], n: int, concurrency: int, times: int
) -> tuple[c.Series, c.Series, c.Series]:
    """(enqueue/s, runs/s, commits per run) over `times` fresh databases; the CPU per run
    goes to the CPU table."""
    if system == "dbos":
        n = min(n, DBOS_MAX_JOBS)
    enq, drain, commits, cpu = c.Series(), c.Series(), c.Series(), c.Series()
    first_use = c.Series()
    url = ""
    for _ in range(times):
        url = url_for()
        e = c.child("enqueue", system, url, n)
        d = c.child("drain", system, url, n, concurrency)
        enq.add(n / e["seconds"])
        drain.add(n / d["seconds"])
        if "commits" in d:
            commits.add(d["commits"] / n)
        if "cpu_seconds" in d:
            cpu.add(d["cpu_seconds"] / n * 1e6)
        if "first_use_cpu_seconds" in d:
            first_use.add(d["first_use_cpu_seconds"] * 1e3)
    if cpu.values:
        store = "PostgreSQL" if url.startswith("postgres") else "SQLite"
        CPU.add(f"{system}/{store}", f"µs/run c={concurrency}", cpu, fmt=",.0f")
    if first_use.values and concurrency == 1:
        CPU.add(
            f"{system}/{store}",
            "ms once per process",
            first_use,
            fmt=",.0f",
            note="loading the scripted model's turns, before the clock",
        )
    return enq, drain, commits


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=2000, quick_size=40).parse_args()
    n, times = c.size_and_repeat(args)
    enqueue = c.Table(f"drain: enqueue/s, {n} jobs one call each")
    runs = c.Table(f"drain: runs/s, {n} jobs, one worker process")
    if not args.no_sqlite:
        with c.scratch_dir() as tmp:
            sqlite_runs(tmp, n, times, not args.no_peers, enqueue, runs)
    with c.maybe_postgres(args) as pg:
        if pg is None:
            runs.missing("tenure/PostgreSQL", "runs/s", "PostgreSQL not available")
        else:
            pg_runs(pg, n, times, not args.no_peers, enqueue, runs)
    c.emit(enqueue, runs, CPU, preamble=c.machine())


def sqlite_runs(
    tmp: c.Path, n: int, times: int, peers: bool, enqueue: c.Table, runs: c.Table
) -> None:
    count = itertools.count()

    def sqlite() -> str:
        return f"sqlite:///{tmp}/db{next(count)}.sqlite"

    tenure: dict[int, c.Series] = {}
    tenure_enq = c.Series()
    for conc in CONCURRENCY:
        e, d, k = measure("tenure", sqlite, n, conc, times)
        tenure[conc] = d
        tenure_enq.values.extend(e.values)
        runs.add("tenure/SQLite", f"runs/s c={conc}", d, note=f"{k.median:.2f} commits/run")
    enqueue.add("tenure/SQLite", "enqueue/s", tenure_enq)
    if peers:
        huey_runs(sqlite, n, times, tenure, tenure_enq, enqueue, runs)
        dbos_runs(sqlite, n, times, tenure, tenure_enq, enqueue, runs)


def huey_runs(
    sqlite: c.Callable[[], str],
    n: int,
    times: int,
    tenure: dict[int, c.Series],
    tenure_enq: c.Series,
    enqueue: c.Table,
    runs: c.Table,
) -> None:
    if not c.installed("huey"):
        runs.missing("huey/SQLite", "runs/s")
        return
    best: c.Series | None = None
    for threads in THREADS_HUEY:
        e, d, _ = measure("huey", sqlite, n, threads, times)
        if threads == 1:
            enqueue.add("huey/SQLite", "enqueue/s", e, baseline=tenure_enq)
        base = tenure[1] if threads == 1 else tenure[8]
        runs.add("huey/SQLite", f"runs/s {threads} thr", d, baseline=base)
        if best is None or d.median > best.median:
            best = d
    assert best is not None
    runs.add("huey/SQLite", "best threads vs tenure c=8", best, baseline=tenure[8])


def dbos_runs(
    sqlite: c.Callable[[], str],
    n: int,
    times: int,
    tenure: dict[int, c.Series],
    tenure_enq: c.Series,
    enqueue: c.Table,
    runs: c.Table,
) -> None:
    if not c.installed("dbos"):
        runs.missing("DBOS/SQLite", "runs/s")
        return
    for conc in CONCURRENCY:
        e, d, _ = measure("dbos", sqlite, n, conc, times)
        if conc == 1:
            enqueue.add("DBOS/SQLite", "enqueue/s", e, baseline=tenure_enq)
        runs.add(
            "DBOS/SQLite",
            f"runs/s c={conc}",
            d,
            baseline=tenure[conc],
            note=f"{min(n, DBOS_MAX_JOBS)} jobs",
        )


def pg_runs(
    pg: c.Postgres, n: int, times: int, peers: bool, enqueue: c.Table, runs: c.Table
) -> None:
    def fresh() -> str:
        return pg.fresh("drain")

    tenure: dict[int, c.Series] = {}
    tenure_enq = c.Series()
    for conc in CONCURRENCY:
        e, d, k = measure("tenure", fresh, n, conc, times)
        tenure[conc] = d
        tenure_enq.values.extend(e.values)
        runs.add("tenure/PostgreSQL", f"runs/s c={conc}", d, note=f"{k.median:.2f} commits/run")
    enqueue.add("tenure/PostgreSQL", "enqueue/s", tenure_enq)
    for peer, label in (("procrastinate", "procrastinate/PG"), ("dbos", "DBOS/PostgreSQL")):
        if not peers:
            continue
        if not c.installed(peer):
            runs.missing(label, "runs/s")
            continue
        for conc in CONCURRENCY:
            e, d, _ = measure(peer, fresh, n, conc, times)
            if conc == 1:
                enqueue.add(label, "enqueue/s", e, baseline=tenure_enq)
            note = f"{min(n, DBOS_MAX_JOBS)} jobs" if peer == "dbos" else ""
            runs.add(label, f"runs/s c={conc}", d, baseline=tenure[conc], note=note)


if __name__ == "__main__":
    main()
