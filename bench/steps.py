"""steps: runs of 1, 10 and 50 read-only tool steps; time and commits per step.

    python bench/steps.py [--size RUNS] [--repeat 3] [--quick] [--postgres URL]
                          [--keeper-only | --async-only | --agents-only [--against DIR]]

Each run calls a read-only tool k times (one call per model turn for k = 1, five per turn
beyond) and then answers, so a run has k tool steps and k/5 + 1 (at least 2) model steps.
The runs are drained by one worker at concurrency 1, in this process. The baseline is the
same agent loop (the same segment code, tools and scripted model) on an in-memory store that
persists nothing: the difference is the price of durability. Commits are the store's write
transactions, counted where they are made; on PostgreSQL `pg_stat_database.xact_commit`
(which counts reads too) is shown beside them.

The keeper table (`--keeper-only` prints just it) drains runs of k = 10 at concurrency 8
with the lease keeper running (SPEC §15) and with it closed (a closed keeper keeps nothing:
leases are renewed at step boundaries only, as before it existed), at the default lease of
30 s (a keeper round every 10 s) and at 3 s (a round every second): the target is at most
5 % more per step with the keeper.

A last row runs k = 10 with an `async def` read tool instead (it runs on the process's event
loop; the slot thread waits for it), compared with the same runs of the plain tool: the
target is at most 10 % more per step (a ratio of at least 0.91x).

`--agents-only --against DIR` (repeatable) measures an agent function's step against the
built-in loop's for this checkout and for DIR's `src/`, each drain in a fresh child process
(after a few runs drained unmeasured), all alternating (loop then agent, this checkout then
DIR, each repetition): CPU time of the worker's process, on PostgreSQL also with the
server's (the cluster's processes), write transactions per run, and the ratio agent / loop
of each repetition.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _common as c
from _child import count_writes, tenure_runtime

from tenure import RunRequest, RunStatus
from tenure._ladder import Engine, Segment
from tenure._types import Event, ToolEffect, Usage
from tenure.store import _bench
from tenure.store._base import NO_USAGE, Lease, NewEvent, Settlement

STEPS = (1, 10, 50)
ASYNC_STEPS = 10
REPLAY_BASE = 10
REPLAY_STEPS = (10, 100, 1000)
KEEPER_STEPS = 10
KEEPER_CONCURRENCY = 8
KEEPER_LEASES = (30.0, 3.0)
CALLS_PER_TURN = 5
MAX_TURNS = 20
# A PostgreSQL backend reports its statistics when it exits; wait for the pool's to have.
STATS_SETTLE_SECONDS = 0.5


def script(k: int, tool: str = "read") -> list[dict[str, Any]]:
    per_turn = 1 if k < CALLS_PER_TURN else CALLS_PER_TURN
    turns = [{"call": [{"tool": tool}] * per_turn} for _ in range(k // per_turn)]
    return [*turns, {"say": "done"}]


def request(k: int, tool: str = "read") -> RunRequest:
    return RunRequest(
        prompt="x", model="scripted", tools=[tool], script=script(k, tool), max_iterations=MAX_TURNS
    )


def steps_per_run(k: int) -> int:
    return k + len(script(k))  # tool steps + model steps


@dataclass
class MemoryStore:
    """The store methods a segment calls, on dictionaries: persistence removed."""

    events_of: dict[str, list[Event]] = field(default_factory=dict)
    url: str = "memory"

    def _add(self, lease: Lease, events: Sequence[NewEvent]) -> list[int]:
        log = self.events_of.setdefault(lease.run_id, [])
        now = datetime.now(UTC)
        first = len(log)
        for i, e in enumerate(events):
            log.append(Event(lease.run_id, first + i, 0, e.kind, e.payload, now, lease.token))
        return list(range(first, len(log)))

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        return [e for e in self.events_of.get(run_id, []) if e.sequence > after]

    def record_step(
        self,
        lease: Lease,
        lease_seconds: float,
        events: Sequence[NewEvent],
        usage: Usage = NO_USAGE,
    ) -> list[int]:
        return self._add(lease, events)

    def settle(self, lease: Lease, settlement: Settlement) -> list[int]:
        return self._add(lease, settlement.events)

    def mark_fence(self, lease: Lease, effect: ToolEffect, lease_seconds: float) -> bool:
        return True

    def clear_fence(self, lease: Lease, lease_seconds: float, event: NewEvent) -> int:
        return self._add(lease, [event])[0]

    def run_status(self, run_id: str) -> RunStatus:
        return RunStatus.RUNNING


def in_memory(k: int, runs: int, tool: str = "read") -> float:
    """Seconds for `runs` runs of the same loop on the memory store."""
    rt = tenure_runtime("sqlite:///never-opened.db")
    engine = Engine(MemoryStore(), rt._tools, rt._models, rt.settings)  # type: ignore[arg-type]
    made = rt._validate(request(k, tool))
    raw = [rt._new_run(made, interactive=False).request for _ in range(runs)]
    started = time.perf_counter()
    for i, body in enumerate(raw):
        lease = Lease(f"run-{i}", "bench", 1, 0)
        Segment(engine, lease, body, 0, collect_steps=False).execute()
    return time.perf_counter() - started


def committed(url: str) -> int:
    """PostgreSQL's count of committed transactions, from a connection of its own."""
    time.sleep(STATS_SETTLE_SECONDS)
    with tenure_runtime(url) as rt:
        return _bench.transactions(rt.store)  # type: ignore[arg-type]


