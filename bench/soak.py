"""Chaos soak: many runs, several worker processes, a nemesis; then the audit.

    python bench/soak.py --runs 2000 --workers 3 --store sqlite --kills 200

N scripted runs of 3 to 10 steps (reads, idempotent and non-idempotent writes, model time,
injected provider failures of every class) are worked by worker processes
(`python -m tests.apps`) while a nemesis, every `--interval` seconds on average, SIGKILLs a
worker (a new one replaces it), SIGTERMs one (it drains: a short grace, then its in-flight
runs are handed back), or SIGSTOPs one for up to three leases and thaws it, and on
PostgreSQL terminates the workers' backends or restarts the server (a private cluster from
`tests/_postgres.py`). When the kills are done and every run has ended, the workers drain and
`tenure.audit` checks the database and the external ledger that the `pay` tool writes.

Meanwhile the soak's own process runs `--interactive` runs (`rt.run`, one after another,
the same kind of scripts): an interactive run is held under token 1 from its start, with no
`claimed` event, and the audit covers it as it covers the queued ones.

With `--probed S`, a share S of the payments are made by `pay_probed`: the same write with a
probe that reads the ledger by idempotency key (SPEC §16), so that a run whose worker died
inside it goes back in doubt instead of to a person.

With `--agents S`, a share S of the runs are runs of the agent function `soak_agent`
(SPEC §20, in tests/apps.py): it branches on its model's answer (`pay_probed`, or a read),
books the run with a probe-able `ctx.step` write (a ledger line too), draws `ctx.now` and
`ctx.uuid`, may wait for a person's `ctx.approve` (decided by a thread of the soak, which
approves three in four), and sleeps (past the lease: the run is parked). Checked besides
the audit: no step position of an agent function recorded twice, and every write step of a
completed agent run in the ledger exactly once.

With `--fanout S`, a share S of the enqueued runs are run trees (SPEC §21): a `soak_parent`
(tests/apps.py) fans out with `ctx.map` to 2 to 8 `soak_child` runs (a model call on the
tree's budget, a probe-able booking in the ledger, perhaps a sleep past the lease, one in
twelve failing by design), in 3 trees of 10 one of them a nested `soak_parent` with 2 to 4
children of its own, and gathers them, in half the trees with `return_exceptions=True`
(else a failed child fails the parent, which cancels its children still going); a quarter
of the trees carry a `max_tokens` that some of their children meet (`budget_exhausted`);
in 3 trees of 20 the parent gathers only its first half and ends, which cancels the
children still going. With `--cancels C`, a share C of the trees is cancelled by an
operator (`rt.cancel` of the root, from the soak's process) 0.5 to 6 s after its enqueue,
whatever it is doing then (its descendants are cancelled with it).
Checked besides the audit (tests/_trees.py): no orphan and nothing left waiting, no child
created twice, each completed parent's answers equal to its children's stored ends, and
every write of a completed child in the ledger exactly once. The children count as runs.

Printed: runs, kills, stops, backend kills, restarts, completed and dead-lettered by reason,
dead-lettered runs whose non-idempotent fence stands (with and without a probe), in-doubt
requeues and probe verdicts,
recovery from a kill to the re-claim of each run the killed worker held (median, p99, by the
database's clock), refused writes (from the workers' logs), audit violations. Exit code 0
when every run ended and the audit found nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._trees import check_trees, ledger_keys, writes_not_once  # noqa: E402
from tests.apps import SOAK_CHILD_SCRIPT, make_app  # noqa: E402
from tests.crash._workers import WorkerProcess, spawn  # noqa: E402

import tenure  # noqa: E402
from tenure import Event, EventKind, RunRequest, RunStatus  # noqa: E402
from tenure.audit import audit  # noqa: E402

RETRYABLE = ["connection", "timeout", "rate_limit", "server_error", "circuit_open"]
NOT_RETRYABLE = ["auth", "configuration", "client_error", "unknown"]
MAX_REQUEUES = 5
FINISH_TIMEOUT_SECONDS = 300.0
# Every run, children included, read at once (the listing's limit).
ALL_RUNS = 1_000_000
DRAIN_GRACE_SECONDS = 0.3


# -- the workload --------------------------------------------------------------------------


def script(rng: random.Random, probed: float = 0.0) -> list[dict[str, Any]]:
    """3 to 10 steps, perhaps with a failure: once (retried), always (exhausted), or fatal.
    A share `probed` of the payments go through `pay_probed` (the same write with a probe
    that reads the ledger by idempotency key, SPEC §16)."""
    turns: list[dict[str, Any]] = []
    for _ in range(rng.randint(2, 9)):  # plus the final answer: 3 to 10 steps
        if rng.random() < 0.3:
            turns.append({"sleep": round(rng.uniform(0.05, 0.4), 2)})
        pick = rng.random()
        if pick < 0.4:
            turns.append({"call": [{"tool": "read"}]})
        elif pick < 0.7:
            turns.append({"call": [{"tool": "save"}]})
        else:
            hold = round(rng.choice([0.0, 0.0, rng.uniform(0.05, 0.3)]), 2)
            # No draw without probes: a seed gives the same workload as before they existed.
            tool = "pay_probed" if probed and rng.random() < probed else "pay"
            turns.append({"call": [{"tool": tool, "args": {"amount": 1, "hold": hold}}]})
    failure = rng.random()
    at = rng.randrange(len(turns) + 1)
    if failure < 0.15:
        fail: dict[str, Any] = {"fail": rng.choice(RETRYABLE), "attempts": [0]}
        if fail["fail"] == "rate_limit":
            # Past a third of the default lease: the run is parked, and its next claim (a
            # new attempt) goes on. A shorter wait is waited inside the segment, where the
            # attempt, and so this scripted failure, stays the same.
            fail["retry_after"] = 0.5
        turns.insert(at, fail)
    elif failure < 0.2:
        turns.insert(at, {"fail": rng.choice(NOT_RETRYABLE)})
    elif failure < 0.23:
        turns.insert(at, {"fail": rng.choice(RETRYABLE)})  # every attempt: budget spent
    return [*turns, {"say": "done"}]


def agent_request(rng: random.Random) -> RunRequest:
    """A run of `soak_agent`: its branch, its person and its sleep drawn."""
    values = {
        "amount": rng.randint(1, 9),
        "approve": rng.random() < 0.4,
        # In place, or past the lease (parked); a sleep is never over before its time.
        "sleep": rng.choice([0.0, 0.0, 0.1, 0.3, 1.5]),
    }
    answer = rng.choice(["pay", "read"])
    return RunRequest(agent="soak_agent", input=values, model="scripted", script=[{"say": answer}])


def tree_children(rng: random.Random, low: int, high: int) -> list[dict[str, Any]]:
    return [
        {
            "value": rng.randint(1, 9),
            "fail": rng.random() < 1 / 12,
            "sleep": rng.choice([0.0, 0.0, 0.0, 0.1, 1.5]),
        }
        for _ in range(rng.randint(low, high))
    ]


def tree_request(rng: random.Random) -> RunRequest:
    """A run tree's root, `soak_parent`: its children, nesting, tolerance and budget drawn."""
    nested = None
    if rng.random() < 0.3:
        nested = {"children": tree_children(rng, 2, 4), "tolerant": rng.random() < 0.5}
    values: dict[str, Any] = {
        "children": tree_children(rng, 2, 8 if nested is None else 6),
        "tolerant": rng.random() < 0.5,
        "nested": nested,
        # Gathers the first half and ends: its children still going are cancelled with it.
        "early": rng.random() < 0.15,
    }
    # A child's call uses 30 tokens: a tree of these limits meets its budget part way.
    budget = rng.choice([30, 60, 90, 150]) if rng.random() < 0.25 else None
    return RunRequest(
        agent="soak_parent",
        input=values,
        model="scripted",
        script=SOAK_CHILD_SCRIPT,
        max_tokens=budget,
    )


