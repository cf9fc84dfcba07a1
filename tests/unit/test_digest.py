"""Step digests (SPEC §20): a model step's transcript is hashed incrementally, and every
digest is the one journals recorded before were written with (pinned values below were made
by the previous version), so old journals replay unchanged."""

from __future__ import annotations

from typing import Any

from tenure.agent._functions import TranscriptDigest, digest

# Made by the version before the incremental digest (commit 53c9d00).
PINNED = [
    (
        {
            "messages": [{"role": "user", "content": "Label this ticket: refund"}],
            "tools": ["refund"],
            "options": {"temperature": 0},
        },
        "5568f56a2fce9e5a",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y" * 400},
            ],
            "tools": [],
            "options": {},
        },
        "c15274fc1ab925f2",
    ),
    ({}, "01e7b720ff566d53"),
    (None, "7376b2cbfa0ad26e"),
    ({"args": [1, 2], "kwargs": {"b": "é"}}, "adb95c88f3195e0c"),
]


def _model(messages: list[Any], tools: list[str], options: dict[str, Any]) -> dict[str, Any]:
    return {"messages": messages, "tools": tools, "options": options}


def test_digests_are_those_recorded_journals_hold() -> None:
    for value, recorded in PINNED:
        assert digest(value) == recorded
    incremental = TranscriptDigest()
    for value, recorded in PINNED[:2]:
        assert isinstance(value, dict)
        assert incremental(value["messages"], value["tools"], value["options"]) == recorded


def test_a_growing_transcript_has_the_digest_of_the_whole() -> None:
    incremental = TranscriptDigest()
    messages: list[Any] = []
    seen = set()
    for turn in range(30):
        messages.append({"role": "user" if turn % 2 else "assistant", "content": f"m{turn}" * 50})
        options = {"temperature": turn % 3}
        d = incremental(list(messages), ["read"], options)
        assert d == digest(_model(messages, ["read"], options))
        seen.add(d)
    assert len(seen) == 30


def test_a_changed_or_other_transcript_starts_over() -> None:
    incremental = TranscriptDigest()
    messages: list[Any] = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    first = incremental(messages, [], {})
    assert first == digest(_model(messages, [], {}))
    messages[0]["content"] = "changed in place"
    again = incremental(messages, [], {})
    assert again == digest(_model(messages, [], {})) and again != first
    other = [{"role": "user", "content": "another conversation"}]
    assert incremental(other, ["t"], {}) == digest(_model(other, ["t"], {}))
    assert incremental([], [], {}) == digest(_model([], [], {}))
    big = [{"role": "user", "content": 10**30}]  # not written by orjson: digest's own way
    assert incremental(big, [], {}) == digest(_model(big, [], {}))