def durable(url: str, k: int, runs: int, tool: str = "read") -> tuple[float, int, int]:
    """(seconds, write transactions, PostgreSQL xact_commit delta or -1)."""
    with tenure_runtime(url) as rt:
        rt.enqueue_many([request(k, tool) for _ in range(runs)])
    before = committed(url)
    with tenure_runtime(url) as rt:
        rt.store  # noqa: B018 -- opened (and its schema checked) before counting
        writes = count_writes(rt)
        started = time.perf_counter()
        rt.work(concurrency=1, burst=True, poll_interval=0.01)
        seconds = time.perf_counter() - started
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=runs + 1))
        if done != runs:
            sys.exit(f"steps: {done} of {runs} runs completed")
    after = committed(url)
    return seconds, writes[0], (after - before) if before >= 0 else -1


def kept(url: str, runs: int, lease: float, keeper: bool) -> tuple[float, int]:
    """Seconds to drain `runs` runs of k = 10 at concurrency 8, with or without the keeper,
    and the write transactions it took (a keeper round is one)."""
    with tenure_runtime(url) as rt:
        rt.enqueue_many([request(KEEPER_STEPS) for _ in range(runs)])
    with tenure_runtime(url, lease_seconds=lease) as rt:
        if not keeper:
            rt._keeper.close()
        rt.store  # noqa: B018
        writes = count_writes(rt)
        started = time.perf_counter()
        rt.work(concurrency=KEEPER_CONCURRENCY, burst=True, poll_interval=0.01)
        seconds = time.perf_counter() - started
        if len(rt.runs(status=RunStatus.COMPLETED, limit=runs + 1)) != runs:
            sys.exit("steps: not every run completed")
    return seconds, writes[0]


def keeper_table(stores: list[tuple[str, Callable[[], str]]], runs: int, times: int) -> c.Table:
    per_run = steps_per_run(KEEPER_STEPS)
    table = c.Table(
        f"steps: the lease keeper's cost, ms per step, k={KEEPER_STEPS}, {runs} runs each, "
        f"concurrency {KEEPER_CONCURRENCY}"
    )
    for name, url_for in stores:
        for lease in KEEPER_LEASES:
            ms = {True: c.Series(), False: c.Series()}
            commits = {True: c.Series(), False: c.Series()}
            for _ in range(times):
                for keeper in (False, True):  # alternated: drift hits both alike
                    seconds, writes = kept(url_for(), runs, lease, keeper)
                    ms[keeper].add(seconds / (runs * per_run) * 1000)
                    commits[keeper].add(writes / (runs * per_run))
            for keeper in (False, True):
                what = f"lease {lease:g}s, {'keeper' if keeper else 'no keeper'}"
                table.add(
                    f"tenure/{name}",
                    what,
                    ms[keeper],
                    fmt=".3f",
                    baseline=ms[False] if keeper else None,
                    note="tenure/peer = without / with; target >= 0.95x" if keeper else "",
                )
                table.add(f"tenure/{name}", f"{what}: commits/step", commits[keeper], fmt=".3f")
    return table


def agent_request(k: int) -> RunRequest:
    """The same steps as `request(k)`, made by an agent function's `ctx.agent_loop`."""
    return RunRequest(
        agent="looped", input={"turns": MAX_TURNS}, model="scripted", script=script(k)
    )


