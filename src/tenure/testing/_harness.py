"""`crashtest`: each scenario once uncrashed (the reference), then once per crash point with
a real worker process SIGKILLed there, each judged on the six properties of SPEC §19."""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure import Runtime
from tenure._errors import InvalidRequest
from tenure.audit import audit
from tenure.testing._cases import REFERENCE, Case, Options, Point, Runner
from tenure.testing._hooks import (
    CHILD,
    DRAIN,
    POINT_KINDS,
    RESUME,
    STEP,
    WAITING,
    WRITE_AFTER,
    WRITE_BEFORE,
    WRITE_TIMEOUT,
)
from tenure.testing._properties import PROPERTIES, Check, Ending, Finished, Verdict, ending, judge
from tenure.testing._scenarios import Scenario, load_scenarios


@dataclass(frozen=True)
class Result:
    scenario: str
    point: str
    verdicts: dict[str, Verdict]
    run_id: str
    database: str

    @property
    def ok(self) -> bool:
        return all(v.ok is not False for v in self.verdicts.values())

    @property
    def violations(self) -> list[str]:
        return [f"{p}: {v.detail}" for p, v in self.verdicts.items() if v.ok is False]


@dataclass
class CrashReport:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def violations(self) -> list[str]:
        """One line per violated property: `scenario / point / property: why`."""
        return [f"{r.scenario} / {r.point} / {line}" for r in self.results for line in r.violations]

    def violated(self, prop: str) -> list[Result]:
        return [r for r in self.results if r.verdicts[prop].ok is False]


def points_of(trace: Path, kinds: Sequence[str]) -> list[Point]:
    """The crash points a reference run passed, in order, from its processes' trace."""
    found: list[Point] = []
    lines = trace.read_text(encoding="utf-8").splitlines() if trace.exists() else []
    first_step: str | None = None  # the first step a worker committed: where it drains
    for line in lines:
        kind, target, *rest = line.split()
        if kind == DRAIN and first_step is None:
            first_step = target
        if kind == WRITE_BEFORE:
            found.append(Point(WRITE_BEFORE, target, rest[0]))
            found.append(Point(WRITE_AFTER, target, rest[0]))
            found.append(Point(WRITE_TIMEOUT, target, rest[0]))
        elif kind == STEP:
            found.append(Point(kind, target, step=rest[0] if rest else ""))
        elif kind in (WAITING, RESUME, CHILD):
            found.append(Point(kind, target))
    if first_step is not None:
        found.append(Point(DRAIN, first_step))
    unique = list(dict.fromkeys(found))
    return [p for p in unique if p.kind in kinds or p.label in kinds]


def writes_of(trace: Path) -> dict[str, str]:
    lines = trace.read_text(encoding="utf-8").splitlines() if trace.exists() else []
    return {
        parts[1]: parts[2] for parts in (line.split() for line in lines) if parts[0] == WRITE_BEFORE
    }


def parse_points(text: str | Sequence[str] | None) -> list[str]:
    """`--points step,write-before,…` (kinds), or exact point labels; default: every kind."""
    if text is None:
        return list(POINT_KINDS)
    items = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    items = [p for p in items if p]
    unknown = [p for p in items if p.split(" ")[0] not in POINT_KINDS]
    if unknown or not items:
        raise InvalidRequest(
            f"--points: unknown crash point kind {unknown[0] if unknown else '(none)'}; "
            f"choose from {', '.join(POINT_KINDS)}"
        )
    return items


def app_spec_of(runtime: Runtime) -> str:
    """`MODULE:ATTR` of a module-level Runtime, for the child processes to import."""
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is runtime:
                return f"{name}:{attr}"
    raise InvalidRequest(
        "the Runtime must be a module-level attribute of an importable module "
        "(or pass app='MODULE:ATTR'): the crash-test workers import it"
    )


def _module_check(app: str) -> Check | None:
    found = getattr(importlib.import_module(app.partition(":")[0]), "check", None)
    return found if callable(found) else None


