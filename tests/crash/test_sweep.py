"""The crash-point sweep: a worker process SIGKILLed at each named point of a segment, on
every store, several times; then another worker finishes and the audit passes.

Each point is reached with real parts only — scripted turns and the test tools of
`tests.apps`, never a hook in tenure:

| point     | how the worker is held there                                  | SPEC says          |
|-----------|---------------------------------------------------------------|--------------------|
| claimed   | a `sleep` turn before the first answer; killed once `claimed` | resume, complete   |
|           | is committed                                                  |                    |
| model     | a `sleep` turn after recorded read and idempotent-write steps | resume without     |
|           |                                                               | repeating them     |
| fenced    | `pay` waits for a gate file at its start (fence stamped,      | dead-letter        |
|           | effect not done)                                              | not_retryable (§7) |
| effect    | `pay` holds after its ledger line                             | dead-letter        |
| returned  | `pay` returns a value that takes long to serialise: returned, | dead-letter        |
|           | event not recorded                                            |                    |
| returned_ | the same for `save`, an idempotent write                      | requeue, run again |
| idempotent|                                                               | under the same key |
| settle    | the test holds the database's write lock (SQLite) or the row  | resume, the final  |
|           | (PostgreSQL) while the final answer is settled                | model call again   |

Two more points are inside the probe of an interrupted write (SPEC §16), reached by a second
kill: the first worker is killed inside `pay_checked` (a write with a probe), the run goes
back in doubt, and the next worker is killed

| point     | how the worker is held there                                  | SPEC says          |
|-----------|---------------------------------------------------------------|--------------------|
| probe     | the probe sleeps on the run's first probe (killed once it     | in doubt again;    |
|           | notes `probing`); the write was held at its gate: not done    | the probe runs     |
|           |                                                               | again, pays once   |
| verdict   | the probe answers `done` with a result that takes long to     | in doubt again;    |
|           | serialise: verdict given, its transaction not made            | `done`, paid once  |
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure import EventKind, RunRequest, RunStatus, TerminationReason, ToolEffect
from tenure.audit import audit, read_ledger

from ..apps import make_app
from .test_kill import spawn_worker, stop, wait_for

LEASE = 1.0
RUNS_PER_KILL = 2
REPEATS = 2
MODEL_SLEEP = 0.6  # shorter than the lease: the victim's own reaper must not take its run
pytestmark = pytest.mark.slow

READ = {"call": [{"tool": "read"}]}
SAVE = {"call": [{"tool": "save"}]}


def pay(**args: Any) -> dict[str, Any]:
    return {"call": [{"tool": "pay", "args": {"amount": 7, **args}}]}


@dataclass(frozen=True)
class Point:
    script: Callable[[Path], list[dict[str, Any]]]
    reached: Callable[[Sweep, str], bool]
    completes: bool  # else dead-lettered not_retryable with the fence standing
    ledger_lines: int  # per run
    hold_writes: bool = False
    starts: int | None = None  # per run, how often its write tool started, if it matters


@dataclass
class Sweep:
    rt: tenure.Runtime
    ledger: Path
    db_url: str
    logs: list[Path] = field(default_factory=list)

    def kinds(self, run_id: str) -> list[EventKind]:
        return [e.kind for e in self.rt.events(run_id)]

    def tools(self, run_id: str) -> list[str]:
        return [e.payload["name"] for e in self.rt.events(run_id) if e.kind is EventKind.TOOL]

    def marks(self, run_id: str, where: str) -> int:
        path = Path(f"{self.ledger}.marks")
        if not path.exists():
            return 0
        return sum(
            1
            for line in path.read_text().splitlines()
            if line.startswith(run_id) and line.endswith(where)
        )


POINTS = {
    "claimed": Point(
        lambda _: [{"sleep": MODEL_SLEEP}, READ, {"say": "done"}],
        lambda s, r: EventKind.CLAIMED in s.kinds(r),
        completes=True,
        ledger_lines=0,
    ),
    "model": Point(
        lambda _: [READ, SAVE, {"sleep": MODEL_SLEEP}, {"say": "done"}],
        lambda s, r: s.tools(r) == ["read", "save"],
        completes=True,
        ledger_lines=0,
    ),
    "fenced": Point(
        lambda gate: [READ, pay(gate=str(gate)), {"say": "paid"}],
        lambda s, r: s.marks(r, "started") == 1,
        completes=False,
        ledger_lines=0,
        starts=1,
    ),
    "effect": Point(
        lambda _: [READ, pay(hold=30.0), {"say": "paid"}],
        lambda s, r: any(e.run_id == r for e in read_ledger(s.ledger)),
        completes=False,
        ledger_lines=1,
        starts=1,
    ),
    "returned": Point(
        lambda _: [READ, pay(slow_return=30.0), {"say": "paid"}],
        lambda s, r: s.marks(r, "returned") == 1,
        completes=False,
        ledger_lines=1,
        starts=1,
    ),
    "returned_idempotent": Point(
        lambda _: [
            READ,
            {"call": [{"tool": "save", "args": {"slow_return": 30.0}}]},
            {"say": "ok"},
        ],
        lambda s, r: s.marks(r, "returned") == 1,
        completes=True,
        ledger_lines=0,
        starts=2,  # an idempotent write is run again, under the same key
    ),
    "settle": Point(
        lambda _: [READ, pay(), {"sleep": MODEL_SLEEP}, {"say": "paid"}],
        lambda s, r: s.tools(r) == ["read", "pay"],
        completes=True,
        ledger_lines=1,
        hold_writes=True,
    ),
}


@contextlib.contextmanager
def writes_held(db_url: str, run_ids: list[str]) -> Iterator[None]:
    """Block the settle of these runs from outside: SQLite's writer lock, or their rows'
    locks on PostgreSQL. The victim is killed while its settle waits; nothing commits."""
    if db_url.startswith("sqlite:"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(db_url) as pg, pg.transaction():
        pg.execute("SELECT 1 FROM tenure_runs WHERE id = ANY(%s) FOR UPDATE", (run_ids,))
        yield


@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("name", list(POINTS))
def test_sigkill_at_each_point(name: str, repeat: int, db_url: str, tmp_path: Path) -> None:
    point = POINTS[name]
    ledger = tmp_path / "ledger"
    gate = tmp_path / "gate"
    rt = make_app(db_url, str(ledger), LEASE)
    sweep = Sweep(rt, ledger, db_url)
    request = RunRequest(
        prompt="crash", model="scripted", tools=["read", "save", "pay"], script=point.script(gate)
    )
    ids = rt.enqueue_many([request] * RUNS_PER_KILL)
    victim = spawn_worker(db_url, ledger, "--lease", str(LEASE), "--concurrency", "2")
    survivor = None
    try:
        wait_for(lambda: all(point.reached(sweep, r) for r in ids), 20)
        if point.hold_writes:
            with writes_held(db_url, ids):
                time.sleep(MODEL_SLEEP + 0.4)  # the final answer is in, its settle waits
                victim.send_signal(signal.SIGKILL)
                victim.wait()
        else:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
        gate.touch()
        survivor = spawn_worker(db_url, ledger, "--lease", str(LEASE), "--concurrency", "2")
        wait_for(lambda: all(rt.status(r).status.is_terminal for r in ids), 30)  # type: ignore[union-attr]
    finally:
        stop(victim)
        if survivor is not None:
            stop(survivor)
    try:
        _check(sweep, point, ids)
    finally:
        rt.close()


def _check(sweep: Sweep, point: Point, ids: list[str]) -> None:
    rt = sweep.rt
    lines = Counter(e.run_id for e in read_ledger(sweep.ledger))
    for run_id in ids:
        run = rt.status(run_id)
        assert run is not None
        events = rt.events(run_id)
        causes = [e.payload.get("cause") for e in events if e.kind is EventKind.REQUEUED]
        dead = [e.payload for e in events if e.kind is EventKind.DEAD_LETTERED]
        if point.completes:
            assert run.status is RunStatus.COMPLETED, (run, events)
            assert causes == ["stale"] and run.attempt == 1
        else:
            assert run.status is RunStatus.FAILED, (run, events)
            assert run.termination_reason is TerminationReason.NOT_RETRYABLE
            assert run.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE
            assert causes == [] and [d["cause"] for d in dead] == ["stale"]
            assert not rt.redrive(run_id), "redrive must refuse while the fence stands"
        # A step recorded before the kill was never executed again.
        reads = [e for e in events if e.kind is EventKind.TOOL and e.payload["name"] == "read"]
        assert len(reads) == 1
        assert lines[run_id] == point.ledger_lines
        if point.starts is not None:
            assert sweep.marks(run_id, "started") == point.starts
    report = audit(rt.store, sweep.ledger, stranded_after=5)
    assert report.ok, report.summary()
    assert report.unrecorded_writes == (0 if point.completes else sum(lines.values()))


# -- inside the probe -------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbePoint:
    args: dict[str, Any]  # of pay_checked
    paid_before_the_kill: bool  # the first worker dies after its payment, else before it
    mark: str  # noted by the probe where the second worker is killed


PROBE_POINTS = {
    "probe": ProbePoint({"probe_hold": 2.5}, paid_before_the_kill=False, mark="probing"),
    "verdict": ProbePoint(
        {"hold": 30.0, "slow_verdict": 30.0}, paid_before_the_kill=True, mark="returned"
    ),
}


@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("name", list(PROBE_POINTS))
def test_sigkill_inside_the_probe(name: str, repeat: int, db_url: str, tmp_path: Path) -> None:
    """Two kills per run: inside its write (it goes back in doubt), then at the point inside
    the probe that resolves it. The run goes back in doubt again, the next worker's probe
    runs again and decides, and the payment is in the ledger exactly once."""
    point = PROBE_POINTS[name]
    ledger = tmp_path / "ledger"
    gate = tmp_path / "gate"
    rt = make_app(db_url, str(ledger), LEASE)
    sweep = Sweep(rt, ledger, db_url)
    gated = {} if point.paid_before_the_kill else {"gate": str(gate)}
    args = {"amount": 7, **point.args, **gated}
    request = RunRequest(
        prompt="crash",
        model="scripted",
        tools=["read", "pay_checked"],
        script=[READ, {"call": [{"tool": "pay_checked", "args": args}]}, {"say": "paid"}],
    )
    ids = rt.enqueue_many([request] * RUNS_PER_KILL)

    def writing(run_id: str) -> bool:
        if point.paid_before_the_kill:
            return any(e.run_id == run_id for e in read_ledger(ledger))
        return sweep.marks(run_id, "started") == 1

    workers = [spawn_worker(db_url, ledger, "--lease", str(LEASE), "--concurrency", "2")]
    try:
        wait_for(lambda: all(writing(r) for r in ids), 20)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        gate.touch()  # a write run again after `not_done` goes through at once
        workers.append(spawn_worker(db_url, ledger, "--lease", str(LEASE), "--concurrency", "2"))
        wait_for(lambda: all(sweep.marks(r, point.mark) == 1 for r in ids), 30)
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait()
        workers.append(spawn_worker(db_url, ledger, "--lease", str(LEASE), "--concurrency", "2"))
        wait_for(lambda: all(rt.status(r).status.is_terminal for r in ids), 30)  # type: ignore[union-attr]
    finally:
        for worker in workers:
            stop(worker)
    try:
        _check_probed(sweep, point, ids)
    finally:
        rt.close()


def _check_probed(sweep: Sweep, point: ProbePoint, ids: list[str]) -> None:
    rt = sweep.rt
    lines = Counter(e.run_id for e in read_ledger(sweep.ledger))
    for run_id in ids:
        run = rt.status(run_id)
        events = rt.events(run_id)
        assert run is not None and run.status is RunStatus.COMPLETED, (run, events)
        assert lines[run_id] == 1  # exactly once, whichever worker paid
        causes = [e.payload.get("cause") for e in events if e.kind is EventKind.REQUEUED]
        assert causes == ["in_doubt", "in_doubt"] and run.attempt == 2
        assert sweep.marks(run_id, "probing") == 2  # the killed probe, then the one that told
        verdicts = [e.payload["verdict"] for e in events if e.kind is EventKind.PROBE]
        assert verdicts == ["done" if point.paid_before_the_kill else "not_done"]
        assert sweep.marks(run_id, "started") == (1 if point.paid_before_the_kill else 2)
        reads = [e for e in events if e.kind is EventKind.TOOL and e.payload["name"] == "read"]
        assert len(reads) == 1
    report = audit(rt.store, sweep.ledger, stranded_after=5)
    assert report.ok, report.summary()