def drained(url: str, requests: list[RunRequest]) -> tuple[float, float]:
    """Seconds to drain `requests`: wall and this process's CPU."""
    with tenure_runtime(url) as rt:
        rt.enqueue_many(requests)
    with tenure_runtime(url) as rt:
        rt.store  # noqa: B018
        started, cpu = time.perf_counter(), time.process_time()
        rt.work(concurrency=1, burst=True, poll_interval=0.01)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        if len(rt.runs(status=RunStatus.COMPLETED, limit=len(requests) + 1)) != len(requests):
            sys.exit("steps: not every run completed")
    return seconds, cpu


def replay_seconds(url: str, steps: int, runs: int) -> tuple[tuple[float, float], ...]:
    """Seconds per run (wall, this process's CPU) for the segment that executes `steps`
    recorded read steps (then fails, retryable), and for the next one, which replays them
    all and returns."""
    # The first segments fail with a backoff of a millisecond: the replay is not delayed.
    with tenure_runtime(url, backoff_base=0.001, backoff_cap=0.001) as rt:
        ids = rt.enqueue_many(
            [RunRequest(agent="replayed", input={"steps": steps}) for _ in range(runs)]
        )
        started, cpu = time.perf_counter(), time.process_time()
        for run_id in ids:
            rt.run_queued(run_id)
        executed = (
            (time.perf_counter() - started) / runs,
            (time.process_time() - cpu) / runs,
        )
    time.sleep(0.01)
    with tenure_runtime(url) as rt:
        rt.store  # noqa: B018
        started, cpu = time.perf_counter(), time.process_time()
        for run_id in ids:
            result = rt.run_queued(run_id)
            if result is None or result.outcome.value != "completed":
                sys.exit(f"steps: a replayed run did not complete: {result}")
        replayed = (
            (time.perf_counter() - started) / runs,
            (time.process_time() - cpu) / runs,
        )
    return executed, replayed


WALL, CPU = 0, 1
TARGET = 1.1  # an agent function's step at most this many times the loop's


# Runs drained first in each child, unmeasured: what a process does once (imports, caches,
# the first statements prepared) is not a step's cost.
WARM_RUNS = 10


def drain_child(url: str, kind: str, runs: int) -> None:
    """In a child process whose `sys.path` starts at the checkout measured: drain `runs`
    runs of `kind` (loop or agent, k = 10), after WARM_RUNS unmeasured, and print a JSON line
    of seconds (wall, this process's CPU, the PostgreSQL cluster's CPU or null) and write
    transactions."""
    asked = request(ASYNC_STEPS) if kind == "loop" else agent_request(ASYNC_STEPS)
    with tenure_runtime(url) as rt:
        rt.enqueue_many([asked] * WARM_RUNS)
        rt.work(concurrency=1, burst=True, poll_interval=0.01)
        rt.enqueue_many([asked] * runs)
        writes = count_writes(rt)
        server = c.cluster_cpu(url)
        started, cpu = time.perf_counter(), time.process_time()
        rt.work(concurrency=1, burst=True, poll_interval=0.01)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = c.cluster_cpu(url)
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=runs + WARM_RUNS + 1))
        if done != runs + WARM_RUNS:
            sys.exit("steps: not every run completed")
    server_cpu = None if server is None or after is None else after - server
    print(json.dumps({"wall": seconds, "cpu": cpu, "server": server_cpu, "writes": writes[0]}))


def drained_in(src: Path, url: str, kind: str, runs: int) -> dict[str, Any]:
    return c.checkout_child(__file__, src, "--drain-child", url, kind, runs)


Measured = dict[tuple[str, str, str], c.Series]


def agents_against(
    stores: list[tuple[str, Callable[[], str]]],
    runs: int,
    times: int,
    checkouts: dict[str, Path],
) -> c.Table:
    """An agent function's step against the loop's, for each checkout, alternating."""
    k = ASYNC_STEPS
    table = c.Table(
        f"steps: agent function step / loop step, CPU ms per step (k={k}, {runs} runs), "
        "each checkout in child processes, alternating"
    )
    for name, url_for in stores:
        series: Measured = {}
        for _ in range(times):
            for checkout, src in checkouts.items():
                got = {kind: drained_in(src, url_for(), kind, runs) for kind in ("loop", "agent")}
                pair_measured(series, checkout, got, runs)
        for checkout in checkouts:
            against_rows(table, f"{checkout}/{name}", series, checkout)
    return table