def requests(
    n: int,
    rng: random.Random,
    probed: float = 0.0,
    label: str = "soak",
    agents: float = 0.0,
    fanout: float = 0.0,
) -> list[RunRequest]:
    made = []
    for i in range(n):
        # No draw without trees: a seed gives the same workload as before they existed.
        if fanout and rng.random() < fanout:
            made.append(tree_request(rng))
            continue
        # No draw without agent runs: a seed gives the same workload as before they existed.
        if agents and rng.random() < agents:
            made.append(agent_request(rng))
            continue
        made.append(
            RunRequest(
                prompt=f"{label} {i}",
                model="scripted",
                tools=["read", "save", "pay", "pay_probed"],
                script=script(rng, probed),
                max_iterations=12,
            )
        )
    return made


class Cancels:
    """The operator of the trees: cancels a share of them, each at a drawn moment after its
    enqueue, from the soak's own loop (what `rt.cancel` answered, or what it raised)."""

    def __init__(self, rt: tenure.Runtime, rng: random.Random, share: float) -> None:
        self.rt, self.rng, self.share = rt, rng, share
        self.due: list[tuple[float, str]] = []
        self.done: Counter[str] = Counter()

    def plan(self, ids: list[str], made: list[RunRequest]) -> None:
        for run_id, request in zip(ids, made, strict=True):
            if self.share and request.agent == "soak_parent" and self.rng.random() < self.share:
                self.due.append((time.monotonic() + self.rng.uniform(0.5, 6.0), run_id))

    def act(self) -> None:
        now = time.monotonic()
        for at, run_id in [d for d in self.due if d[0] <= now]:
            self.due.remove((at, run_id))
            try:
                self.done["cancelled" if self.rt.cancel(run_id) else "already ended"] += 1
            except Exception as exc:  # a cancel must not fail: counted, and fails the soak
                self.done[f"raised {type(exc).__name__}"] += 1
                logging.getLogger("soak").error("cancel of %s raised %s", run_id, exc)


