"""What every benchmark script shares: options, repetitions, tables, databases, child processes.

A measurement that needs a worker process runs `bench/_child.py` in a subprocess and reads
one JSON line from its standard output. PostgreSQL comes from a private cluster (the one the
test suite uses) unless `--postgres URL` names one; the cluster keeps PostgreSQL's durable
defaults (fsync, synchronous_commit), which the test suite turns off for speed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# The repository root, for what benchmarks borrow from tests/: the private PostgreSQL
# cluster, the fake OpenAI-compatible service (tests.fakes.openai_service).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
CHILD = BENCH / "_child.py"
DEFAULT_REPEAT = 3
CHILD_TIMEOUT_SECONDS = 900
# Appended after the test suite's settings, so these win: a benchmark measures commits that
# reach the disk, as a production server makes them.
DURABLE_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}

PEER_MODULES = {"huey": "huey", "procrastinate": "procrastinate", "dbos": "dbos"}


def installed(peer: str) -> bool:
    return importlib.util.find_spec(PEER_MODULES.get(peer, peer)) is not None


def parser(description: str, default_size: int, quick_size: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--size", type=int, default=None, help=f"workload size (default {default_size})")
    p.add_argument("--quick", action="store_true", help=f"one repetition at size {quick_size}")
    p.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="repetitions (>= 3)")
    p.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: private cluster)")
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    p.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    p.add_argument("--no-peers", action="store_true", help="tenure rows only")
    p.set_defaults(default_size=default_size, quick_size=quick_size)
    return p


def add_against(p: argparse.ArgumentParser) -> None:
    """`--against DIR` (repeatable): another checkout of tenure, measured alternately with
    this one in child processes whose `sys.path` starts at its `src/`."""
    p.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        help="another checkout of tenure to compare (repeatable)",
    )


def checkouts(args: argparse.Namespace, this: str = "this") -> dict[str, Path]:
    """The `src/` of each checkout to measure, by name: this one first, then `--against`."""
    found = {this: ROOT / "src"}
    for other in args.against:
        found[str(other)] = other.resolve() / "src"
    return found


def cluster_cpu(url: str) -> float | None:
    """CPU seconds so far (user + system) of every process of the PostgreSQL cluster serving
    `url` (its postmaster and the postmaster's children), when it runs on this machine and
    /proc lets us read it; None otherwise (SQLite's work is in the calling process)."""
    if not url.startswith("postgres"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
        try:
            postmaster = int(_stat(int(backend))[1])
        except OSError:  # a server on another host, or of a user /proc hides
            return None
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(int(entry))
        except OSError:  # gone since the listing
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (state, ppid, ...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def size_and_repeat(args: argparse.Namespace) -> tuple[int, int]:
    if args.quick:
        return args.size or args.quick_size, 1
    return args.size or args.default_size, max(1, args.repeat)


# -- statistics and tables -------------------------------------------------------------------


@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def spread(self, fmt: str) -> str:
        if not self.values:
            return ""
        return f"{format(min(self.values), fmt)}-{format(max(self.values), fmt)}"


@dataclass
class Row:
    system: str
    metric: str
    series: Series | None
    note: str = ""
    fmt: str = ",.0f"
    baseline: Series | None = None  # the tenure series this row is compared with


class Table:
    """Rows of one measurement; a peer row shows tenure's median divided by its own."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[Row] = []

    def add(
        self,
        system: str,
        metric: str,
        series: Series | None,
        *,
        note: str = "",
        fmt: str = ",.0f",
        baseline: Series | None = None,
    ) -> None:
        self.rows.append(Row(system, metric, series, note, fmt, baseline))

    def missing(self, system: str, metric: str, why: str = "not installed") -> None:
        self.rows.append(Row(system, metric, None, why))

    def render(self) -> str:
        header = ["system", "metric", "median", "min-max", "n", "tenure/peer", "note"]
        lines = [header]
        for row in self.rows:
            if row.series is None or not row.series.values:
                lines.append([row.system, row.metric, "-", "-", "0", "-", row.note])
                continue
            ratio = ""
            if row.baseline is not None and row.baseline.values and row.series.median:
                ratio = f"{row.baseline.median / row.series.median:.2f}x"
            lines.append(
                [
                    row.system,
                    row.metric,
                    format(row.series.median, row.fmt),
                    row.series.spread(row.fmt),
                    str(len(row.series.values)),
                    ratio,
                    row.note,
                ]
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        out = [f"### {self.title}", ""]
        for i, line in enumerate(lines):
            out.append("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
            if i == 0:
                out.append("|" + "|".join("-" * (w + 2) for w in widths))
        return "\n".join(out) + "\n"


def emit(*tables: Table, preamble: str = "") -> None:
    if preamble:
        print(preamble)
    for table in tables:
        print(table.render())
    sys.stdout.flush()


# -- databases -------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Postgres:
    """Fresh databases on one PostgreSQL: a private cluster, or the server of `--postgres`."""

    def __init__(self, url: str | None) -> None:
        self._given = url
        self._cluster: Any = None
        self._count = 0

    def __enter__(self) -> Postgres:
        if self._given is None:
            sys.path.insert(0, str(ROOT))
            from tests._postgres import Cluster, find_bindir

            bindir = find_bindir()
            if bindir is None:
                raise RuntimeError("PostgreSQL binaries not found: pass --postgres URL")
            self._cluster = Cluster(bindir)
            self._cluster.init()
            with (self._cluster.data / "postgresql.conf").open("a") as conf:
                for key, value in DURABLE_SETTINGS.items():
                    conf.write(f"{key} = {value}\n")
            self._cluster.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cluster is not None:
            self._cluster.destroy()

    def _admin_url(self) -> str:
        if self._cluster is not None:
            return str(self._cluster.url("postgres"))
        assert self._given is not None
        return self._given

    def fresh(self, prefix: str) -> str:
        """A new empty database; its URL."""
        import psycopg
        from psycopg import conninfo

        self._count += 1
        name = f"bench_{prefix}_{os.getpid()}_{self._count}"
        with psycopg.connect(self._admin_url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")  # type: ignore[arg-type]
            conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
        info = conninfo.conninfo_to_dict(self._admin_url())
        info["dbname"] = name
        user = info.get("user", "")
        host = info.get("host", "127.0.0.1")
        port = info.get("port", 5432)
        password = f":{info['password']}" if info.get("password") else ""
        return f"postgresql://{user}{password}@{host}:{port}/{name}"

    def drop(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self._admin_url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]


@contextlib.contextmanager
def maybe_postgres(args: argparse.Namespace) -> Iterator[Postgres | None]:
    if args.no_postgres or not installed("psycopg"):
        yield None
        return
    try:
        pg = Postgres(args.postgres).__enter__()
    except RuntimeError as exc:
        print(f"PostgreSQL rows skipped: {exc}")
        yield None
        return
    try:
        yield pg
    finally:
        pg.__exit__(None, None, None)


# -- child processes -------------------------------------------------------------------------


def child(*argv: Any, timeout: float = CHILD_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Run `bench/_child.py ARGV…` and return the JSON object it prints last."""
    done = run_child([str(CHILD), *argv], [str(ROOT), *sys.path], timeout)
    last = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not last:
        raise RuntimeError(f"child {argv} printed no result:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(last[-1])
    return result


def checkout_child(
    script: str, src: Path, *argv: Any, timeout: float = CHILD_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """Run `script ARGV…` with the checkout `src` first on its path (the code measured, as
    `--against` names it) and return the JSON object it prints last."""
    done = run_child([script, *argv], [str(src), str(BENCH)], timeout)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def run_child(
    argv: Sequence[Any], path: Sequence[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """This Python on `argv` with `path` as its PYTHONPATH; RuntimeError if it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {argv} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def repeat(times: int, once: Callable[[], float]) -> Series:
    series = Series()
    for _ in range(times):
        series.add(once())
    return series


def machine() -> str:
    """One line: CPU count, load, Python, versions of tenure and the peers."""
    from importlib import metadata

    versions = []
    for name in ("tenure", "huey", "procrastinate", "dbos", "psycopg"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} -")
    load = os.getloadavg()
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; "
        f"load {load[0]:.2f}; Python {sys.version.split()[0]}; " + ", ".join(versions)
    )


def pick(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of the values, nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