def pair_measured(
    series: Measured, checkout: str, got: dict[str, dict[str, Any]], runs: int
) -> None:
    """One repetition's loop and agent drains of one checkout, added to `series`."""
    per_run = steps_per_run(ASYNC_STEPS)

    def add(key: tuple[str, str, str], value: float) -> None:
        series.setdefault(key, c.Series()).add(value)

    def with_server(m: dict[str, Any]) -> float:
        return float(m["cpu"] + m["server"])

    for kind, m in got.items():
        add((checkout, kind, "cpu"), m["cpu"] / (runs * per_run) * 1000)
        add((checkout, kind, "writes"), m["writes"] / runs)
        if m["server"] is not None:
            add((checkout, kind, "server"), with_server(m) / (runs * per_run) * 1000)
    loop, agent = got["loop"], got["agent"]
    add((checkout, "ratio", "cpu"), agent["cpu"] / loop["cpu"])
    if loop["server"] is not None and agent["server"] is not None:
        add((checkout, "ratio", "server"), with_server(agent) / with_server(loop))


def against_rows(table: c.Table, system: str, series: Measured, checkout: str) -> None:
    for clock, label in (("cpu", "CPU"), ("server", "CPU with the server's")):
        if (checkout, "loop", clock) not in series:
            continue
        table.add(
            system, f"built-in loop step, {label}", series[checkout, "loop", clock], fmt=".3f"
        )
        table.add(
            system, f"agent function step, {label}", series[checkout, "agent", clock], fmt=".3f"
        )
        ratios = series[checkout, "ratio", clock]
        met = sum(r <= TARGET for r in ratios.values)
        table.add(
            system,
            f"agent / loop, {label}",
            ratios,
            fmt=".3f",
            note=f"per repetition; <= {TARGET}x in {met} of {len(ratios.values)}",
        )
    for kind in ("loop", "agent"):
        writes = series[checkout, kind, "writes"]
        table.add(system, f"{kind}: write transactions per run", writes, fmt=".2f")


def agents_table(stores: list[tuple[str, Callable[[], str]]], runs: int, times: int) -> c.Table:
    """An agent function's step against the built-in loop's (the same tool, model and
    steps), and the time to resume a run by replaying 10, 100 and 1,000 recorded steps: wall
    time, and this process's CPU time (the figure a loaded machine disturbs least; on
    PostgreSQL it leaves out the server's)."""
    k, per_run = ASYNC_STEPS, steps_per_run(ASYNC_STEPS)
    table = c.Table(f"steps: agent functions, ms per step (k={k}, {runs} runs) and replay")
    for name, url_for in stores:
        ms = {(kind, clock): c.Series() for kind in ("loop", "agent") for clock in (WALL, CPU)}
        for _ in range(times):  # alternated: drift hits both alike
            for kind, asked in (("loop", request(k)), ("agent", agent_request(k))):
                measured = drained(url_for(), [asked] * runs)
                for clock in (WALL, CPU):
                    ms[kind, clock].add(measured[clock] / (runs * per_run) * 1000)
        for clock, label in ((WALL, ""), (CPU, ", CPU")):
            table.add(f"tenure/{name}", f"built-in loop step{label}", ms["loop", clock], fmt=".3f")
            table.add(
                f"tenure/{name}",
                f"agent function step{label}",
                ms["agent", clock],
                fmt=".3f",
                baseline=ms["loop", clock],
                note="tenure/peer = loop / agent; target >= 0.91x (agent <= 1.1x)",
            )
        replay_rows(table, name, url_for, max(1, runs // 10), times)
    return table


def replay_rows(
    table: c.Table, name: str, url_for: Callable[[], str], replay_runs: int, times: int
) -> None:
    """Executing 10 steps against resuming by replaying 10, 100 and 1,000, alternated."""
    executed = (c.Series(), c.Series())
    replays = {(steps, clock): c.Series() for steps in REPLAY_STEPS for clock in (WALL, CPU)}
    for _ in range(times):  # alternated: drift hits each size alike
        for clock, value in enumerate(replay_seconds(url_for(), REPLAY_BASE, replay_runs)[0]):
            executed[clock].add(value * 1000)
        for steps in REPLAY_STEPS:
            replayed = replay_seconds(url_for(), steps, replay_runs)[1]
            for clock in (WALL, CPU):
                replays[steps, clock].add(replayed[clock] * 1000)
    for clock, label in ((WALL, ""), (CPU, ", CPU")):
        table.add(
            f"tenure/{name}",
            f"execute {REPLAY_BASE} steps{label}",
            executed[clock],
            fmt=".2f",
            note="ms per segment (then a retryable failure)",
        )
        for steps in REPLAY_STEPS:
            last = steps == REPLAY_STEPS[-1]
            table.add(
                f"tenure/{name}",
                f"resume by replaying {steps} steps{label}",
                replays[steps, clock],
                fmt=".2f",
                baseline=executed[clock] if last else None,
                note="ms per segment"
                + ("; tenure/peer = execute 10 / this; target >= 1x" if last else ""),
            )


def main() -> None:
    p = c.parser(__doc__.splitlines()[0], default_size=100, quick_size=3)
    p.add_argument("--keeper-only", action="store_true", help="only the keeper table")
    p.add_argument("--async-only", action="store_true", help="only the async tool table")
    p.add_argument("--agents-only", action="store_true", help="only the agent functions table")
    c.add_against(p)
    args = p.parse_args()
    runs, times = c.size_and_repeat(args)
    table = c.Table(f"steps: ms per step, {runs} runs each, concurrency 1")
    commits = c.Table("steps: commits per step (write transactions)")
    counter = itertools.count()
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        stores: list[tuple[str, Callable[[], str]]] = [
            ("SQLite", lambda: f"sqlite:///{tmp}/s{next(counter)}.db")
        ]
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("steps")))
        if args.async_only:
            c.emit(async_table(stores, runs, times), preamble=c.machine())
            return
        if args.agents_only:
            agents_only(args, stores, runs, times)
            return
        keeper = keeper_table(stores, runs, times)
        if args.keeper_only:
            c.emit(keeper, preamble=c.machine())
            return
        for k in STEPS:
            per_run = steps_per_run(k)
            base = c.Series()
            for _ in range(times):
                base.add(in_memory(k, runs) / (runs * per_run) * 1000)
            for name, url_for in stores:
                ms, per_step, xacts = c.Series(), c.Series(), c.Series()
                for _ in range(times):
                    seconds, writes, xact = durable(url_for(), k, runs)
                    ms.add(seconds / (runs * per_run) * 1000)
                    per_step.add(writes / (runs * per_run))
                    if xact >= 0:
                        xacts.add(xact / (runs * per_run))
                note = f"{per_run} steps/run ({k} tool)"
                table.add(f"tenure/{name}", f"k={k}", ms, fmt=".3f", note=note)
                table.add("no persistence", f"k={k} vs {name}", base, fmt=".3f", baseline=ms)
                extra = f"; xact_commit/step {xacts.median:.2f}" if xacts.values else ""
                commits.add(
                    f"tenure/{name}",
                    f"k={k}",
                    per_step,
                    fmt=".3f",
                    note=f"{per_step.median * per_run:.1f} per run = claim + {per_run - k - 1} "
                    f"model turns + {k} tool steps + settle{extra}",
                )
        asynchronous = async_table(stores, runs, times)
        agents = agents_table(stores, runs, times)
    c.emit(table, commits, asynchronous, agents, keeper, preamble=c.machine())


