"""A segment's normal end, as it is handed to whoever commits it (SPEC §6 step 6, §4)."""

from __future__ import annotations

from dataclasses import dataclass

from tenure._types import Outcome, RunStatus, direct_init
from tenure.store._base import Settlement


@direct_init
@dataclass(frozen=True)
class Ending:
    """A segment's normal end, returned for its caller to commit."""

    settlement: Settlement


def outcome_of(settlement: Settlement) -> Outcome:
    return Outcome.COMPLETED if settlement.status is RunStatus.COMPLETED else Outcome.FAILED
