"""What the API and the dashboard show, computed without a database."""

from __future__ import annotations

from datetime import UTC, datetime

from tenure import Event, EventKind, RunStatus, TerminationReason
from tenure.web._views import HIDDEN, counts, hide_payload, timeline


def test_content_keys_are_hidden_by_an_allowlist_per_kind() -> None:
    request = hide_payload(
        EventKind.REQUEST,
        {"prompt": "p", "system": "s", "model": "m", "tools": ["t"], "new_field": "x"},
    )
    assert request == {
        "prompt": HIDDEN,
        "system": HIDDEN,
        "model": "m",
        "tools": ["t"],
        "new_field": HIDDEN,
    }
    tool = hide_payload(
        EventKind.TOOL,
        {"name": "charge", "args": {"a": 1}, "result": 2, "effect": "read_only", "error": None},
    )
    assert tool["args"] == tool["result"] == HIDDEN and tool["name"] == "charge"
    assert hide_payload(EventKind.DEAD_LETTERED, {"reason": "x", "error": "e"}) == {
        "reason": "x",
        "error": "e",
    }
    unknown = hide_payload("something_new", {"approved": True, "free_text": "secret"})
    assert unknown == {"approved": True, "free_text": HIDDEN}
    assert hide_payload(EventKind.INPUT, {"submitted_by": "a", "keys": ["k"], "values": 1}) == {
        "submitted_by": "a",
        "keys": ["k"],
        "values": HIDDEN,
    }


def test_timeline_titles_and_segments() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    events = [
        Event("r", 0, 0, EventKind.REQUEST, {"model": "m", "prompt": "p"}, at),
        Event("r", 1, 0, EventKind.CLAIMED, {"worker": "worker:h:1:1"}, at, 1),
        Event("r", 2, 1, EventKind.APPROVAL, {"approved": False, "decided_by": "ada"}, at),
        Event("r", 3, 1, EventKind.REQUEUED, {"cause": "failure", "delay": 1.5}, at, 1),
    ]
    steps = timeline(events, reveal=False)
    assert [s.title for s in steps] == [
        "request: model m",
        "claimed by worker:h:1:1 (lease token 1)",
        "denied by ada",
        "requeued (failure, retry in 1.5s)",
    ]
    assert [s.segment_start for s in steps] == [False, True, False, False]
    assert '"p"' not in steps[0].detail


def test_counts_include_every_status_and_reason() -> None:
    c = counts(
        {
            (RunStatus.QUEUED, None): 3,
            (RunStatus.FAILED, TerminationReason.NOT_RETRYABLE): 2,
            (RunStatus.FAILED, TerminationReason.MAX_ITERATIONS): 1,
        }
    )
    assert c.total == 6 and c.dead_letters == 2
    assert c.by_status["failed"] == 3 and c.by_status["running"] == 0
    assert set(c.by_reason) == {str(r) for r in TerminationReason}
