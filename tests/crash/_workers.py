"""Worker processes for the crash tests: started with a log file each, killed, stopped,
thawed and drained by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[str]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def freeze(self) -> None:
        """SIGSTOP, and wait until every thread of the process has stopped: the signal is
        delivered asynchronously, and a thread still running after `kill` returned could
        see what the test does next (a gate file touched "after" the freeze)."""
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10.0
        while not self._stopped():
            assert time.monotonic() < deadline, f"worker {self.pid} did not stop"
            time.sleep(0.001)

    def _stopped(self) -> bool:
        """Whether every thread of the process is stopped (state T in /proc)."""
        tasks = Path(f"/proc/{self.pid}/task")
        states = []
        for task in tasks.iterdir():
            try:
                stat = (task / "stat").read_text()
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
            states.append(stat.rpartition(") ")[2][:1])
        return bool(states) and all(state in ("T", "t") for state in states)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def lease_lost(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return sum("lease_lost" in line for line in text.splitlines())

    def stop(self) -> None:
        """Drain it (SIGTERM), or kill it if it does not stop; thaws a frozen one first."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn(
    db_url: str,
    ledger: Path,
    *extra: str,
    lease: float = 1.0,
    prefix: Sequence[str] = (),
    module: Sequence[str] = ("tests.apps",),
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    """`python -m tests.apps DB LEDGER --lease S EXTRA…`, optionally behind `prefix` (e.g.
    `faketime`) or through another module that ends in tests.apps."""
    log = ledger.with_name(f"worker-{time.monotonic_ns()}.log")
    command = [
        *prefix,
        sys.executable,
        "-m",
        *module,
        db_url,
        str(ledger),
        "--lease",
        str(lease),
        *extra,
    ]
    return start(command, log, env)


def start(command: Sequence[str], log: Path, env: dict[str, str] | None = None) -> WorkerProcess:
    """`command` in a process of its own at the repository's root, its stderr in `log`."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )
    return WorkerProcess(proc, log)


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not reached in {timeout}s: {what}"
        time.sleep(0.02)


def kill_then_resume(
    db_url: str,
    ledger: Path,
    lease: float,
    reached: Callable[[], bool],
    what: str,
    ended: Callable[[], bool],
    after_kill: Callable[[], None] = lambda: None,
) -> None:
    """A worker (concurrency 1) runs until `reached`, is killed with SIGKILL, `after_kill`
    runs, and a second worker takes over; returns once `ended` (the run is terminal)."""
    victim = spawn(db_url, ledger, "--concurrency", "1", lease=lease)
    survivor = None
    try:
        wait_for(reached, 20, what)
        victim.kill()
        after_kill()
        survivor = spawn(db_url, ledger, "--concurrency", "1", lease=lease)
        wait_for(ended, 30, "the run ended")
    finally:
        victim.stop()
        if survivor is not None:
            survivor.stop()
