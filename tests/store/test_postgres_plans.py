"""PostgreSQL's claim and keyed enqueue read what they need when the planner's statistics are
stale in the usual way: taken while no run was queued (a VACUUM or ANALYZE of an idle
queue), after which the partial indexes of queued runs look empty to the planner however
many runs come. A claim then sorted the whole backlog at every claim, and a keyed enqueue
read every queued run to find its key's last round (bench/RESULTS.md, issue 31). Counted in
buffers, which do not depend on the machine's speed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tenure._requests import new_run_id
from tenure.store import Store, _bench, open_store
from tenure.store.postgres import Q, _claim_sql

from .helpers import as_enqueued, new_run

BACKLOG = 1000


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Store, psycopg.Connection[Any]]]:
    store = open_store(pg_url)
    store.migrate()
    store.enqueue_many([new_run()])  # the tables and their indexes have pages
    _bench.quiesce(store)  # type: ignore[arg-type]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # The one run claimed and ended: statistics of a queue with nothing queued.
        conn.execute("UPDATE tenure_runs SET status = 'cancelled', termination_reason = "
                     "'cancelled', finished_at = now()")  # fmt: skip
        conn.execute("VACUUM ANALYZE tenure_runs")
        try:
            yield store, conn
        finally:
            store.close()


def _plan(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The executed plan of `sql` (rolled back)."""
    with conn.transaction(force_rollback=True):
        conn.execute(Q["claim_plan"])
        row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return plan[0]["Plan"]  # type: ignore[no-any-return]


def _nodes(plan: dict[str, Any]) -> list[str]:
    return [plan["Node Type"], *(n for p in plan.get("Plans", []) for n in _nodes(p))]


def test_a_claim_behind_a_backlog_new_to_the_statistics_does_not_sort_it(
    pg: tuple[Store, psycopg.Connection[Any]],
) -> None:
    store, conn = pg
    store.enqueue_many([new_run() for _ in range(BACKLOG)])
    params = {"owner": "worker:a", "lease": 30.0, "queues": None, "n": 1}
    plan = _plan(conn, _claim_sql(8), params)
    assert "Sort" not in _nodes(plan)
    assert plan["Actual Rows"] == 8
    # The pick reads the claim-order index up to its limit: a few buffers, not the backlog's
    # pages (its sort read them all: about a hundred here).
    (picked,) = [p for p in plan["Plans"] if p.get("Subplan Name") == "CTE picked"]
    assert picked["Shared Hit Blocks"] + picked.get("Shared Read Blocks", 0) < 30


def test_a_keyed_enqueue_reads_its_keys_entries_not_the_queue(
    pg: tuple[Store, psycopg.Connection[Any]],
) -> None:
    store, conn = pg
    keyed = [dataclasses.replace(new_run(), concurrency_key=f"tenant-{i}") for i in range(BACKLOG)]
    store.enqueue_many(keyed)

    def buffers(key: str | None) -> int:
        run = as_enqueued({"prompt": "hi"})
        params = {
            "id": new_run_id(),
            "queue": "default",
            "request": run.request,
            "idempotency_key": None,
            "delay": 0.0,
            "last_sequence": 0,
            "parent_id": None,
            "root_id": None,
            "priority": 0,
            "concurrency_key": key,
        }
        plan = _plan(conn, Q["enqueue"], params)
        return int(plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0))

    # The key's lookup is an index probe: some twenty buffers for the whole insert, its
    # indexes included, whatever the backlog, not the queued runs' pages (about ninety here
    # when the lookup read the claim-order index).
    assert buffers(None) <= 45
    assert buffers("tenant-7") <= 45
    assert buffers("tenant-new") <= 45
