"""`new_call`, the model step's `ModelCall` built without the frozen dataclass's `__init__`:
the same object as the constructor's, for every field."""

from __future__ import annotations

import dataclasses

import pytest

from tenure import RunRequest
from tenure.providers._base import ModelCall, new_call


def test_new_call_is_the_constructors_call_field_for_field() -> None:
    request = RunRequest(prompt="x", model="scripted")
    given = {
        "messages": [{"role": "user", "content": "x"}],
        "tools": [],
        "run_id": "r1",
        "attempt": 2,
        "request": request,
        "timeout": 30.0,
    }
    fast, built = new_call(**given), ModelCall(**given)  # type: ignore[arg-type]
    assert fast == built
    assert vars(fast) == vars(built)
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(ModelCall)}
    # Frozen as the constructor's, and each call has its own `options`.
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.run_id = "other"  # type: ignore[misc]
    assert fast.options == {} and fast.options is not new_call(**given).options
    assert new_call(**given, options={"temperature": 0}).options == {"temperature": 0}


def test_a_usage_sum_and_a_step_in_flight_are_the_constructors_objects() -> None:
    from tenure._steps import StepInFlight
    from tenure._types import Usage

    total = Usage(1, 2, 0.5) + Usage(3, 4, 0.25)
    assert total == Usage(4, 6, 0.75) and vars(total) == vars(Usage(4, 6, 0.75))
    assert hash(total) == hash(Usage(4, 6, 0.75))
    with pytest.raises(dataclasses.FrozenInstanceError):
        total.cost = 0.0  # type: ignore[misc]
    fields = {f.name for f in dataclasses.fields(StepInFlight)}
    assert fields == {"sequence", "what", "timeout", "deadline", "fence"}  # begin_step's
