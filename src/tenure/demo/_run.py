"""`tenure demo`: the main job on the embedded default (SPEC §12).

A fresh SQLite file; a few hundred scripted runs, and a handful run interactively in the
demo's own process; two worker processes (`tenure worker`);
one of them SIGKILLed while it holds runs, and a replacement started; a live progress
display; then a table by status and reason and the audit of `_audit.py`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tenure import Run, RunStatus, ToolEffect
from tenure._command import CliError, UsageError
from tenure.demo._app import app, connect, sqlite_path
from tenure.demo._audit import Audit, audit
from tenure.demo._workload import INTERACTIVE_RUNS, SCENARIOS, interactive, workload

DEFAULT_DEMO_DATABASE = "sqlite:///tenure-demo.db"
# Kill the first worker once this share of the runs has ended (it still holds some then).
KILL_AT = 0.3
# From then on, how long to look for a worker inside an invoice before killing one anyway.
INSIDE_WRITE_WAIT = 5.0
TICK_SECONDS = 0.2
STOP_TIMEOUT = 20.0
# No run ending for this long means the workers are stuck; longer than a fence's lease
# (a write tool's timeout plus the margin), after which a killed write is reaped.
STALL_SECONDS = 45.0


@dataclass(frozen=True)
class DemoOptions:
    database_url: str | None = None
    runs: int = 300
    concurrency: int = 8
    seed: int = 7
    # A short lease so a killed worker's runs come back within seconds; short backoffs.
    lease_seconds: float = 2.0
    backoff_base: float = 0.2
    poll_interval: float = 0.2
    deadline_seconds: float = 150.0


@dataclass
class WorkerProcess:
    number: int
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path
    killed: bool = False
    held_when_killed: int = 0
    replaced: bool = False

    @property
    def prefix(self) -> str:
        """How this process's segments are named in `claimed_by` (`worker:HOST:PID:N`)."""
        return f"worker:{socket.gethostname()}:{self.proc.pid}:"


@dataclass
class Fleet:
    database_url: str
    options: DemoOptions
    log_dir: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self) -> WorkerProcess:
        number = len(self.workers) + 1
        path = self.log_dir / f"worker-{number}.log"
        log = path.open("wb")
        o = self.options
        command = [
            sys.executable, "-m", "tenure", "--database", self.database_url, "worker",
            "--concurrency", str(o.concurrency), "--lease-seconds", str(o.lease_seconds),
            "--backoff-base", str(o.backoff_base), "--poll-interval", str(o.poll_interval),
        ]  # fmt: skip
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProcess(number, proc, log, path)
        self.workers.append(worker)
        return worker

    def kill_inside_a_write(self) -> WorkerProcess | None:
        """SIGKILL the first live worker found inside a non-idempotent write (an invoice):
        its run goes back in doubt, and the invoice's probe tells whether it was sent."""
        for worker in self.workers:
            if not worker.killed and self.kill(worker, inside_write=True):
                return worker
        return None

    def kill(self, worker: WorkerProcess, inside_write: bool = False) -> bool:
        """SIGKILL `worker` at a moment when it holds runs: one of them inside an invoice
        (`inside_write`), or none of them inside a write (one look then is enough).

        The process is frozen (SIGSTOP) while the database is read, so what it holds cannot
        change between the look and the kill. A worker killed inside a write keeps its
        fence's longer lease (the tool's timeout plus a lease) until the reaper takes it.
        """
        pid = worker.proc.pid
        for _ in range(1 if inside_write else 20):
            _freeze(pid)
            try:
                held = [
                    r
                    for r in app.runs(RunStatus.RUNNING, limit=1000)
                    if r.claimed_by.startswith(worker.prefix)
                ]
                if held and _moment(held, inside_write):
                    os.kill(pid, signal.SIGKILL)
                    worker.proc.wait()
                    worker.killed, worker.held_when_killed = True, len(held)
                    return True
            finally:
                if not worker.killed:
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)
        return False

    def stop(self) -> dict[int, int]:
        """SIGTERM (a graceful drain) to every live worker; their exit codes."""
        live = [w for w in self.workers if not w.killed]
        for w in live:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        codes = {}
        for w in live:
            try:
                codes[w.number] = w.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                codes[w.number] = w.proc.wait()
        for w in self.workers:
            w.log.close()
        return codes


