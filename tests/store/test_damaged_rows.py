"""Readers never fall over: a run or event row that cannot be decoded (planted behind
tenure's back) shows as damaged, and every listing, read and the audit go on."""

from __future__ import annotations

import pytest

from tenure._types import EventKind, RunStatus
from tenure.audit import audit
from tenure.store import Store
from tenure.store._rows import UNREADABLE_TIME

from .._raw import raw_execute
from .helpers import enqueue

# Year 33715: what `delay=1e12` used to store. PostgreSQL holds it, Python cannot.
FAR_TIMESTAMP = {"sqlite": 1e12 + 1.7e9, "postgres": "33715-01-01 00:00:00+00"}


def _backend(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else "postgres"


@pytest.mark.parametrize("column", ["available_at", "created_at", "updated_at"])
def test_a_run_with_an_unreadable_timestamp_is_listed_as_damaged(
    store: Store, db_url: str, column: str
) -> None:
    good = enqueue(store)
    bad = enqueue(store)
    far = FAR_TIMESTAMP[_backend(db_url)]
    assert raw_execute(db_url, f"UPDATE tenure_runs SET {column} = ? WHERE id = ?", far, bad)

    listed = {r.id: r for r in store.runs(limit=10)}
    assert set(listed) == {good, bad}
    assert listed[good].damaged is None
    damaged = listed[bad]
    assert damaged.damaged is not None and column in damaged.damaged
    assert getattr(damaged, column) == UNREADABLE_TIME
    assert damaged.status is RunStatus.QUEUED
    assert damaged.to_json()["damaged"] == damaged.damaged
    assert listed[good].to_json()["damaged"] is None

    one = store.get_run(bad)
    assert one is not None and one.damaged == damaged.damaged
    report = audit(store)
    assert report.runs == 2
    assert [v for v in report.violations if bad in v and "damaged row" in v]
    assert not [v for v in report.violations if good in v]


def _corrupt_payloads(db_url: str) -> list[str]:
    # PostgreSQL's json column refuses text that is not JSON; SQLite keeps anything.
    valid_json = ["[1, 2]", '"just text"']
    return valid_json if _backend(db_url) == "postgres" else [*valid_json, "{not json", "NaN"]


def test_an_event_with_a_corrupt_payload_is_shown_as_damaged(store: Store, db_url: str) -> None:
    for payload in _corrupt_payloads(db_url):
        run_id = enqueue(store)
        changed = raw_execute(
            db_url,
            "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = 0",
            payload,
            run_id,
        )
        assert changed == 1
        (event,) = store.events(run_id)
        assert event.damaged is not None and "payload" in event.damaged, payload
        assert event.payload == {"damaged": event.damaged}
        assert event.kind is EventKind.REQUEST
        assert event.to_json()["damaged"] == event.damaged
        report = audit(store)
        assert [v for v in report.violations if run_id in v and "damaged row" in v]


def test_an_event_with_an_unreadable_time_is_shown_as_damaged(store: Store, db_url: str) -> None:
    run_id = enqueue(store)
    far = FAR_TIMESTAMP[_backend(db_url)]
    raw_execute(
        db_url,
        "UPDATE tenure_events SET created_at = ? WHERE run_id = ? AND sequence = 0",
        far,
        run_id,
    )
    (event,) = store.events(run_id)
    assert event.created_at == UNREADABLE_TIME
    assert event.damaged is not None and "created_at" in event.damaged
    assert audit(store).runs == 1
