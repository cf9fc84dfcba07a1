"""The run table's checks accept every value tenure writes and refuse everything else, on
both stores. (SQLite's migration 0012 rewrote them without IN lists, and PostgreSQL's 0026
made its seven one function call, `tenure_run_row_ok`: a value left out or misspelt there
would refuse a run only when it reached that state.)"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tenure._types import RunStatus, TerminationReason, ToolEffect
from tenure.store import Store, open_store
from tenure.store._records import WorkerInfo

from .._raw import raw_execute
from ._old_schema import database_before
from .helpers import claim_one, completed, enqueue, lease_of

FINISHED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


def _now(db_url: str) -> str:
    return "1.0" if db_url.startswith("sqlite") else "now()"


def _refused() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:
        return (sqlite3.IntegrityError,)
    return (sqlite3.IntegrityError, psycopg.errors.CheckViolation)


def _set_status(db_url: str, run_id: str, status: str, reason: str) -> int:
    """Move a run to `status` with the other columns its checks tie to it."""
    now = _now(db_url)
    finished = status in FINISHED
    running = status == RunStatus.RUNNING
    return raw_execute(
        db_url,
        "UPDATE tenure_runs SET status = ?, termination_reason = ?, "
        f"finished_at = {now if finished else 'NULL'}, "
        f"lease_expires = {now if running else 'NULL'}, "
        "claimed_by = ? WHERE id = ?",
        status,
        reason,
        "worker:a" if running else "",
        run_id,
    )


def _row(store: Store, run_id: str) -> tuple[str, str]:
    run = store.get_run(run_id)
    assert run is not None
    return str(run.status), str(run.termination_reason or "")


@pytest.mark.parametrize("status", list(RunStatus))
def test_every_status_is_accepted(store: Store, db_url: str, status: RunStatus) -> None:
    run_id = enqueue(store)
    reason = TerminationReason.COMPLETED if status in FINISHED else ""
    assert _set_status(db_url, run_id, status, reason) == 1
    assert _row(store, run_id)[0] == status


@pytest.mark.parametrize("reason", list(TerminationReason))
def test_every_termination_reason_is_accepted(
    store: Store, db_url: str, reason: TerminationReason
) -> None:
    run_id = enqueue(store)
    assert _set_status(db_url, run_id, RunStatus.FAILED, reason) == 1
    assert _row(store, run_id) == ("failed", reason)


@pytest.mark.parametrize("effect", ["", *ToolEffect])
def test_every_effect_is_accepted_as_a_fence(store: Store, db_url: str, effect: str) -> None:
    run_id = enqueue(store)
    sql = "UPDATE tenure_runs SET pending_effect = ? WHERE id = ?"
    assert raw_execute(db_url, sql, effect, run_id) == 1


REFUSED = {
    "an unknown status": ("unknown", "", False),
    "an unknown reason": ("failed", "unknown", True),
    "a finished run without a reason": ("completed", "", True),
    "a reason on a run that has not finished": ("queued", "completed", False),
    "a finished run without its finish time": ("cancelled", "cancelled", False),
    "an unfinished run with a finish time": ("queued", "", True),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_row_outside_the_checks_is_refused_and_nothing_changes(
    store: Store, db_url: str, case: str
) -> None:
    run_id = enqueue(store)
    _write_refused(db_url, run_id, case)
    assert _row(store, run_id) == ("queued", "")


def _write_refused(db_url: str, run_id: str, case: str) -> None:
    """Write the row `REFUSED[case]` describes over a run's; the store must refuse it."""
    status, reason, finished = REFUSED[case]
    finish = _now(db_url) if finished else "NULL"
    sql = f"UPDATE tenure_runs SET status = ?, termination_reason = ?, finished_at = {finish} "
    with pytest.raises(_refused()):
        raw_execute(db_url, sql + "WHERE id = ?", status, reason, run_id)


@pytest.mark.parametrize(
    "assignment",
    [
        "pending_effect = 'unknown'",
        "status = 'running', claimed_by = 'worker:a'",  # running without a lease
        "status = 'running', lease_expires = {now}",  # running, owned by nobody
        "lease_expires = {now}",  # a lease on a queued run
    ],
)
def test_a_fence_or_lease_outside_the_checks_is_refused(
    store: Store, db_url: str, assignment: str
) -> None:
    run_id = enqueue(store)
    sql = f"UPDATE tenure_runs SET {assignment.format(now=_now(db_url))} WHERE id = ?"
    with pytest.raises(_refused()):
        raw_execute(db_url, sql, run_id)
    assert _row(store, run_id) == ("queued", "")


def test_a_worker_state_outside_the_checks_is_refused(store: Store, db_url: str) -> None:
    worker = "worker:h:1"
    store.register_worker(WorkerInfo(worker, "h", 1, None, 2, 1.0))
    assert store.beat_worker(worker, 1, stopping=True)
    sql = "UPDATE tenure_workers SET state = ? WHERE id = ?"
    with pytest.raises(_refused()):
        raw_execute(db_url, sql, "gone", worker)
    with pytest.raises(_refused()):  # a stopped row says when it stopped
        raw_execute(db_url, sql, "stopped", worker)
    assert store.stop_worker(worker)


ONE_CHECK = 26  # PostgreSQL's seven checks of a run's row become one (tenure_run_row_ok)


@pytest.fixture
def before_one_check(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_before(request, tmp_path, ONE_CHECK)


@pytest.mark.parametrize("before_one_check", ["postgres"], indirect=True)
def test_runs_stored_under_the_seven_checks_pass_the_one_that_replaces_them(
    before_one_check: str,
) -> None:
    # Rows in every kind of state the seven checks allowed are validated again by the new
    # one when the migration adds it; afterwards it refuses what they refused.
    url = before_one_check
    store = open_store(url)
    try:
        enqueue(store)
        enqueue(store)
        running = claim_one(store)  # the oldest first
        done = claim_one(store)
        assert store.settle(lease_of(done), completed()) is not None
        for status, reason in [
            (RunStatus.WAITING_FOR_INPUT, ""),
            (RunStatus.FAILED, TerminationReason.NOT_RETRYABLE),
        ]:
            assert _set_status(url, enqueue(store), status, reason) == 1
        queued = enqueue(store)
        assert store.schema_version() < ONE_CHECK
        store.migrate()
        with psycopg.connect(url) as conn:
            checks = conn.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'tenure_runs'::regclass"
                " AND contype = 'c'"
            ).fetchall()
        assert checks == [("tenure_runs_row_check",)]
        assert _row(store, done.lease.run_id) == ("completed", "completed")
        assert _row(store, running.lease.run_id) == ("running", "")
        for case in sorted(REFUSED):
            _write_refused(url, queued, case)
        assert _row(store, queued) == ("queued", "")
    finally:
        store.close()
