"""`tenure.Limits` (SPEC §17): what is accepted, what is refused at registration, and the
arithmetic of its buckets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure._limits import capacity, wait_for
from tenure.providers import Scripted


def test_every_limit_is_optional() -> None:
    limits = tenure.Limits()
    assert (limits.requests_per_minute, limits.tokens_per_minute, limits.concurrency) == (
        None,
        None,
        None,
    )
    full = tenure.Limits(requests_per_minute=60, tokens_per_minute=90_000.5, concurrency=4)
    assert full.requests_per_minute == 60.0 and full.concurrency == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests_per_minute": 0},
        {"requests_per_minute": -1},
        {"tokens_per_minute": -0.5},
        {"tokens_per_minute": float("nan")},
        {"tokens_per_minute": float("inf")},
        {"requests_per_minute": "60"},
        {"requests_per_minute": True},
        {"concurrency": 0},
        {"concurrency": -3},
        {"concurrency": 2.5},
        {"concurrency": "4"},
    ],
)
def test_bad_limits_are_refused_with_one_line(kwargs: dict[str, Any]) -> None:
    with pytest.raises(tenure.InvalidRequest) as caught:
        tenure.Limits(**kwargs)
    message = str(caught.value)
    assert "\n" not in message and next(iter(kwargs)) in message


@pytest.mark.parametrize("limits", [{"requests_per_minute": 60}, 60, "fast"])
def test_add_model_refuses_what_is_not_limits(tmp_path: Path, limits: Any) -> None:
    with tenure.Runtime(f"sqlite:///{tmp_path / 'x.db'}") as rt:
        with pytest.raises(tenure.InvalidRequest, match=r"limits must be a tenure\.Limits"):
            rt.add_model("m", Scripted(), limits=limits)
        assert "m" not in rt.model_names  # nothing registered


def test_a_bucket_holds_a_tenth_of_its_minute_and_refills_evenly() -> None:
    assert capacity(60) == 6.0
    assert capacity(5) == 1.0  # at least one whole request
    assert wait_for(6.0, 1, 60) == 0.0
    assert wait_for(0.0, 1, 60) == pytest.approx(1.0)  # one a second at 60 a minute
    assert wait_for(0.5, 1, 60) == pytest.approx(0.5)
    # A call larger than the bucket waits only for a full bucket, never forever.
    assert wait_for(0.0, 10_000, 6_000) == pytest.approx(6.0)


def test_headroom_keeps_part_of_the_refill_in_hand() -> None:
    # At 60 a minute, one second of headroom is one request kept in the bucket.
    assert wait_for(2.0, 1, 60, headroom=1.0) == 0.0
    assert wait_for(1.5, 1, 60, headroom=1.0) == pytest.approx(0.5)
    # Never more than a full bucket: a bucket of 1 still grants when full.
    assert wait_for(1.0, 1, 6, headroom=1.0) == 0.0
