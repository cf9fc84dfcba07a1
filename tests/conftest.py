"""Fixtures shared by every test: real databases only.

`db_url` is parametrized over the stores in BACKENDS, so every test that takes it (directly
or through `store` / `runtime`) runs against each of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.store import Store, open_store

from ._postgres import pg_cluster, pg_url, spare_pg_cluster

__all__ = ["pg_cluster", "pg_url", "spare_pg_cluster"]  # fixtures, shared with every test

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend = request.param
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'tenure.db'}"
    if backend == "postgres":  # a private cluster, started on first use (tests/_postgres.py)
        return str(request.getfixturevalue("pg_url"))
    raise AssertionError(f"unknown backend {backend}")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def make_runtime(db_url: str) -> Iterator[Callable[..., tenure.Runtime]]:
    """Runtimes on the test's database with fast backoff; all closed at the end."""
    made: list[tenure.Runtime] = []

    def make(**kwargs: Any) -> tenure.Runtime:
        kwargs.setdefault("backoff_base", 0.05)
        kwargs.setdefault("backoff_cap", 0.1)
        rt = tenure.Runtime(db_url, **kwargs)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.fixture
def runtime(make_runtime: Callable[..., tenure.Runtime]) -> tenure.Runtime:
    return make_runtime()