class Approver:
    """The person of the agent runs: decides every run waiting for approval, from a thread
    of the soak (approves three in four), while the nemesis acts."""

    def __init__(self, rt: tenure.Runtime, seed: int) -> None:
        self.rt, self.rng = rt, random.Random(seed)
        self.stopping = threading.Event()
        self.decided: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._run, name="soak-approver", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stopping.wait(0.1):
            try:
                waiting = self.rt.runs(status=RunStatus.WAITING_FOR_APPROVAL, limit=1000)
            except Exception:  # the nemesis reached this process's connections
                continue
            for run in waiting:
                approved = self.rng.random() < 0.75
                try:
                    self.rt.approve(run.id, approved, "soak-approver")
                except tenure.DecisionConflict:
                    self.decided["conflict"] += 1
                except Exception as exc:
                    self.decided[f"raised {type(exc).__name__}"] += 1
                else:
                    self.decided["approved" if approved else "denied"] += 1


def agent_steps(
    runs: list[tenure.Run], events_of: dict[str, list[Event]], ledger: Path
) -> dict[str, int]:
    """The agent function runs (SPEC §20): how they ended, step positions recorded more than
    once (a step executed again: target 0), and the write steps of completed runs against
    the ledger (each in it exactly once: target 0 otherwise)."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    in_ledger = ledger_keys(lines)
    steps = (EventKind.LLM, EventKind.TOOL, EventKind.STEP)
    found: Counter[str] = Counter()
    for run in runs:
        events = events_of[run.id]
        if not events or events[0].kind is not EventKind.REQUEST:
            continue
        if events[0].payload.get("agent") is None:
            continue
        found["runs"] += 1
        found[str(run.status)] += 1
        positions = Counter(
            e.payload["position"]
            for e in events
            if e.kind in steps and isinstance(e.payload.get("position"), int)
        )
        found["steps recorded"] += len(positions)
        found["steps recorded twice"] += sum(n - 1 for n in positions.values() if n > 1)
        if run.status is not RunStatus.COMPLETED:
            continue
        writes, missing = writes_not_once(events, in_ledger)
        found["writes of completed runs"] += writes
        found["writes not in the ledger once"] += missing
    for key in ("steps recorded twice", "writes not in the ledger once"):
        found.setdefault(key, 0)
    return dict(found)


# -- the nemesis ---------------------------------------------------------------------------


@dataclass
class Kill:
    pid: int
    at: datetime  # the database's clock
    held: dict[str, int]  # run id -> lease token held by the killed worker


@dataclass
class Chaos:
    kills: list[Kill] = field(default_factory=list)
    stops: int = 0
    zombies: int = 0  # stops that outlasted the lease
    backend_kills: int = 0
    restarts: int = 0
    drains: int = 0  # SIGTERM: in-flight runs get a short grace, then are handed back


class Nemesis:
    def __init__(self, args: argparse.Namespace, rt: tenure.Runtime, cluster: Any) -> None:
        self.args = args
        self.rt = rt
        self.cluster = cluster
        self.dbname = args.dbname
        self.rng = random.Random(args.seed + 1)
        self.chaos = Chaos()
        self.workers: list[WorkerProcess] = []
        self.retired: list[WorkerProcess] = []
        self.frozen: dict[int, float] = {}  # pid -> thaw at (monotonic)
        self.lock = threading.Lock()

    def spawn(self) -> None:
        self.workers.append(
            spawn(
                self.args.url,
                self.args.ledger,
                "--concurrency",
                str(self.args.concurrency),
                "--max-requeues",
                str(MAX_REQUEUES),
                "--grace",
                str(DRAIN_GRACE_SECONDS),
                lease=self.args.lease,
            )
        )

    def holdings(self) -> dict[int, dict[str, int]]:
        """pid -> {run id: token} of the runs each worker holds now."""
        held: dict[int, dict[str, int]] = {}
        for run in self.rt.runs(status=RunStatus.RUNNING, limit=100_000):
            pid = int(run.claimed_by.split(":")[2]) if run.claimed_by.count(":") >= 3 else 0
            held.setdefault(pid, {})[run.id] = run.lease_token
        return held

    def act(self) -> None:
        pg = self.cluster is not None
        roll = self.rng.random()
        halfway = len(self.chaos.kills) >= self.args.kills // 2
        if pg and halfway and self.chaos.restarts == 0:
            self.restart()  # at least one restart, in the middle of the chaos
        elif pg and roll < 0.04 and self.chaos.restarts < max(1, self.args.kills // 25):
            self.restart()
        elif pg and roll < 0.2:
            self.terminate_backends()
        elif roll < 0.3 and not self.args.no_stops:
            self.stop()
        elif roll < 0.4:
            self.drain_one()
        else:
            self.kill()

    def _pick(self) -> WorkerProcess | None:
        alive = [w for w in self.workers if w.pid not in self.frozen]
        if not alive:
            return None
        held = self.holdings()
        busy = [w for w in alive if held.get(w.pid)]
        return self.rng.choice(busy or alive)

    def kill(self) -> None:
        victim = self._pick()
        if victim is None:
            return
        victim.kill()
        at = self.rt.store.now()
        # Read after the kill: a dead worker changes nothing, and no lease can have expired
        # since (a lease outlives the instant between kill and read).
        held = self.holdings().get(victim.pid, {})
        self.chaos.kills.append(Kill(victim.pid, at, held))
        self.workers.remove(victim)
        self.retired.append(victim)
        self.spawn()

    def drain_one(self) -> None:
        victim = self._pick()
        if victim is None:
            return
        victim.proc.send_signal(signal.SIGTERM)  # it drains and exits on its own
        self.workers.remove(victim)
        self.retired.append(victim)
        self.chaos.drains += 1
        self.spawn()

    def stop(self) -> None:
        victim = self._pick()
        if victim is None:
            return
        length = self.rng.uniform(0.3, 3.0) * self.args.lease
        victim.freeze()
        # Thawed by a timer, not by this loop: a worker frozen inside a SQLite write
        # transaction blocks every writer, this loop's enqueues included, until it thaws.
        self.frozen[victim.pid] = time.monotonic() + length
        timer = threading.Timer(length, self._thaw, (victim,))
        timer.daemon = True
        timer.start()
        self.chaos.stops += 1
        self.chaos.zombies += length > self.args.lease

    def terminate_backends(self) -> None:
        import psycopg

        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() AND random() < 0.5",
                (self.dbname,),
            ).fetchall()
        self.chaos.backend_kills += sum(1 for (done,) in rows if done)

    def restart(self) -> None:
        self.cluster.restart()
        self.chaos.restarts += 1

    def _thaw(self, worker: WorkerProcess) -> None:
        with self.lock:
            if self.frozen.pop(worker.pid, None) is not None:
                worker.thaw()

    def thaw_all(self) -> None:
        with self.lock:
            for worker in self.workers:
                if self.frozen.pop(worker.pid, None) is not None:
                    worker.thaw()

    def drain(self) -> None:
        for worker in self.workers:
            worker.proc.send_signal(signal.SIGTERM)
        for worker in [*self.workers, *self.retired]:
            worker.stop()


# -- figures -------------------------------------------------------------------------------


def recoveries(
    rt: tenure.Runtime, kills: list[Kill]
) -> tuple[list[float], list[float], Counter[str]]:
    """Seconds from each kill to the reaper's requeue of each run the killed worker held,
    and to its next claim; what else became of the runs that were not claimed again."""
    reaped: list[float] = []
    reclaimed: list[float] = []
    other: Counter[str] = Counter()
    for kill in kills:
        for run_id, token in kill.held.items():
            events = rt.events(run_id)
            for e in events:
                if e.kind is EventKind.REQUEUED and e.lease_token == token:
                    reaped.append((e.created_at - kill.at).total_seconds())
            claim = next(
                (e for e in events if e.kind is EventKind.CLAIMED and e.lease_token > token),
                None,
            )
            if claim is not None:
                reclaimed.append((claim.created_at - kill.at).total_seconds())
                continue
            after = [e for e in events if e.lease_token == token and e.kind in _ENDINGS]
            other[str(after[0].kind) if after else "finished before the kill"] += 1
    return reaped, reclaimed, other


_ENDINGS = {EventKind.DEAD_LETTERED, EventKind.ASSEMBLED, EventKind.REQUEUED}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def dead_letter_reasons(rt: tenure.Runtime, runs: list[tenure.Run]) -> Counter[str]:
    reasons: Counter[str] = Counter()
    for run in runs:
        if not run.is_dead_letter:
            continue
        last = [e for e in rt.events(run.id) if e.kind is EventKind.DEAD_LETTERED][-1].payload
        fence = ("probed fence" if run.fence_probe else "fence") if run.pending_effect else ""
        why = last.get("error_class") or fence
        reasons[f"{run.termination_reason} ({last.get('cause')}{', ' + why if why else ''})"] += 1
    return reasons


def handed_back(rt: tenure.Runtime, runs: list[tenure.Run]) -> int:
    """Runs handed back to the queue without charging the budget (`requeued`, cause `drain`):
    by a draining worker, or by any worker for a prefetched run that waited too long."""
    return sum(
        1
        for run in runs
        for e in rt.events(run.id)
        if e.kind is EventKind.REQUEUED and e.payload.get("cause") == "drain"
    )


def fence_standing(runs: list[tenure.Run]) -> dict[str, int]:
    """Dead-lettered runs whose non-idempotent fence still stands, by whether its tool has a
    probe: the probe-able ones are the runs the probe should have saved (target 0), shown by
    how they ended (`not_retryable`: the probe could not answer; `retries_exhausted`: the
    run's requeue budget ran out, the fence kept as evidence)."""
    standing = [r for r in runs if r.is_dead_letter and r.pending_effect]
    probed = Counter(f"probe, {r.termination_reason}" for r in standing if r.fence_probe)
    no_probe = sum(not r.fence_probe for r in standing)
    return {"no probe": no_probe, "probe": probed.total(), **dict(sorted(probed.items()))}


def in_doubt(rt: tenure.Runtime, runs: list[tenure.Run]) -> dict[str, int]:
    """Requeues in doubt and the probes' verdicts."""
    counts: Counter[str] = Counter()
    for run in runs:
        for e in rt.events(run.id):
            if e.kind is EventKind.REQUEUED and e.payload.get("cause") == "in_doubt":
                counts["requeued in doubt"] += 1
            elif e.kind is EventKind.PROBE:
                verdict = e.payload.get("verdict")
                counts[f"probe {verdict}"] += 1
                if verdict == "unknown":  # why the probe could not answer
                    counts[f"probe unknown: {str(e.payload.get('reason'))[:70]}"] += 1
    return dict(sorted(counts.items()))


# -- the soak ------------------------------------------------------------------------------


@dataclass
class Interactive:
    """Runs executed here with `rt.run`, one after another, on a thread of their own."""

    pending: list[RunRequest]
    outcomes: Counter[str] = field(default_factory=Counter)
    thread: threading.Thread | None = None

    def start(self, rt: tenure.Runtime) -> None:
        self.thread = threading.Thread(target=self._run, args=(rt,), name="soak-interactive")
        self.thread.start()

    def _run(self, rt: tenure.Runtime) -> None:
        for request in self.pending:
            try:
                self.outcomes[str(rt.run(request).outcome)] += 1
            except Exception as exc:  # the nemesis reached this process's connections
                # A run left running is the reaper's (it has no stored request to retry).
                self.outcomes[f"raised {type(exc).__name__}"] += 1

    @property
    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()


def soak(args: argparse.Namespace, cluster: Any) -> dict[str, Any]:
    rt = make_app(args.url, str(args.ledger), args.lease, MAX_REQUEUES)
    rng = random.Random(args.seed)
    started = time.monotonic()
    pending = requests(args.runs, rng, args.probed, agents=args.agents, fanout=args.fanout)
    here = Interactive(requests(args.interactive, random.Random(args.seed + 1), 0.0, "here"))
    ids: list[str] = []
    cancels = Cancels(rt, random.Random(args.seed + 3), args.cancels)
    nemesis = Nemesis(args, rt, cluster)
    for _ in range(args.workers):
        nemesis.spawn()
    approver = Approver(rt, args.seed + 2)
    approver.start()
    here.start(rt)
    next_act = time.monotonic() + nemesis.rng.uniform(0.5, 1.5) * args.interval
    deadline = time.monotonic() + FINISH_TIMEOUT_SECONDS + args.runs / (args.rate or 1e9)
    try:
        while time.monotonic() < deadline:
            # Runs arrive at --rate per second (all at once without one).
            due = len(pending) if not args.rate else int((time.monotonic() - started) * args.rate)
            if due > len(ids):
                fresh = rt.enqueue_many(pending[len(ids) : due])
                cancels.plan(fresh, pending[len(ids) : due])
                ids += fresh
            cancels.act()
            # Children included: every run is terminal only when no parent can make more.
            every = rt.runs(limit=ALL_RUNS)
            ended = all(r.status.is_terminal for r in every)
            all_in = len(ids) == args.runs and here.done
            if all_in and ended and len(nemesis.chaos.kills) >= args.kills:
                break
            if len(nemesis.chaos.kills) < args.kills and time.monotonic() >= next_act:
                nemesis.act()
                next_act = time.monotonic() + nemesis.rng.uniform(0.5, 1.5) * args.interval
            time.sleep(0.05)
        nemesis.thaw_all()
    finally:
        approver.stop()
        nemesis.drain()
        if here.thread is not None:
            here.thread.join()
    wall = time.monotonic() - started
    runs = rt.runs(limit=ALL_RUNS)
    events_of = {r.id: rt.events(r.id) for r in runs}
    ledger_lines = args.ledger.read_text().splitlines() if args.ledger.exists() else []
    trees = check_trees(runs, events_of, ledger_lines)
    in_trees = trees.counts.pop("runs in trees", 0)
    report = audit(
        rt.store,
        args.ledger,
        max_requeues=MAX_REQUEUES,
        worker_logs=[w.log for w in [*nemesis.workers, *nemesis.retired]],
    )
    reaped, recovered, other = recoveries(rt, nemesis.chaos.kills)
    statuses = Counter(str(r.status) for r in runs)
    chaos = nemesis.chaos
    result = {
        "store": args.store,
        "runs": len(ids),
        "runs_in_trees": in_trees,
        "interactive": dict(sorted(here.outcomes.items())),
        "arrival_per_s": args.rate or "all at once",
        "workers": args.workers,
        "concurrency": args.concurrency,
        "lease_seconds": args.lease,
        "kills": len(chaos.kills),
        "stops": chaos.stops,
        "stops_past_lease": chaos.zombies,
        "backend_kills": chaos.backend_kills,
        "restarts": chaos.restarts,
        "drains": chaos.drains,
        "handed_back": handed_back(rt, runs),
        "completed": statuses.get("completed", 0),
        "not_ended": sum(not r.status.is_terminal for r in runs),
        "dead_lettered": dict(sorted(dead_letter_reasons(rt, runs).items())),
        "fence_standing": fence_standing(runs),
        "in_doubt": in_doubt(rt, runs),
        "runs_held_at_kills": sum(len(k.held) for k in chaos.kills),
        "reclaimed": len(recovered),
        "held_not_reclaimed": dict(other),
        "reaped_median_s": round(statistics.median(reaped), 3) if reaped else None,
        "reaped_p99_s": round(percentile(reaped, 0.99), 3) if reaped else None,
        "recovery_median_s": round(statistics.median(recovered), 3) if recovered else None,
        "recovery_p99_s": round(percentile(recovered, 0.99), 3) if recovered else None,
        "recovery_max_s": round(max(recovered), 3) if recovered else None,
        "agent_runs": agent_steps(runs, events_of, args.ledger),
        "trees": {"runs": in_trees, **dict(sorted(trees.counts.items()))},
        "tree_problems": trees.problems,
        "approvals": dict(sorted(approver.decided.items())),
        "tree_cancels": dict(sorted(cancels.done.items())),
        "ledger_writes": report.ledger_entries,
        "interrupted_writes": report.unrecorded_writes,
        "refused_writes": report.refused_writes,
        "violations": report.violations,
        "wall_seconds": round(wall, 1),
    }
    rt.close()
    return result


def show(result: dict[str, Any]) -> None:
    width = 28
    for key, value in result.items():
        if key in ("violations", "tree_problems"):
            label = "audit violations" if key == "violations" else "tree problems"
            print(f"{label:<{width}} {len(value)}")
            for v in value[:50]:
                print(f"  VIOLATION {v}")
        elif isinstance(value, dict):
            total = value.get("runs", sum(value.values()))
            print(f"{key.replace('_', ' '):<{width}} {total}")
            for k, n in value.items():
                print(f"  {k:<{width - 2}} {n}")
        else:
            print(f"{key.replace('_', ' '):<{width}} {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--interactive", type=int, default=5, help="runs executed here with rt.run, audited too"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4, help="per worker")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs before the end")
    parser.add_argument("--interval", type=float, default=2.0, help="mean seconds between acts")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="runs enqueued per second (0: all at once)"
    )
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-stops", action="store_true", help="no SIGSTOP (its share of the acts drains)"
    )
    parser.add_argument(
        "--probed",
        type=float,
        default=0.0,
        help="share of the payments made by `pay_probed`, whose probe reads the ledger",
    )
    parser.add_argument(
        "--agents",
        type=float,
        default=0.0,
        help="share of the runs that run the agent function `soak_agent` (SPEC §20)",
    )
    parser.add_argument(
        "--fanout",
        type=float,
        default=0.0,
        help="share of the runs that are run trees of `soak_parent` and its children (§21)",
    )
    parser.add_argument(
        "--cancels",
        type=float,
        default=0.0,
        help="share of the run trees an operator cancels while they run (with --fanout)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead")
    args = parser.parse_args(argv)
    # The soak's own connections see the nemesis too; their retries are expected noise.
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="tenure-soak-") as tmp:
        args.ledger = Path(tmp) / "ledger"
        cluster = None
        if args.store == "postgres":
            from tests._postgres import Cluster, find_bindir

            bindir = find_bindir()
            if bindir is None:
                print("PostgreSQL binaries (initdb, pg_ctl) not found", file=sys.stderr)
                return 2
            cluster = Cluster(bindir)
            cluster.init()
            cluster.start()
            cluster.make_template()
            args.dbname = cluster.create_database()
            args.url = cluster.url(args.dbname)
        else:
            args.dbname = ""
            args.url = f"sqlite:///{Path(tmp) / 'soak.db'}"
        try:
            result = soak(args, cluster)
        finally:
            if cluster is not None:
                cluster.destroy()
    if args.json:
        print(json.dumps(result))
    else:
        show(result)
    agents = result["agent_runs"]
    repeated = agents["steps recorded twice"] + agents["writes not in the ledger once"]
    raised = any(k.startswith("raised") for k in result["tree_cancels"])
    clean = not result["violations"] and not result["tree_problems"] and not raised
    return 0 if clean and not result["not_ended"] and not repeated else 1


if __name__ == "__main__":
    sys.exit(main())
