"""capacity: runs of 3 model calls against a provider enforcing RPM and TPM, 3 workers x 8 slots.

    python bench/capacity.py [--size RUNS] [--repeat 3] [--quick] [--postgres URL]
                             [--no-postgres] [--no-sqlite]

The provider is the fake OpenAI-compatible service of the test suite
(tests/fakes/openai_service.py) in a process of its own, limited to RPM requests and TPM
tokens a minute (buckets refilled continuously; past them it answers 429 with Retry-After),
answering after a lognormal 0.2-3 s. Each run reads two pages through a tool, then answers:
three model calls (tests/fakes/capacity_app.py). Three worker processes of 8 slots drain the
queue, (a) without `Limits` (every worker calls blindly: a 429 is a `rate_limit` failure
that requeues the run after Retry-After and charges its budget of 3), (b) with
`Limits(RPM, TPM)` equal to the service's. Shown: 429s received (per cent of the calls
made), runs dead-lettered, tokens a minute served as a fraction of the service's TPM, and
the wall time from the workers' start to the last run's end. Backoff is 1-4 s instead of
30-600 s so that (a) ends in minutes; a longer backoff spreads its retries but charges the
budget the same.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import _common as c
from tests.fakes._app import Latency
from tests.fakes.capacity_app import make_app, request
from tests.fakes.openai_service import ServiceProcess

from tenure import Limits, RunStatus, TerminationReason

RPM = 600
TPM = 90_000
WORKERS = 3
SLOTS = 8
POLICY = "tests.fakes.capacity_app:three_calls"
CALLS_PER_RUN = 3
RUN_TIMEOUT_SECONDS = 1800
POLL_SECONDS = 0.5


def _workers(url: str, base_url: str, limited: bool) -> list[subprocess.Popen[bytes]]:
    limits = ["--rpm", str(RPM), "--tpm", str(TPM)] if limited else ["--no-limits"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(c.ROOT), *sys.path])}
    command = [sys.executable, "-m", "tests.fakes.capacity_app", url, base_url]
    return [
        subprocess.Popen(
            [*command, "--slots", str(SLOTS), *limits],
            cwd=c.ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(WORKERS)
    ]


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(30)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def once(url: str, runs: int, limited: bool, seed: int) -> dict[str, float]:
    """One drain: 429s, dead-letters, tokens a minute served and wall seconds."""
    config = {"rpm": RPM, "tpm": TPM, "latency": Latency.lognormal(0.2, 3.0), "seed": seed}
    with ServiceProcess(policy=POLICY, **config) as service:  # type: ignore[arg-type]
        limits = Limits(RPM, TPM) if limited else None
        with make_app(url, service.url, limits) as rt:
            rt.enqueue_many([request(i) for i in range(runs)])
            started = time.monotonic()
            workers = _workers(url, service.url, limited)
            try:
                deadline = started + RUN_TIMEOUT_SECONDS
                while _unfinished(rt.store.run_counts()) and time.monotonic() < deadline:
                    time.sleep(POLL_SECONDS)
                wall = time.monotonic() - started
            finally:
                _stop(workers)
            counts = rt.store.run_counts()
        stats = service.stats()
    dead = sum(n for (s, r), n in counts.items() if r is not None and r.is_dead_letter)
    completed = counts.get((RunStatus.COMPLETED, TerminationReason.COMPLETED), 0)
    return {
        "wall": wall,
        "rate_limited": stats.rate_limited,
        "requests": stats.requests,
        "dead": dead,
        "completed": completed,
        "tokens_per_minute": stats.total_tokens / (wall / 60),
    }


def _unfinished(counts: dict[tuple[RunStatus, TerminationReason | None], int]) -> bool:
    return any(not status.is_terminal and n for (status, _), n in counts.items())


def main() -> None:
    args = c.parser(__doc__.splitlines()[0], default_size=600, quick_size=30).parse_args()
    runs, times = c.size_and_repeat(args)
    table = c.Table(
        f"capacity: {runs} runs x {CALLS_PER_RUN} model calls, {WORKERS} worker processes x "
        f"{SLOTS} slots, provider limited to {RPM} RPM and {TPM:,} TPM"
    )
    counter = itertools.count()
    with c.scratch_dir() as tmp, c.maybe_postgres(args) as pg:
        stores: list[tuple[str, Callable[[], str]]] = []
        if not args.no_sqlite:
            stores.append(("SQLite", lambda: f"sqlite:///{tmp}/c{next(counter)}.db"))
        if pg is not None:
            stores.append(("PostgreSQL", lambda: pg.fresh("capacity")))
        for name, url_for in stores:
            for label, limited in (("(a) no Limits", False), ("(b) Limits = provider's", True)):
                measure(table, f"tenure/{name} {label}", url_for, runs, times, limited)
    c.emit(table, preamble=c.machine())


def measure(
    table: c.Table, system: str, url_for: Callable[[], str], runs: int, times: int, limited: bool
) -> None:
    share, dead, used, wall = c.Series(), c.Series(), c.Series(), c.Series()
    for seed in range(times):
        got = once(url_for(), runs, limited, seed)
        share.add(100 * got["rate_limited"] / max(got["requests"], 1))
        dead.add(got["dead"])
        used.add(100 * got["tokens_per_minute"] / TPM)
        wall.add(got["wall"])
    table.add(system, "429s, % of calls", share, fmt=".2f")
    table.add(system, "runs dead-lettered", dead, fmt=".0f", note=f"of {runs}")
    table.add(system, "tokens/min, % of TPM", used, fmt=".1f")
    table.add(system, "wall seconds", wall, fmt=".1f")


if __name__ == "__main__":
    main()
