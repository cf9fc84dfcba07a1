"""`Store.journal` and `Store.replay_journal`, what a replay reads (SPEC §20), on both
stores: every event's kind and payload in order, read as one JSON array (or each step in its
replay form); a payload that cannot be read so shows as damaged while the others are read as
they are (a damaged step must stop the replay, never vanish)."""

from __future__ import annotations

from tenure._types import EventKind
from tenure.store import Store
from tenure.store._records import ReplayJournal

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


def test_the_replay_journal_reads_each_step_in_its_replay_form(store: Store) -> None:
    """An agent function's tool or step-function step is written with its replay form and
    read back as four values of one flat array, exactly as its payload has them; every other
    event (the built-in loop's tool event among them) is read as `journal` reads it."""
    run_id = enqueue(store)
    lease = claim_one(store).lease
    events = [
        step(EventKind.TOOL, position=0, step="tool", name="read", digest="d0", result=[0, "é"]),
        step(EventKind.TOOL, call_id="c", result=1),  # the built-in loop's: no replay form
        step(EventKind.STEP, position=1, step="step", name="a:b", digest="d1", result=None),
        step(EventKind.TOOL, position=2, step="tool", name="w", digest="d2", error="Boom: 'x'"),
        step(EventKind.STEP, position=3, name="uuid", result="u"),  # a value step: none
    ]
    assert store.record_step(lease, 30, events) is not None
    read = store.replay_journal(run_id)
    assert read is not None
    assert read.steps == [
        *(0, "tool:d0:read", [0, "é"], None),
        *(1, "step:d1:a:b", None, None),
        *(2, "tool:d2:w", None, "Boom: 'x'"),
    ]
    whole = store.journal(run_id)
    assert read.others == [whole[i] for i in (0, 1, 3, 6)]
    assert [kind for kind, _ in read.others] == ["request", "claimed", "tool", "step"]
    assert store.replay_journal("no-such-run") == ReplayJournal([], [])


def test_steps_without_a_replay_form_are_read_from_their_payloads(
    store: Store, db_url: str
) -> None:
    """Events written before the replay form (or with it cleared) are among the others, as
    their payloads have them; a payload that cannot be read so makes the whole read give way
    to `journal`, which shows it as damaged."""
    run_id = _recorded(store, 3)
    sql = "UPDATE tenure_events SET replay = NULL WHERE run_id = ? AND sequence = 3"
    assert raw_execute(db_url, sql, run_id) == 1
    read = store.replay_journal(run_id)
    assert read is not None
    assert read.steps == [*(0, "tool:d:read", [0, "é"], None), *(2, "tool:d:read", [2, "é"], None)]
    assert read.others[2:] == [store.journal(run_id)[3]]
    sql = "UPDATE tenure_events SET payload = ? WHERE run_id = ? AND sequence = 3"
    assert raw_execute(db_url, sql, "[1, 2]", run_id) == 1
    assert store.replay_journal(run_id) is None
