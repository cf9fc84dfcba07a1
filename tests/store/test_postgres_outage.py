"""A PostgreSQL server that stops answering, as the log tells it: once when the outage starts,
once when it ends, nothing per attempt in between; and nothing at all for a store that was
told to give up quickly on a server it has not reached (its error says it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure._classify import retry_log_level
from tenure.store.postgres import PostgresStore

from .._postgres import Cluster, free_port


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.DEBUG, logger="tenure.store.postgres")
    yield caplog


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


def _answers_again(store: PostgresStore) -> None:
    """The pool may still wait out its backoff when the server is back: try until it has
    reconnected (a worker's loops do just that)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            store.now()
            return
        except tenure.DatabaseUnavailable:
            assert time.monotonic() < deadline, "the store never answered again"


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    spare_pg_cluster: Cluster, warnings: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(spare_pg_cluster.url("tenure"), retry_seconds=1.5)
    try:
        store.migrate()
        store.subscribe(lambda: None)  # the listener's reconnects too
        spare_pg_cluster.stop()
        for _ in range(3):  # three operations, a dozen attempts: one line
            with pytest.raises(tenure.DatabaseUnavailable, match=r"unavailable for 1\.5s") as got:
                store.now()
            assert got.value.logged
            assert retry_log_level(got.value) == logging.DEBUG
        lines = _lines(warnings)
        assert len(lines) == 1, lines
        assert "PostgreSQL database tenure at 127.0.0.1:" in lines[0]
        assert "unreachable" in lines[0] and "retrying until it answers" in lines[0]
        spare_pg_cluster.start()
        _answers_again(store)
        store.now()
        lines = _lines(warnings)
        assert len(lines) == 2, lines
        assert "reachable again after" in lines[1]
    finally:
        store.close()


def test_a_store_that_gives_up_quickly_on_an_unreached_server_logs_nothing(
    warnings: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/tenure", reach_seconds=1)
    try:
        with pytest.raises(tenure.DatabaseUnavailable) as got:
            store.now()
    finally:
        store.close()
    assert str(got.value).startswith(
        f"cannot reach PostgreSQL database tenure at 127.0.0.1:{port} (tried for 1s): "
    )
    assert "Connection refused" in str(got.value)
    assert not got.value.logged
    assert retry_log_level(got.value) == logging.WARNING
    assert _lines(warnings) == []


def test_a_store_that_has_reached_its_server_rides_out_an_outage_for_its_whole_window(
    spare_pg_cluster: Cluster,
) -> None:
    """The short wait is for first contact only: `tenure run` or `events --follow` that had
    started keep the whole window, as a worker does."""
    store = PostgresStore(spare_pg_cluster.url("tenure"), retry_seconds=60, reach_seconds=1)
    try:
        store.migrate()
        spare_pg_cluster.stop()
        restarted = threading.Timer(3, spare_pg_cluster.start)
        restarted.start()
        try:
            assert store.now() is not None  # waited past `reach_seconds` for the server
        finally:
            restarted.join()
    finally:
        store.close()


def test_only_tenure_pools_lose_their_per_attempt_warnings(
    warnings: pytest.LogCaptureFixture,
) -> None:
    """psycopg_pool's "error connecting" lines of tenure's pools go to DEBUG; a pool of the
    application's own, in the same process, keeps them."""
    from psycopg_pool import ConnectionPool

    url = f"postgresql://postgres@127.0.0.1:{free_port()}/tenure"
    PostgresStore(url).close()  # installs the filter, as any store does
    for name in ("tenure", "the_apps_own"):
        pool: ConnectionPool[Any] = ConnectionPool(url, name=name, min_size=1, open=False)
        pool.open(wait=False)
        try:
            deadline = time.monotonic() + 30
            while not any(f"in '{name}'" in r.getMessage() for r in warnings.records):
                assert time.monotonic() < deadline, "the pool never tried to connect"
                time.sleep(0.05)
        finally:
            pool.close()
    connecting = [r for r in warnings.records if "error connecting in" in r.getMessage()]
    assert {r.levelno for r in connecting if "'the_apps_own'" in r.getMessage()} == {
        logging.WARNING
    }
    assert {(r.name, r.levelno) for r in connecting if "'tenure'" in r.getMessage()} == {
        ("tenure.store.postgres", logging.DEBUG)
    }
