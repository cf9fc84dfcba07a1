"""The process side of the benchmarks: enqueue, drain or work as one system, print one JSON line.

    python bench/_child.py enqueue SYSTEM URL N
    python bench/_child.py drain SYSTEM URL N CONCURRENCY
    python bench/_child.py longdrain URL N CONCURRENCY MARK_AT
    python bench/_child.py work SYSTEM URL CONCURRENCY LEASE_SECONDS
    python bench/_child.py modeldrain URL BASE_URL N CONCURRENCY
    python bench/_child.py modelwork URL BASE_URL LEASE_SECONDS on|off

SYSTEM is tenure, huey, procrastinate or dbos. URL is a tenure/SQLAlchemy-style database URL
(`sqlite:////abs/path.db`, `postgresql://...`). A drain times the worker from the moment it
starts until the N-th job has finished; the time to import and connect is not counted, for
any system. Peers run a no-op job; tenure a one-step run with a scripted answer.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tenure import (
    AgentContext,
    FailureClass,
    RetryableError,
    RunRequest,
    RunStatus,
    Runtime,
    ToolContext,
)
from tenure.providers.scripted import parse_script

SLEEP_ON_FIRST_ATTEMPT_SECONDS = 60.0
# A peer's slow job creates this file when it starts, sleeps the first time, and creates
# MARKER.done when it completes (the recovery benchmark watches both).
MARKER = os.environ.get("BENCH_MARKER", "")
PEER_POLL_SECONDS = 0.01
# The recovery bench runs dozens of idle workers at once on two cores: a calmer poll.
MODELWORK_POLL_SECONDS = 0.2
MODEL_TIMEOUT_SECONDS = 900.0


def out(**values: Any) -> None:
    values["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(values), flush=True)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Counter:
    """Jobs done in this process; `wait` returns when `n` are."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.target = -1

    def add(self) -> None:
        with self.lock:
            self.n += 1
            if self.n == self.target:
                self.done.set()

    def wait(self, target: int, timeout: float = 600.0) -> None:
        with self.lock:
            self.target = target
            if self.n >= target:
                self.done.set()
        if not self.done.wait(timeout):
            raise SystemExit(f"only {self.n} of {target} jobs done in {timeout}s")


DONE = Counter()


# -- tenure ----------------------------------------------------------------------------------


def tenure_runtime(url: str, lease_seconds: float = 900.0, **settings: Any) -> Runtime:
    rt = Runtime(url, lease_seconds=lease_seconds, **settings)

    @rt.tool
    def read() -> int:
        """A read-only step."""
        return 1

    @rt.tool
    async def aread() -> int:
        """A read-only step, as an `async def` tool (it runs on the process's event loop)."""
        return 1

    @rt.tool
    def slow(ctx: ToolContext) -> int:
        """Sleeps on its run's first attempt: a worker killed meanwhile dies mid-step."""
        if ctx.attempt == 0:
            time.sleep(SLEEP_ON_FIRST_ATTEMPT_SECONDS)
        return 1

    @rt.agent
    def looped(ctx: AgentContext, turns: int) -> str:
        """The built-in loop's steps, as an agent function's (bench/steps.py)."""
        return ctx.agent_loop("x", tools=["read"], max_iterations=turns)

    @rt.agent
    def replayed(ctx: AgentContext, steps: int) -> int:
        """`steps` read steps, then a retryable failure on the first attempt: the second
        segment replays them all (bench/steps.py)."""
        for _ in range(steps):
            ctx.tool("read")
        if ctx.attempt == 0:
            raise RetryableError("again", failure_class=FailureClass.SERVER_ERROR)
        return steps

    return rt


def trivial() -> RunRequest:
    return RunRequest(prompt="x", model="scripted", script=[{"say": "ok"}])


def count_writes(rt: Runtime) -> list[int]:
    """Counts the store's write transactions (each one commit) from now on."""
    store: Any = rt.store
    counted = [0]
    # `_write` runs a function in a transaction; PostgreSQL's one-statement paths (an
    # enqueue, a step) commit through `_statement` instead.
    for name in ("_write", "_statement"):
        if hasattr(store, name):
            setattr(store, name, _counting(getattr(store, name), counted))
    return counted