def agents_only(
    args: Any, stores: list[tuple[str, Callable[[], str]]], runs: int, times: int
) -> None:
    if args.against:
        c.emit(agents_against(stores, runs, times, c.checkouts(args)), preamble=c.machine())
    else:
        c.emit(agents_table(stores, runs, times), preamble=c.machine())


def async_table(stores: list[tuple[str, Callable[[], str]]], runs: int, times: int) -> c.Table:
    """k = 10 with the `async def` tool and with the plain one, measured in turns."""
    k, per_run = ASYNC_STEPS, steps_per_run(ASYNC_STEPS)
    table = c.Table(f"steps: async vs sync read tool, ms per step, k={k}, {runs} runs each")
    memory = {"sync": c.Series(), "async": c.Series()}
    for _ in range(times):
        for kind, tool in (("sync", "read"), ("async", "aread")):
            memory[kind].add(in_memory(k, runs, tool) / (runs * per_run) * 1000)
    for name, url_for in stores:
        ms = {"sync": c.Series(), "async": c.Series()}
        for _ in range(times):
            for kind, tool in (("sync", "read"), ("async", "aread")):
                ms[kind].add(durable(url_for(), k, runs, tool)[0] / (runs * per_run) * 1000)
        table.add(f"tenure/{name}", "sync tool", ms["sync"], fmt=".3f")
        table.add(
            f"tenure/{name}",
            "async tool",
            ms["async"],
            fmt=".3f",
            baseline=ms["sync"],
            note="tenure/peer = sync / async; target >= 0.91x",
        )
    table.add("no persistence", "sync tool", memory["sync"], fmt=".3f")
    table.add(
        "no persistence",
        "async tool",
        memory["async"],
        fmt=".3f",
        baseline=memory["sync"],
        note="the loop hand-off alone",
    )
    return table


if __name__ == "__main__":
    if sys.argv[1:2] == ["--drain-child"]:
        drain_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
