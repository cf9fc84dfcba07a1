"""A paused queue (`tenure_paused_queues`): the claim passes over its runs, on both stores,
whichever way a run is claimed (the oldest runs, one named run, the claim that follows a
worker's settles); resuming makes them claimable again; a database of the schema before
it upgrades."""

from __future__ import annotations

import time

import pytest

from tenure._requests import new_run_id
from tenure._types import RunStatus
from tenure.store import Store, _sql, open_store

from .._raw import raw_execute
from .helpers import new_run


def test_the_claim_passes_over_a_paused_queue(store: Store) -> None:
    paused = [store.enqueue(new_run("mail"))[0] for _ in range(3)]
    other = store.enqueue(new_run("other"))[0]
    assert store.pause_queue("mail", "ops")
    claimed = store.claim("worker:a", None, 30, 10)
    assert [c.lease.run_id for c in claimed] == [other]
    assert store.claim("worker:a", ["mail"], 30, 10) == []
    assert store.claim_run(paused[0], "worker:a", 30) is None
    _, after_settles = store.settle_and_claim([], "worker:a", None, 30, 10)
    assert after_settles == []
    assert {store.run_status(r) for r in paused} == {RunStatus.QUEUED}

    assert store.resume_queue("mail")
    again = store.claim("worker:a", None, 30, 10)
    assert sorted(c.lease.run_id for c in again) == sorted(paused)


def test_pause_and_resume_say_whether_they_changed_anything(store: Store) -> None:
    assert store.paused_queues() == []
    assert store.pause_queue("empty", "alice")  # no run yet: may be paused all the same
    assert not store.pause_queue("empty", "bob")  # already paused: the first pause stays
    [row] = store.paused_queues()
    assert (row.queue, row.paused_by) == ("empty", "alice")
    assert row.paused_at <= store.now()
    assert store.resume_queue("empty")
    assert not store.resume_queue("empty")
    assert store.paused_queues() == []


def test_a_run_claimed_before_the_pause_is_still_its_owners(store: Store) -> None:
    run_id = store.enqueue(new_run("mail"))[0]
    [claimed] = store.claim("worker:a", None, 30, 1)
    store.pause_queue("mail")
    assert store.record_step(claimed.lease, 30, []) is not None
    assert store.run_status(run_id) is RunStatus.RUNNING


def test_queue_counts_are_per_queue_and_status(store: Store) -> None:
    for queue in ("a", "a", "b"):
        store.enqueue(new_run(queue))
    store.claim("worker:a", ["b"], 30, 1)
    assert store.queue_counts() == {("a", "queued"): 2, ("b", "running"): 1}


def test_a_database_of_the_schema_before_pauses_upgrades(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The schema as the version before pauses left it: the migrations up to 12 only, and a
    # run enqueued by that version (its own columns: what later migrations add is missing).
    if not db_url.startswith("sqlite"):  # the fixture's database is migrated: start empty
        raw_execute(db_url, "DROP SCHEMA public CASCADE")
        raw_execute(db_url, "CREATE SCHEMA public")
    every = _sql.migrations
    with monkeypatch.context() as m:
        m.setattr(_sql, "migrations", lambda dialect: [v for v in every(dialect) if v[0] <= 12])
        first = open_store(db_url)
        first.migrate()
        assert first.schema_version() == 12
        first.close()
    run_id = new_run_id()
    now = "?" if db_url.startswith("sqlite") else "now()"
    params = (time.time(),) * 3 if db_url.startswith("sqlite") else ()
    raw_execute(
        db_url,
        "INSERT INTO tenure_runs (id, queue, status, request, available_at, created_at, "
        f"updated_at) VALUES ('{run_id}', 'mail', 'queued', '{{\"prompt\": \"p\"}}', "
        f"{now}, {now}, {now})",
        *params,
    )

    upgraded = open_store(db_url)
    try:
        upgraded.migrate()
        assert upgraded.schema_version() == max(v for v, _ in every("sqlite"))
        assert upgraded.pause_queue("mail")
        assert upgraded.claim("worker:a", None, 30, 1) == []
        assert upgraded.resume_queue("mail")
        [claimed] = upgraded.claim("worker:a", None, 30, 1)
        assert claimed.lease.run_id == run_id
    finally:
        upgraded.close()