def _counting(write: Callable[..., Any], counted: list[int]) -> Callable[..., Any]:
    def counting(*args: Any) -> Any:
        counted[0] += 1
        return write(*args)

    return counting


def tenure_enqueue(url: str, n: int) -> None:
    with tenure_runtime(url) as rt:
        rt.store  # noqa: B018 -- create the schema before timing
        load_job_code()  # a one-time cost, like the schema, not an enqueue's
        requests = [trivial() for _ in range(n)]
        started = time.perf_counter()
        for request in requests:
            rt.enqueue(request)
        seconds = time.perf_counter() - started
        out(seconds=seconds)


def cpu_seconds() -> float:
    """This process's CPU time so far, user and system, all threads."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def load_job_code() -> float:
    """Builds the scripted model's turn validators before the clock starts, as the enqueue
    does and as the peers' children define their task functions before theirs; returns the
    CPU seconds it took.

    They are pydantic models built on a script's first use in a process (so that a command
    that never reads a script starts without pydantic): about 0.1 s of CPU once per worker
    process, not per run. Inside the clock it was a third of a 2,000-run drain's CPU; the
    drain reports it on a row of its own.
    """
    cpu = cpu_seconds()
    parse_script(trivial().script)
    return cpu_seconds() - cpu


def tenure_drain(url: str, n: int, concurrency: int) -> None:
    with tenure_runtime(url) as rt:
        rt.store  # noqa: B018
        first_use = load_job_code()
        writes = count_writes(rt)
        cpu = cpu_seconds()
        started = time.perf_counter()
        rt.work(concurrency=concurrency, burst=True, poll_interval=PEER_POLL_SECONDS)
        seconds = time.perf_counter() - started
        cpu = cpu_seconds() - cpu
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=n + 1))
        if done != n:
            raise SystemExit(f"tenure completed {done} of {n}")
        out(seconds=seconds, commits=writes[0], cpu_seconds=cpu, first_use_cpu_seconds=first_use)


def tenure_drain_some(url: str, n: int, concurrency: int) -> None:
    """Drain until n runs have completed (more may be queued), then stop."""
    with tenure_runtime(url) as rt:
        load_job_code()
        worker = rt.worker(concurrency=concurrency, burst=True, poll_interval=PEER_POLL_SECONDS)

        def watch() -> None:
            while worker.stats.outcomes.get("completed", 0) < n:
                time.sleep(0.002)
            worker.stop()

        threading.Thread(target=watch, daemon=True).start()
        started = time.perf_counter()
        worker.run()
        out(seconds=time.perf_counter() - started)


def tenure_longdrain(url: str, n: int, concurrency: int, mark_at: int) -> None:
    """Drain n runs; RSS when `mark_at` and when all n have finished."""
    with tenure_runtime(url) as rt:
        worker = rt.worker(concurrency=concurrency, burst=True)
        marks: dict[str, float] = {}

        def watch() -> None:
            while "end" not in marks:
                completed = worker.stats.outcomes.get("completed", 0)
                if completed >= mark_at and "mark" not in marks:
                    marks["mark"] = rss_mb()
                time.sleep(0.005)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.perf_counter()
        stats = worker.run()
        seconds = time.perf_counter() - started
        marks["end"] = rss_mb()
        watcher.join()
        out(
            seconds=seconds,
            completed=stats.outcomes.get("completed", 0),
            rss_mark_mb=marks.get("mark", float("nan")),
            rss_end_mb=marks["end"],
        )


def tenure_modeldrain(url: str, base_url: str, n: int, concurrency: int) -> None:
    """Drain n queued runs of model "fake" (an OpenAICompatible on `base_url`): the wall
    time and this process's CPU time from the start of the drain to its end."""
    from tenure.providers import OpenAICompatible

    with tenure_runtime(url) as rt, OpenAICompatible("fake", base_url=base_url) as model:
        rt.add_model("fake", model)
        rt.store  # noqa: B018
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        rt.work(concurrency=concurrency, burst=True, poll_interval=PEER_POLL_SECONDS)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        done = len(rt.runs(status=RunStatus.COMPLETED, limit=n + 1))
        if done != n:
            raise SystemExit(f"tenure completed {done} of {n}")
        cpu_seconds = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
        out(seconds=seconds, cpu_seconds=cpu_seconds)


