"""How a segment ends (SPEC §6 step 6, §4): settled, requeued, parked, held for a person; and
what the caller learns of an ending it committed itself. `Segment` takes it as a base; what
it uses of the segment is listed under TYPE_CHECKING below."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from tenure import _requests
from tenure._errors import LeaseLost, ProviderError, RunCancelled, Throttled
from tenure._types import (
    EventKind,
    FailureClass,
    Outcome,
    RunRequest,
    RunResult,
    RunStatus,
    TerminationReason,
    ToolEffect,
    Usage,
)
from tenure.agent import _human
from tenure.providers._base import ModelReply
from tenure.store._base import Lease, NewEvent, Settlement, Store

if TYPE_CHECKING:
    from tenure._ladder import Engine

log = logging.getLogger("tenure")


@dataclass(frozen=True)
class Ending:
    """A segment's normal end, returned for its caller to commit."""

    settlement: Settlement


def outcome_of(settlement: Settlement) -> Outcome:
    return Outcome.COMPLETED if settlement.status is RunStatus.COMPLETED else Outcome.FAILED


class Endings:
    """The endings of a `Segment`."""

    if TYPE_CHECKING:
        engine: Engine
        lease: Lease
        interactive: bool
        _defer_end: bool
        _fence: ToolEffect | None
        _written: list[int]
        _usage: Usage

        @property
        def store(self) -> Store: ...
        @property
        def run_id(self) -> str: ...
        def _last_write(self) -> None: ...
        def _lost(self) -> NoReturn: ...
        def _recover(self, exc: Exception) -> RunResult: ...
        def _result(
            self,
            outcome: Outcome,
            output: str | None = None,
            error: BaseException | None = None,
        ) -> RunResult: ...

    def _suspend(self, request: RunRequest, held: _human.Hold) -> RunResult:
        timeout = held.timeout or self.engine.settings.approval_timeout
        waiting = {"kind": held.kind, "turn": held.turn, "calls": held.calls}
        status, kind = held.status, held.kind
        stored = None if not self.interactive else _requests.dumps(_requests.to_json(request))
        self._last_write()
        try:
            sequences = self.store.suspend(self.lease, status, waiting, stored, timeout, [])
        except Exception as exc:
            # Never promise a resume that cannot happen: an unstored suspend fails the run.
            raise ProviderError(
                FailureClass.UNKNOWN, f"could not hold the run for a person: {exc}"
            ) from exc
        if sequences is None:
            self._lost()
        outcome = Outcome.AWAITING_APPROVAL if kind == "approval" else Outcome.AWAITING_INPUT
        return self._result(outcome)

    def _complete(self, reply: ModelReply, llm: NewEvent) -> RunResult | Ending:
        text = reply.text or ""
        assembled = NewEvent(EventKind.ASSEMBLED, {"output": text})
        settlement = Settlement(
            RunStatus.COMPLETED,
            TerminationReason.COMPLETED,
            output=text,
            events=(llm, assembled),
            usage=reply.usage,
        )
        self._usage += reply.usage
        return self._end(settlement, output=text)

    def _finish(self, reason: TerminationReason) -> RunResult | Ending:
        return self._end(Settlement(RunStatus.FAILED, reason, error=f"run ended: {reason}"))

    def _end(self, settlement: Settlement, output: str | None = None) -> RunResult | Ending:
        """The loop's normal end: settled here, or returned for the caller to commit (a
        worker commits the ends of several runs, and its next claim, in one transaction)."""
        self._last_write()
        if self._defer_end:
            return Ending(settlement)
        self.settle(settlement)
        return self._result(outcome_of(settlement), output=output)

    def settled(self, settlement: Settlement, sequences: list[int] | None) -> Outcome:
        """The outcome of an ending committed by someone else, given what its settle
        returned (None: the guard matched nothing)."""
        if sequences is not None:
            self._written.extend(sequences)
            return outcome_of(settlement)
        try:
            self._lost()
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception:  # LeaseLost, or the status read failed: the settle did not apply
            return Outcome.LEASE_LOST

    def settle_alone(self, settlement: Settlement) -> Outcome:
        """Settle an ending on its own (its batch could not be committed), with this
        segment's own failure recovery if that fails too."""
        try:
            self.settle(settlement)
        except LeaseLost:
            return Outcome.LEASE_LOST
        except RunCancelled:
            return Outcome.CANCELLED
        except Exception as exc:
            return self._recover(exc).outcome
        return outcome_of(settlement)

    def settle(self, settlement: Settlement) -> None:
        """A terminal state under this segment's lease; LeaseLost or RunCancelled if the
        row is no longer ours."""
        self._last_write()
        sequences = self.store.settle(self.lease, settlement)
        if sequences is None:
            self._lost()
        self._written.extend(sequences)

    def requeue_in_doubt(self, failure_class: FailureClass, message: str) -> None:
        """Back to the queue with the probe-able fence standing (SPEC §16), charged to the
        budget; claimable at once, since the probe decides; raises if not ours."""
        self._last_write()
        if not self.store.requeue_in_doubt(self.lease, 0.0, failure_class, message):
            self._lost()

    def requeue(self, delay: float, failure_class: FailureClass, message: str) -> None:
        """Back to the queue after `delay`, charged to the budget; raises if not ours."""
        self._last_write()
        if not self.store.requeue(self.lease, delay, failure_class, message):
            self._lost()

    @property
    def fence(self) -> ToolEffect | None:
        """The effect of the write this segment has in flight (its fence stands)."""
        return self._fence

    def sleep_until(self, delay: float, payload: dict[str, object]) -> RunResult:
        """An agent function's long sleep (SPEC §20): back to the queue until it is due,
        uncharged, with a `sleeping` event; the function is replayed to it then."""
        self._last_write()
        if not self.store.park(self.lease, delay, payload, EventKind.SLEEPING):
            self._lost()
        return self._result(Outcome.SLEEPING)

    def _park(self, throttled: Throttled) -> RunResult:
        """No capacity for the model until later (SPEC §17): back to the queue until then,
        with a `throttled` event, not charged to the requeue budget."""
        payload = {
            "model": throttled.model,
            "why": "circuit_open" if throttled.circuit else "capacity",
            "delay": round(throttled.wait, 3),
            "worker": self.lease.owner,
        }
        try:
            self._last_write()
            if not self.store.park(self.lease, throttled.wait, payload):
                self._lost()
        except LeaseLost:
            return self._result(Outcome.LEASE_LOST)
        except RunCancelled:
            return self._result(Outcome.CANCELLED)
        except Exception:  # the park could not be stored: recovery decides, as for a failure
            return self._recover(throttled)
        log.info("run %s: parked %.1fs: %s", self.run_id, throttled.wait, throttled)
        return self._result(Outcome.REQUEUED, error=throttled)