class Harness:
    def __init__(
        self,
        runtime: Runtime,
        options: Options,
        check: Check | None,
        workdir: Path,
        database: str | None,
        progress: Callable[[Result], None] | None,
    ) -> None:
        self.rt, self.options, self.check = runtime, options, check
        self.workdir, self.database, self.progress = workdir, database, progress
        self.runner = Runner(runtime, options, workdir)
        self._cases = 0

    def _new_case(self, scenario: Scenario, point: Point) -> tuple[Case, str, Path]:
        self._cases += 1
        n = self._cases
        database = self.database or f"sqlite:///{(self.workdir / f'case-{n}.db').resolve()}"
        queue = f"crashtest-{uuid.uuid4().hex[:12]}"
        return Case(scenario, point, database), queue, self.workdir / f"case-{n}.trace"

    def _finish(self, case: Case, trace: Path) -> Finished:
        store = self.rt.store
        return Finished(
            case,
            store.get_run(case.run_id, with_request=True),
            store.events(case.run_id),
            writes_of(trace),
            audit(store, max_requeues=self.rt.settings.max_requeues),
        )

    def _judge(self, finished: Finished, reference: Ending | None) -> Result:
        case = finished.case
        verdicts = judge(finished, reference, self.check)
        result = Result(case.scenario.name, case.point.label, verdicts, case.run_id, case.database)
        if self.progress is not None:
            self.progress(result)
        return result

    def scenario(self, scenario: Scenario, kinds: Sequence[str]) -> list[Result]:
        case, queue, trace = self._new_case(scenario, REFERENCE)
        finished = self._finish(self.runner.run(case, queue, trace), trace)
        reference = ending(finished.run)
        results = [self._judge(finished, reference)]
        for point in points_of(trace, kinds):
            case, queue, trace = self._new_case(scenario, point)
            case = self.runner.run(case, queue, trace)
            results.append(self._judge(self._finish(case, trace), reference))
        return results


def crashtest(
    runtime: Runtime,
    scenarios: str | Path | Iterable[Scenario | Mapping[str, Any]],
    *,
    points: str | Sequence[str] | None = None,
    app: str | None = None,
    check: Check | None = None,
    database: str | None = None,
    deciders: int = 3,
    lease_seconds: float = 1.0,
    write_timeout: float = 2.0,
    workdir: str | Path | None = None,
    progress: Callable[[Result], None] | None = None,
) -> CrashReport:
    """Crash-test the agent of `runtime` (SPEC §19) and return the report (`.ok`).

    `scenarios`: a JSON file or objects (`name` + a RunRequest's fields). `points`: kinds
    (`step`, `write-before`, `write-after`, `write-timeout`, `waiting`, `resume`,
    `drain`) or exact labels;
    default all. `app`: where the workers import the Runtime (default: found by identity
    in its module). `check(tool_name, idempotency_key) -> int`: how often the outside system
    saw that write (default: the module's `check`). `database`: one PostgreSQL database for
    every case, each on a queue of its own (default: a fresh SQLite file per case).
    """
    wanted = parse_points(points)
    found = load_scenarios(scenarios)
    for s in found:
        runtime._validate(s.request)
    if deciders < 1:
        raise InvalidRequest(f"deciders must be at least 1, got {deciders}")
    spec = app or app_spec_of(runtime)
    options = Options(spec, lease_seconds, write_timeout, deciders)
    own_dir = workdir is None
    where = Path(tempfile.mkdtemp(prefix="tenure-crashtest-") if own_dir else str(workdir))
    where.mkdir(parents=True, exist_ok=True)
    original = runtime.database_url
    harness = Harness(runtime, options, check or _module_check(spec), where, database, progress)
    report = CrashReport()
    started = time.monotonic()
    try:
        for s in found:
            report.results.extend(harness.scenario(s, wanted))
    finally:
        runtime.use_database(original)
        if own_dir and report.ok:
            shutil.rmtree(where, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report


__all__ = ["PROPERTIES", "CrashReport", "Result", "crashtest"]