@contextlib.contextmanager
def _terminate_gracefully() -> Iterator[None]:
    """SIGTERM stops the demo like Ctrl-C does, so that its workers are stopped too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _moment(held: list[Run], inside_write: bool) -> bool:
    """Whether to kill the worker holding `held` now."""
    if inside_write:
        return any(r.pending_effect is ToolEffect.NON_IDEMPOTENT_WRITE for r in held)
    return not any(r.pending_effect for r in held)


def _freeze(pid: int) -> None:
    """SIGSTOP, then wait until every thread has stopped (a commit under way may land first)."""
    os.kill(pid, signal.SIGSTOP)
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        try:
            # The state follows the parenthesised command name: "PID (python) T ...".
            if stat.read_text().rpartition(")")[2].split()[0] == "T":
                return
        except (OSError, IndexError):
            break
        time.sleep(0.001)
    time.sleep(0.01)  # no /proc here: give the signal a moment instead


def _prepare(url: str) -> None:
    """A fresh file: an earlier demo database is replaced, anything else is left alone."""
    if not url.startswith("sqlite:"):
        raise UsageError("tenure demo needs a SQLite database (sqlite:///FILE)")
    try:
        path = Path(sqlite_path(url))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if path.exists():
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            with contextlib.closing(conn):
                tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error:
            tables = {"?"}
        if tables and "demo_ledger" not in tables:
            raise CliError(f"{path} exists and is not a demo database: name another --database")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


def _counts(total: int) -> Counter[RunStatus]:
    return Counter(r.status for r in app.runs(limit=total + 1000))


def _describe(counts: Counter[RunStatus]) -> str:
    order = [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.FAILED]
    return "  ".join(f"{s} {counts[s]}" for s in order)


def _work(fleet: Fleet, total: int, options: DemoOptions, console: Console) -> None:
    """Start two workers, kill the first mid-run, start a replacement; until all ended."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[counts]}"),
    )
    chaos = _Chaos(fleet.start())
    fleet.start()
    deadline = time.monotonic() + options.deadline_seconds
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("runs ended", total=total, counts="")
        for w in fleet.workers:
            progress.console.print(f"started worker {w.number} (pid {w.proc.pid})")
        last_ended, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            counts = _counts(total)
            ended = sum(n for s, n in counts.items() if s.is_terminal)
            progress.update(task, completed=ended, counts=_describe(counts))
            if ended >= total:
                break
            if ended != last_ended:
                last_ended, last_change = ended, time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                progress.console.print(f"no run ended for {STALL_SECONDS:g}s: giving up")
                return
            chaos.tick(fleet, ended >= total * KILL_AT, progress.console)
            if _exited(fleet, progress.console):
                return
            time.sleep(TICK_SECONDS)


@dataclass
class _Chaos:
    """The demo's one kill: once KILL_AT of the runs have ended, a worker inside an invoice
    (waiting up to INSIDE_WRITE_WAIT for one), else the first worker between writes; then a
    replacement is started."""

    first: WorkerProcess
    killed: WorkerProcess | None = None
    kill_from: float | None = None  # when KILL_AT was reached

    def tick(self, fleet: Fleet, due: bool, console: Console) -> None:
        if self.killed is None and due:
            self.kill_from = self.kill_from or time.monotonic()
            if time.monotonic() - self.kill_from < INSIDE_WRITE_WAIT:
                self.killed = fleet.kill_inside_a_write()
            elif fleet.kill(self.first):  # no invoice in flight: a kill between writes
                self.killed = self.first
        killed = self.killed
        if killed is not None and not killed.replaced:
            killed.replaced = True
            console.print(
                f"killed worker {killed.number} (pid {killed.proc.pid}) with SIGKILL while "
                f"it held {killed.held_when_killed} runs"
            )
            spare = fleet.start()
            console.print(f"started worker {spare.number} (pid {spare.proc.pid})")


def _exited(fleet: Fleet, console: Console) -> bool:
    """Whether a worker nobody killed has exited (the demo cannot go on without it)."""
    exited = [w for w in fleet.workers if not w.killed and w.proc.poll() is not None]
    for w in exited:
        console.print(f"worker {w.number} exited on its own ({w.proc.returncode})")
    return bool(exited)