def tenure_work(url: str, concurrency: int, lease: float) -> None:
    with tenure_runtime(url, lease_seconds=lease) as rt:
        print(json.dumps({"ready": True}), flush=True)
        rt.work(concurrency=concurrency, poll_interval=0.05)


def tenure_modelwork(url: str, base_url: str, lease: float, keeper: str) -> None:
    """Work the queue at concurrency 1; each run's model call goes to `base_url`. With
    keeper "off" the lease keeper is closed before the first claim (a closed keeper keeps
    nothing): leases are renewed only at step boundaries, as before the keeper existed."""
    from tenure.providers import OpenAICompatible

    timeout = MODEL_TIMEOUT_SECONDS
    with (
        tenure_runtime(url, lease_seconds=lease) as rt,
        OpenAICompatible("fake", base_url=base_url, timeout=timeout) as model,
    ):
        rt.add_model("fake", model, timeout=timeout)
        if keeper == "off":
            rt._keeper.close()
        rt.store  # noqa: B018 -- the schema exists before the first claim
        print(json.dumps({"ready": True}), flush=True)
        rt.work(concurrency=1, poll_interval=MODELWORK_POLL_SECONDS)


# -- huey ------------------------------------------------------------------------------------


def huey_app(url: str) -> tuple[Any, Any]:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=url.removeprefix("sqlite:///"))

    def noop() -> None:
        DONE.add()

    return huey, huey.task(name="noop")(noop)


def slow_job() -> None:
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        time.sleep(SLEEP_ON_FIRST_ATTEMPT_SECONDS)
    open(MARKER + ".done", "w").close()


def huey_slow_app(url: str) -> tuple[Any, Any]:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=url.removeprefix("sqlite:///"))
    return huey, huey.task(name="slow")(slow_job)


def huey_enqueue(url: str, n: int) -> None:
    noop = huey_app(url)[1]
    started = time.perf_counter()
    for _ in range(n):
        noop()
    out(seconds=time.perf_counter() - started)


def huey_consumer(huey: Any, concurrency: int) -> Any:
    return huey.create_consumer(
        workers=concurrency,
        worker_type="thread",
        periodic=False,
        initial_delay=PEER_POLL_SECONDS,
        max_delay=PEER_POLL_SECONDS,
        check_worker_health=False,
    )


def huey_drain(url: str, n: int, concurrency: int) -> None:
    huey = huey_app(url)[0]
    consumer = huey_consumer(huey, concurrency)
    cpu = cpu_seconds()
    started = time.perf_counter()
    consumer.start()
    DONE.wait(n)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu
    consumer.stop(graceful=True)
    out(seconds=seconds, cpu_seconds=cpu)


def huey_work(url: str, concurrency: int) -> None:
    huey = huey_slow_app(url)[0]
    consumer = huey_consumer(huey, concurrency)
    print(json.dumps({"ready": True}), flush=True)
    consumer.run()


# -- procrastinate ---------------------------------------------------------------------------


