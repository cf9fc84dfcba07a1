"""A run's end does the work of its children only for a run that has had a child (SPEC §21,
schema 22): the insert of a first child marks its parent (`has_children`), by whichever
statement inserts it, and the trigger that cancels a parent's children still going is
called only for a marked run. A run without children is not marked; a database written
before the mark existed gets it for every parent it holds."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tenure._types import EventKind, RunStatus
from tenure.store import NewRun, Store, open_store
from tenure.store.sqlite import SQLiteStore

from ._old_schema import database_before
from .helpers import REQUEST, as_enqueued, completed, new_run

BEFORE = 22  # the first schema with the mark


def _child(parent_id: str, position: int, made: NewRun) -> NewRun:
    return NewRun(
        made.run_id,
        made.queue,
        made.request,
        f"{parent_id}:{position}",
        events=made.events,
        parent_id=parent_id,
        root_id=parent_id,
    )


def _marked(url: str, run_id: str) -> bool:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            row = conn.execute("SELECT has_children FROM tenure_runs WHERE id = ?", (run_id,))
            value = row.fetchone()[0]
        conn.close()
        return bool(value)
    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT has_children FROM tenure_runs WHERE id = %s", (run_id,))
        return bool(found.fetchone()[0])  # type: ignore[index]


def _end(store: Store, run_id: str) -> None:
    claimed = store.claim_run(run_id, "worker:p", 30)
    assert claimed is not None
    assert store.settle(claimed.lease, completed()) is not None


def _cancelled_by_parent(store: Store, run_id: str, parent_id: str) -> bool:
    run = store.get_run(run_id)
    assert run is not None
    events = [e for e in store.events(run_id) if e.kind is EventKind.CANCELLED]
    return (
        run.status is RunStatus.CANCELLED
        and len(events) == 1
        and events[0].payload == {"by": "parent", "parent_id": parent_id}
    )


@pytest.mark.parametrize("how", ["request text", "events", "batch"])
def test_a_parent_is_marked_by_its_first_child_and_its_end_cancels_it(
    store: Store, db_url: str, how: str
) -> None:
    # Each way a child row is inserted (PostgreSQL: the one-statement enqueue with the
    # request's text or with events, the pipelined batch; SQLite: one statement each).
    parent, flat = new_run(), new_run()
    store.enqueue_many([parent, flat])
    if how == "batch":
        children = [_child(parent.run_id, i, new_run()) for i in range(2)]
        store.enqueue_many(children)
    else:
        made = as_enqueued({"prompt": "hi"}) if how == "request text" else new_run()
        children = [_child(parent.run_id, 0, made)]
        store.enqueue_many(children)
    assert _marked(db_url, parent.run_id)
    assert not _marked(db_url, flat.run_id)
    assert not any(_marked(db_url, c.run_id) for c in children)

    _end(store, flat.run_id)
    _end(store, parent.run_id)
    for c in children:
        assert _cancelled_by_parent(store, c.run_id, parent.run_id)


def test_a_parent_enqueued_with_its_child_is_marked_and_a_child_not_inserted_marks_nothing(
    store: Store, db_url: str
) -> None:
    # A parent and its child in one batch: the child's row comes after its parent's and
    # marks it. A second parent whose child's key is taken inserts no child and is not
    # marked: the run holding the key belongs to the first parent.
    parent, other = new_run(), new_run()
    child = _child(parent.run_id, 0, new_run())
    store.enqueue_many([parent, child])
    taken = NewRun(
        new_run().run_id,
        "default",
        REQUEST,
        child.idempotency_key,
        events=child.events,
        parent_id=other.run_id,
        root_id=other.run_id,
    )
    store.enqueue_many([other])
    store.enqueue_many([taken])
    assert store.get_run(taken.run_id) is None
    assert _marked(db_url, parent.run_id)
    assert not _marked(db_url, other.run_id)
    _end(store, parent.run_id)
    assert _cancelled_by_parent(store, child.run_id, parent.run_id)


def test_sqlite_marks_a_parent_by_its_own_statement_not_a_trigger_on_inserts(
    sqlite_store: SQLiteStore,
) -> None:
    # Schema 26: any trigger on the insert of a run costs every enqueue its set-up, even a
    # run without a parent (nearly every run).
    triggers = sqlite_store._read(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'tenure_runs'"
        " AND sql LIKE '%INSERT ON tenure_runs%'",
        {},
    )
    assert triggers == []


# Today's store writes every event's `replay` column (schema 23) and, on SQLite, marks a
# child's parent itself (schema 26): the old database lends both columns for the rows the
# test writes with today's code, and gives them back before it migrates. Migration 22 then
# marks the parent from the child it finds.
_LENT = {
    "tenure_events": "replay TEXT",
    "tenure_runs": "has_children INTEGER NOT NULL DEFAULT 0",
}


def _give_back(url: str) -> None:
    script = "".join(
        f"ALTER TABLE {table} DROP COLUMN {column.split()[0]};" for table, column in _LENT.items()
    )
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.executescript(script)
        conn.close()
        return
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(script)  # type: ignore[arg-type]


@pytest.fixture
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each store, migrated up to the schema before the mark."""
    lend = "".join(f"ALTER TABLE {table} ADD COLUMN {column};" for table, column in _LENT.items())
    yield from database_before(request, tmp_path, BEFORE, then=lend)


@pytest.mark.parametrize("old_url", ["sqlite", "postgres"], indirect=True)
def test_a_parent_from_before_the_mark_still_takes_its_children_with_it(old_url: str) -> None:
    store = open_store(old_url)
    try:
        parent = new_run()
        store.enqueue_many([parent])
        child = _child(parent.run_id, 0, new_run(request=REQUEST))
        store.enqueue_many([child])
        assert store.schema_version() < BEFORE
        _give_back(old_url)
        store.migrate()
        assert _marked(old_url, parent.run_id)
        assert not _marked(old_url, child.run_id)
        _end(store, parent.run_id)
        assert _cancelled_by_parent(store, child.run_id, parent.run_id)
    finally:
        store.close()
