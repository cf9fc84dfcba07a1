"""One case of a crash test: one scenario, run to its end through real worker and decider
processes, with (or, for the reference, without) a crash point armed in them."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure import Runtime
from tenure._types import Event, Run, RunStatus
from tenure.testing._scenarios import Scenario

# A run meets a person at most this often in one case (each round: a worker, or deciders).
MAX_ROUNDS = 24
# How long a decider waits at the rendezvous for the others to reach their decisions.
MEET_TIMEOUT = 10.0
WAITING = (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_INPUT)


@dataclass(frozen=True)
class Options:
    app: str  # MODULE:ATTR, importable by the child processes
    lease: float = 1.0
    timeout_cap: float = 2.0
    deciders: int = 3
    phase_timeout: float = 60.0
    meet_timeout: float = MEET_TIMEOUT


@dataclass(frozen=True)
class Point:
    kind: str
    target: str = ""
    tool: str = ""  # the write's tool, for a write point
    step: str = ""  # POSITION:STEP:NAME of an agent function's step, for a step point

    @property
    def label(self) -> str:
        where = f"{self.tool}@{self.target}" if self.tool else self.target
        if self.step:
            position, kind, name = self.step.split(":", 2)
            what = kind if name in (kind, "") else f"{kind} {name}"
            where += f" ({what}@{position})"
        return f"{self.kind} {where}".strip()


REFERENCE = Point("reference")


@dataclass
class Hold:
    """One time the run waited for a person, and what the k deciders did."""

    turn: int
    calls: list[dict[str, Any]]
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    killed: int = 0


@dataclass
class Case:
    scenario: Scenario
    point: Point
    database: str
    run_id: str = ""
    killed: bool = False
    before: list[Event] = field(default_factory=list)  # the journal right after the kill
    before_run: Run | None = None
    holds: list[Hold] = field(default_factory=list)
    stuck: str | None = None
    logs: list[Path] = field(default_factory=list)


def _env() -> dict[str, str]:
    # The children import what this process can import (a test module's app, say).
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, "PYTHONPATH": path}


class Runner:
    def __init__(self, rt: Runtime, options: Options, workdir: Path) -> None:
        self.rt, self.options, self.workdir = rt, options, workdir
        self._numbers = 0

    def _command(self, case: Case, role: str, queue: str, trace: Path, armed: bool) -> list[str]:
        o = self.options
        command = [sys.executable, "-m", "tenure.testing._child", role, "--app", o.app]
        command += ["--database", case.database, "--run", case.run_id, "--queue", queue]
        command += ["--lease", str(o.lease), "--timeout-cap", str(o.timeout_cap)]
        command += ["--deadline", str(o.phase_timeout), "--trace", str(trace)]
        if armed and case.point is not REFERENCE:
            command += ["--kind", case.point.kind, "--target", case.point.target]
        return command

    def _spawn(self, case: Case, command: list[str]) -> subprocess.Popen[str]:
        self._numbers += 1
        log = self.workdir / f"child-{self._numbers}.log"
        case.logs.append(log)
        with log.open("w") as err:
            return subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, env=_env()
            )

    def _wait(self, proc: subprocess.Popen[str]) -> tuple[int, str]:
        try:
            out, _ = proc.communicate(timeout=self.options.phase_timeout + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return proc.returncode, out

    def run(self, case: Case, queue: str, trace: Path) -> Case:
        rt = self.rt
        rt.use_database(case.database)
        request = dataclasses.replace(case.scenario.request, queue=queue)
        case.run_id = rt.enqueue(request)
        for _ in range(MAX_ROUNDS):
            run = rt.status(case.run_id)
            assert run is not None
            if run.status.is_terminal:
                return case
            armed = not case.killed
            if run.status in WAITING:
                self._decide(case, run, queue, trace, armed)
            else:
                command = self._command(case, "work", queue, trace, armed)
                code, _ = self._wait(self._spawn(case, command))
                self._after(case, code, armed)
                if code == 3:
                    case.stuck = f"the run did not end within {self.options.phase_timeout:g}s"
                    return case
        case.stuck = f"the run was still not ended after {MAX_ROUNDS} rounds"
        return case

    def _after(self, case: Case, code: int, armed: bool) -> None:
        if armed and code == -signal.SIGKILL and not case.killed:
            case.killed = True
            case.before = self.rt.events(case.run_id)
            case.before_run = self.rt.status(case.run_id)

    def _decide(self, case: Case, run: Run, queue: str, trace: Path, armed: bool) -> None:
        """k processes decide the waiting run at the same moment (SPEC §19 consume-once):
        started together, each one's decision then waits at the rendezvous in `gate` until all
        k have reached theirs (or returned without one), so every one has read the run as
        waiting before any decision is written."""
        waiting = self.rt.store.waiting_of(case.run_id)
        record = waiting[1] if waiting is not None else None
        hold = Hold(int((record or {}).get("turn", -1)), list((record or {}).get("calls", [])))
        case.holds.append(hold)
        gate = self.workdir / f"gate-{self._numbers}"
        gate.mkdir()
        scenario = case.scenario
        procs = []
        for i in range(self.options.deciders):
            command = self._command(case, "decide", queue, trace, armed)
            command += ["--who", f"decider-{i + 1}", "--gate", str(gate)]
            command += ["--deciders", str(self.options.deciders)]
            command += ["--meet-timeout", str(self.options.meet_timeout)]
            command += ["--input", json.dumps(scenario.input)]
            if not scenario.approve:
                command.append("--deny")
            procs.append(self._spawn(case, command))
        deadline = time.monotonic() + self.options.phase_timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if len(list(gate.glob("ready-*"))) == len(procs):
                break
            time.sleep(0.01)
        (gate / "go").touch()
        for proc in procs:
            code, out = self._wait(proc)
            self._after(case, code, armed)
            if code == -signal.SIGKILL:
                hold.killed += 1
                continue
            line = out.strip().splitlines()[-1] if out.strip() else ""
            try:
                hold.outcomes.append(json.loads(line))
            except ValueError:
                hold.outcomes.append({"won": False, "error": f"exit {code}: {line[:200]}"})