def _tables(result: Audit, console: Console) -> None:
    by_scenario = Table(
        title="runs by scenario", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for name in ("scenario", "runs", "completed", "dead-letter", "retried", "recovered"):
        by_scenario.add_column(name, justify="left" if name == "scenario" else "right")
    names = [n for n in SCENARIOS if n in result.scenarios]
    for name in names + sorted(set(result.scenarios) - set(names)):
        sc = result.scenarios[name]
        counts = (sc.runs, sc.completed, sc.dead_lettered, sc.retried, sc.recovered)
        by_scenario.add_row(name, *(str(n) for n in counts))
    console.print(by_scenario)
    by_status = Table(
        title="runs by status and reason", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    by_status.add_column("status")
    by_status.add_column("reason")
    by_status.add_column("runs", justify="right")
    for (status, reason), n in result.outcomes.items():
        by_status.add_row(status, reason, str(n))
    console.print(by_status)


def _report(result: Audit, killed: list[WorkerProcess], seconds: float, console: Console) -> None:
    _tables(result, console)
    for w in killed:
        console.print(f"killed worker: pid {w.proc.pid}, holding {w.held_when_killed} runs")
    console.print(
        f"recovered from the killed worker: {result.recovered_from_killed} runs "
        "(requeued when its lease expired, resumed from their journal by another worker)"
    )
    console.print("audit:", style="bold")
    console.print(f"  runs ended: {result.ended} of {result.runs}")
    console.print(
        f"  non-idempotent writes: {result.ledger_rows} ledger rows for "
        f"{result.ledger_keys} (run, idempotency key) pairs, {result.repeated_writes} repeated"
    )
    console.print(
        f"  interrupted writes (in the ledger, not in their run's journal): "
        f"{result.interrupted_writes}, each left fenced (dead-lettered, or back in doubt for "
        f"its probe; {result.interrupted_not_fenced} not)"
    )
    verdicts = result.resolved_by_probe
    console.print(
        f"  interrupted invoices resolved by the probe (the ledger answers by key): "
        f"{verdicts.get('done', 0)} had happened, {verdicts.get('not_done', 0)} had not and "
        f"ran once, {verdicts.get('unknown', 0)} could not tell"
    )
    console.print(
        f"  invariants (tenure.audit): {len(result.violations)} violations in {result.runs} "
        f"runs and {result.events} events (sequences, fencing tokens, journal, budget, "
        "dead-letter reasons)"
    )
    for violation in result.violations[:10]:
        console.print(f"    {violation}", markup=False)
    if result.refused_writes:
        console.print(
            f"  segments stopped by a refused write (a lost lease): {result.refused_writes}"
        )
    verdict = "passed" if result.passed else "FAILED"
    console.print(f"  result: {verdict}", style="bold green" if result.passed else "bold red")
    console.print(f"finished in {seconds:.1f}s")


def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    if console is None:
        console = Console(highlight=False, soft_wrap=True)
        if not console.is_terminal:
            console.width = 120  # piped: room for the tables instead of rich's default 80
    # From the start, not only once the workers run: a SIGTERM during the interactive runs
    # killed the demo outright (exit -15) instead of ending it like Ctrl-C.
    with _terminate_gracefully():
        return _run(options, console)


def _run(options: DemoOptions, console: Console) -> int:
    started = time.monotonic()
    url = options.database_url or DEFAULT_DEMO_DATABASE
    _prepare(url)
    app.use_database(url)
    total = len(app.enqueue_many(workload(options.runs, options.seed)))
    try:
        connect(url)  # the demo tables exist before any worker writes to them
    except sqlite3.Error as exc:
        raise CliError(f"cannot create the demo tables in {url}: {exc}") from None
    console.print(f"enqueued {total} scripted runs in {url}")
    # A few interactive runs too (`rt.run`, here and now): the audit covers both ways in.
    for request in interactive(options.seed):
        app.run(request)
        total += 1
    console.print(f"ran {len(INTERACTIVE_RUNS)} interactive runs in this process (rt.run)")
    with tempfile.TemporaryDirectory(prefix="tenure-demo-") as log_dir:
        fleet = Fleet(url, options, Path(log_dir))
        try:
            _work(fleet, total, options, console)
        finally:
            codes = fleet.stop()
        killed = [w for w in fleet.workers if w.killed]
        result = audit(app, total, [w.prefix for w in killed], [w.log_path for w in fleet.workers])
        _report(result, killed, time.monotonic() - started, console)
        failed = {n: c for n, c in codes.items() if c != 0}
        for w in fleet.workers:
            if w.number in failed or not result.passed:
                tail = w.log_path.read_text(errors="replace").splitlines()[-15:]
                console.print(f"worker {w.number} exited {codes.get(w.number, 'killed')}; log:")
                console.print("\n".join(tail), markup=False)
    app.close()
    return 0 if result.passed and not failed else 1
