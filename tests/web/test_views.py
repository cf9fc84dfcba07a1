"""What the API and the dashboard show, computed without a database."""

from __future__ import annotations

from datetime import UTC, datetime

from tenure import Event, EventKind, RunStatus, TerminationReason
from tenure.web._views import HIDDEN, counts, held_calls, hide_payload, timeline


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


def test_a_requeue_for_a_step_past_its_deadline_says_which_step() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    why = "step 3 (tool stuck) ran past its deadline of 0.3 s"
    events = [
        Event("r", 4, 0, EventKind.REQUEUED, {"cause": "step_deadline", "why": why}, at, 1),
        Event(
            "r",
            8,
            1,
            EventKind.REQUEUED,
            {"cause": "in_doubt", "stale": True, "step_deadline": True, "why": f"{why}, …"},
            at,
            2,
        ),
    ]
    steps = timeline(events, reveal=False)
    assert [s.title for s in steps] == [
        f"requeued (step_deadline): {why}",
        f"requeued (in_doubt): {why}, …",
    ]


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


def _turn(*calls: tuple[str, str, str]) -> Event:
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }
    return Event("r", 3, 1, EventKind.LLM, {"message": message}, datetime.now(UTC), 1)


def test_held_calls_hide_only_what_is_sensitive_and_reveal_it_from_the_turn() -> None:
    calls = [
        {"call_id": "c1", "tool": "refund", "effect": "non_idempotent_write", "kind": "approval",
         "sensitive": False, "args": {"amount": 5, "order": "A-1"}},
        {"call_id": "c2", "tool": "wire", "effect": "non_idempotent_write", "kind": "approval",
         "sensitive": True, "args": HIDDEN},
        {"call_id": "c3", "tool": "gone", "effect": "read_only", "kind": "none",
         "args": {"q": 1}},  # a record that does not say: hidden
        {"call_id": "c4", "tool": "later", "effect": "read_only", "kind": "none",
         "sensitive": False, "args": {"k": "v"}},  # declared sensitive since: hidden
    ]  # fmt: skip
    tools = {"refund": ("Refund an order.", False), "later": ("", True)}

    def describe(name: str) -> tuple[str, bool]:
        return tools.get(name, ("", False))

    refund, wire, gone, later = held_calls(calls, describe=describe)
    assert refund.args == {"amount": 5, "order": "A-1"} and not refund.hidden
    assert refund.rows == [("amount", "5"), ("order", "A-1")]
    assert refund.description == "Refund an order."
    assert refund.warning == "runs once; cannot be undone by tenure"
    assert refund.proposed == {"amount": 5, "order": "A-1"}
    assert wire.hidden and wire.sensitive and wire.proposed == {}
    assert gone.hidden and later.hidden and gone.warning == ""
    turn = _turn(("c1", "refund", "{}"), ("c2", "wire", '{"iban": "X"}'), ("c4", "later", "{}"))
    shown = held_calls(calls, describe=describe, events=[turn])
    assert shown[1].args == {"iban": "X"} and shown[1].proposed == {}
    assert shown[2].hidden  # not in the turn: stays hidden
    assert shown[3].args == {}
