"""Crash-test scenarios (tenure.testing): an agent function's `input` is its arguments; a
person's submitted values are `submit` (or, without an agent, `input` as before)."""

from __future__ import annotations

import pytest

from tenure._errors import InvalidRequest
from tenure.testing import load_scenarios


def test_an_agent_scenario_gives_its_input_to_the_request() -> None:
    (s,) = load_scenarios(
        [{"name": "a", "agent": "settle", "input": {"order_id": "o7"}, "submit": {"ok": True}}]
    )
    assert s.request.agent == "settle" and s.request.input == {"order_id": "o7"}
    assert s.input == {"ok": True}


def test_without_an_agent_input_is_what_a_person_submits() -> None:
    (s,) = load_scenarios([{"name": "b", "prompt": "p", "input": {"city": "Oslo"}}])
    assert s.request.agent is None and s.request.input is None
    assert s.input == {"city": "Oslo"}
    (t,) = load_scenarios([{"name": "c", "prompt": "p", "submit": {"city": "Oslo"}}])
    assert t.input == {"city": "Oslo"} and t.request.input is None


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"prompt": "p", "input": {"a": 1}, "submit": {"a": 2}}, "once"),
        ({"agent": "settle", "submit": [1]}, '"submit" must be an object'),
        ({"prompt": "p", "input": [1]}, '"input" must be an object'),
    ],
)
def test_bad_decision_values_are_one_line(bad: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says) as caught:
        load_scenarios([{"name": "x", **bad}])
    assert "\n" not in str(caught.value)