def procrastinate_app(url: str) -> tuple[Any, Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop() -> None:
        DONE.add()

    @app.task(name="slow")
    def slow() -> None:
        slow_job()

    return app, noop, slow


def procrastinate_enqueue(url: str, n: int) -> None:
    app, noop, _ = procrastinate_app(url)
    with app.open():
        try:
            app.schema_manager.apply_schema()
        except Exception as exc:  # applied already
            if "already exists" not in str(exc):
                raise
        started = time.perf_counter()
        for _ in range(n):
            noop.defer()
        out(seconds=time.perf_counter() - started)


def procrastinate_drain(url: str, n: int, concurrency: int) -> None:
    app, _, _ = procrastinate_app(url)
    cpu = cpu_seconds()
    started = time.perf_counter()
    app.run_worker(
        concurrency=concurrency,
        wait=False,
        install_signal_handlers=False,
        fetch_job_polling_interval=PEER_POLL_SECONDS,
    )
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu
    if DONE.n != n:
        raise SystemExit(f"procrastinate did {DONE.n} of {n}")
    out(seconds=seconds, cpu_seconds=cpu)


def procrastinate_work(url: str, concurrency: int) -> None:
    app, _, _ = procrastinate_app(url)
    print(json.dumps({"ready": True}), flush=True)
    app.run_worker(concurrency=concurrency, wait=True, install_signal_handlers=False)


# -- DBOS ------------------------------------------------------------------------------------


def dbos_launch(url: str) -> Any:
    from dbos import DBOS

    DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.workflow(name="noop")
    def noop() -> None:
        DONE.add()

    @DBOS.workflow(name="slow")
    def slow() -> None:
        slow_job()

    DBOS.launch()
    return DBOS


def dbos_queue(dbos: Any, concurrency: int) -> None:
    """The queue is registered after launch; from then on this process dequeues from it."""
    dbos.register_queue(
        "bench", worker_concurrency=concurrency, polling_interval_sec=PEER_POLL_SECONDS
    )


def dbos_enqueue(url: str, n: int, workflow: str = "noop") -> None:
    from dbos import DBOSClient

    dbos = dbos_launch(url)  # creates the schema; this process registers no queue
    client = DBOSClient(system_database_url=url)
    started = time.perf_counter()
    for _ in range(n):
        client.enqueue({"queue_name": "bench", "workflow_name": workflow})
    seconds = time.perf_counter() - started
    client.destroy()
    dbos.destroy()
    out(seconds=seconds)


def dbos_drain(url: str, n: int, concurrency: int) -> None:
    dbos = dbos_launch(url)
    started = time.perf_counter()
    dbos_queue(dbos, concurrency)
    DONE.wait(n)
    seconds = time.perf_counter() - started
    dbos.destroy()
    out(seconds=seconds)


def dbos_work(url: str, concurrency: int) -> None:
    dbos_queue(dbos_launch(url), concurrency)
    print(json.dumps({"ready": True}), flush=True)
    threading.Event().wait()


# -- dispatch --------------------------------------------------------------------------------


def enqueue_slow(system: str, url: str) -> None:
    """One slow job for the recovery benchmark."""
    if system == "huey":
        huey_slow_app(url)[1]()
    elif system == "procrastinate":
        app, _, slow = procrastinate_app(url)
        with app.open():
            app.schema_manager.apply_schema()
            slow.defer()
    else:
        dbos_enqueue(url, 1, "slow")
        return
    out(seconds=0.0)


def work(system: str, url: str, concurrency: str, lease: str) -> None:
    if system == "tenure":
        tenure_work(url, int(concurrency), float(lease))
    else:
        {"huey": huey_work, "procrastinate": procrastinate_work, "dbos": dbos_work}[system](
            url, int(concurrency)
        )


ENQUEUE = {
    "tenure": tenure_enqueue,
    "huey": huey_enqueue,
    "procrastinate": procrastinate_enqueue,
    "dbos": dbos_enqueue,
}
DRAIN = {
    "tenure": tenure_drain,
    "huey": huey_drain,
    "procrastinate": procrastinate_drain,
    "dbos": dbos_drain,
}


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "enqueue":
        ENQUEUE[rest[0]](rest[1], int(rest[2]))
    elif command == "enqueue_slow":
        enqueue_slow(rest[0], rest[1])
    elif command == "drain":
        DRAIN[rest[0]](rest[1], int(rest[2]), int(rest[3]))
    elif command == "drain_some":
        tenure_drain_some(rest[1], int(rest[2]), int(rest[3]))
    elif command == "longdrain":
        tenure_longdrain(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
    elif command == "work":
        work(*rest)
    elif command == "modelwork":
        tenure_modelwork(rest[0], rest[1], float(rest[2]), rest[3])
    elif command == "modeldrain":
        tenure_modeldrain(rest[0], rest[1], int(rest[2]), int(rest[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
