"""`Store.journal`, what a replay reads (SPEC §20), on both stores: every event's kind and
payload in order, read as one JSON array; a payload that cannot be read so shows as damaged
while the others are read as they are (a damaged step must stop the replay, never vanish)."""

from __future__ import annotations

from tenure._types import EventKind
from tenure.store import Store

from .._raw import raw_execute
from .helpers import claim_one, enqueue, step


def _recorded(store: Store, n: int) -> str:
    run_id = enqueue(store)
    lease = claim_one(store).lease
    events = [
        step(EventKind.TOOL, position=i, step="tool", name="read", digest="d", result=[i, "é"])
        for i in range(n)
    ]
    assert store.record_step(lease, 30, events) is not None
    return run_id


def test_the_journal_is_every_event_in_order(store: Store) -> None:
    run_id = _recorded(store, 12)
    journal = store.journal(run_id)
    assert journal == [(e.kind.value, e.payload) for e in store.events(run_id)]
    assert [k for k, _ in journal] == ["request", "claimed", *["tool"] * 12]
    assert [p["position"] for _, p in journal[2:]] == list(range(12))
    assert journal[5][1]["result"] == [3, "é"]
    assert store.journal("no-such-run") == []


def test_a_damaged_payload_shows_as_damaged_and_the_rest_is_read(store: Store, db_url: str) -> None:
    run_id = _recorded(store, 4)
    # PostgreSQL's json column holds JSON only: what can be damaged there is its shape.
    sql = "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = 3"
    assert raw_execute(db_url, sql, "[1, 2]", run_id) == 1
    journal = store.journal(run_id)
    assert len(journal) == 6
    assert journal[3] == ("tool", {"_damaged": "not a JSON object"})
    assert [p.get("position") for _, p in journal[2:]] == [0, None, 2, 3]
    if db_url.startswith("sqlite"):
        assert raw_execute(db_url, sql, '{"position": 1, "step": "to', run_id) == 1
        kind, payload = store.journal(run_id)[3]
        assert kind == "tool" and payload["_damaged"].startswith("not JSON")
        assert store.journal(run_id)[4][1]["position"] == 2
