"""A private PostgreSQL cluster for the test session, and a fresh database for each test.

The session starts its own cluster (`initdb` + `pg_ctl`) on a free loopback port in a
temporary directory and stops it at the end; nothing outside that directory is touched.
As root, the server runs as the `postgres` OS user (PostgreSQL refuses to run as root).
Each test gets a database copied from a template that was migrated once, which is faster
than migrating per test.

Without PostgreSQL binaries the PostgreSQL tests are skipped, except under `CI=true`, where
they fail: a CI run must never pass by not testing PostgreSQL.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

SERVER_USER = "postgres"
BINDIR_VARIABLE = "TENURE_PG_BINDIR"
TEMPLATE = "tenure_template"
START_TIMEOUT_SECONDS = 60
# Durability is not under test here (a clean restart still writes everything out); speed is.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """Where initdb and pg_ctl are: $TENURE_PG_BINDIR if set, else on PATH, else the newest
    Debian-style install."""
    chosen = os.environ.get(BINDIR_VARIABLE)
    if chosen:
        return Path(chosen) if (Path(chosen) / "initdb").exists() else None
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(candidates[-1]).parent if candidates else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """`wrapper`: a command the server runs under (its arguments, then `postgres`'s), for
    example valgrind (bench/instructions.py); `start_timeout`: seconds `pg_ctl` waits."""

    def __init__(
        self,
        bindir: Path,
        wrapper: Sequence[str] = (),
        start_timeout: int = START_TIMEOUT_SECONDS,
    ) -> None:
        self.bindir = bindir
        self.wrapper = list(wrapper)
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="tenure-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._as_root = os.geteuid() == 0
        self._names = itertools.count(1)

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_root:
            runuser = shutil.which("runuser")
            if runuser:
                command = [runuser, "-u", SERVER_USER, "--", *command]
            else:
                command = ["su", SERVER_USER, "-c", subprocess.list2cmdline(command)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:1])} failed ({done.returncode}):\n{done.stdout}\n"
                f"{done.stderr}\n{log[-2000:]}"
            )

    def init(self) -> None:
        if self._as_root:
            shutil.chown(self.root, SERVER_USER)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {self.port}\n")
            for key, value in SETTINGS.items():
                conf.write(f"{key} = {value}\n")

    def _server(self) -> list[str]:
        """`pg_ctl`'s option naming the server's executable: a script that runs `postgres`
        under the wrapper, when there is one."""
        if not self.wrapper:
            return []
        script = self.root / "postgres-wrapped"
        command = shlex.join([*self.wrapper, str(self.bindir / "postgres")])
        script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        script.chmod(0o755)
        return ["-p", str(script)]

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", *self._server(),
                  "-t", str(self.start_timeout), "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w",
                  *self._server(), "-t", str(self.start_timeout), "restart")  # fmt: skip

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def admin(self, sql: str) -> None:
        """One statement on the maintenance database, outside any transaction."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def make_template(self) -> None:
        from tenure.store.postgres import PostgresStore

        self.admin(f"CREATE DATABASE {TEMPLATE}")
        store = PostgresStore(self.url(TEMPLATE))
        try:
            store.migrate()
        finally:
            store.close()

    def create_database(self) -> str:
        name = f"tenure_test_{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _bindir() -> Path:
    bindir = find_bindir()
    if bindir is None:
        message = "PostgreSQL binaries (initdb, pg_ctl) not found"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: CI must test PostgreSQL, install it", pytrace=False)
        pytest.skip(message)
    return bindir


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    cluster = Cluster(_bindir())
    try:
        cluster.init()
        cluster.start()
        cluster.make_template()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def spare_pg_cluster() -> Iterator[Cluster]:
    """A cluster of the test's own, with an empty database `tenure` (`.url("tenure")`),
    for a test that stops and starts its server; destroyed at the end of the test."""
    cluster = Cluster(_bindir())
    try:
        cluster.init()
        cluster.start()
        cluster.admin("CREATE DATABASE tenure")
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """A fresh, migrated database of its own."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)
