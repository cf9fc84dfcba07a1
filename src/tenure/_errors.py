"""The exceptions tenure raises or understands.

TenureError
 ├── InvalidRequest (also ValueError)     bad input; nothing was stored
 │    ├── UnknownTool                       a tool name no registered tool answers to
 │    └── UnknownModel                      a model name no registered provider answers to
 ├── Cancelled                              the segment lost its run while a step ran
 ├── ProviderError                          a step failed; carries its FailureClass
 │    ├── RetryableError                    raised by a tool: fail the step, retry the run
 │    ├── Throttled                         a model call not made: no capacity now (internal;
 │    │                                     the run waits or is parked, never charged)
 │    └── FallbackExhausted                 every model of a Fallback chain failed
 │                                          (defined in tenure.providers.fallback, which
 │                                          classifies it: this module imports nothing
 │                                          but the enumerations)
 └── StoreError                             the database could not be reached or written
      ├── DatabaseUnavailable               still locked or unreachable after retries
      └── DatabaseGone                      the SQLite file was deleted or replaced while open
"""

from __future__ import annotations

from tenure._types import FailureClass


class TenureError(Exception):
    """Base class of every error tenure raises."""


class Cancelled(TenureError):
    """The segment no longer holds its run (it was cancelled, reaped or redriven) while a
    step was in flight: raised by `ToolContext.raise_if_cancelled()` and by a model call
    that was aborted. Nothing more of the segment is recorded."""


class InvalidRequest(TenureError, ValueError):
    """A request, script or argument is malformed; nothing was stored."""


class UnknownTool(InvalidRequest):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown tool {name!r}: no tool is registered under that name")
        self.name = name


class UnknownModel(InvalidRequest):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown model {name!r}: no model is registered under that name")
        self.name = name


class ForkRefused(InvalidRequest):
    """A fork (SPEC §23) that would repeat writes, or take up a write nobody can settle,
    or of a run that changed while its fork was planned: one line naming why; nothing was
    stored."""


class ProviderError(TenureError):
    """A failed step, classified. `retry_after` (seconds) is honoured by the backoff."""

    def __init__(
        self,
        failure_class: FailureClass | str,
        message: str,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.failure_class = FailureClass(failure_class)
        self.message = message
        self.retry_after = retry_after


class RetryableError(ProviderError):
    """Raised by a tool to fail the step and send the run through failure recovery."""

    def __init__(
        self,
        message: str,
        *,
        failure_class: FailureClass | str = FailureClass.SERVER_ERROR,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(failure_class, message, retry_after=retry_after)


class Throttled(ProviderError):
    """A model call that was not made: its model has no capacity now, or its circuit is open
    (SPEC §17). The segment waits `wait` seconds if that is short, else parks the run; either
    way nothing is charged. Classified `circuit_open`, so a `Fallback` tries its next model."""

    def __init__(self, model: str, wait: float, *, circuit: bool) -> None:
        why = "its circuit is open" if circuit else "no capacity"
        super().__init__(
            FailureClass.CIRCUIT_OPEN,
            f"model {model!r}: {why} for {wait:.1f} s",
            retry_after=wait,
        )
        self.model = model
        self.wait = wait
        self.circuit = circuit


class StoreError(TenureError):
    """The database refused or failed an operation."""


class DatabaseUnavailable(StoreError):
    """The database stayed locked or unreachable after retries."""

    # Whether the store has already said in its log that the database does not answer (a
    # PostgreSQL outage is told once, when it starts): a loop that only retries need not
    # say it again at each try.
    logged = False


class DatabaseGone(StoreError):
    """The database file this store opened is no longer at its path: nothing more is written,
    since every write would land in a file nobody else will ever read."""


class DecisionConflict(TenureError):
    """An approval or input for a run that is not (or no longer) waiting for it."""


class LeaseLost(Exception):
    """Internal: a guarded write matched no row; the run belongs to someone else now."""


class RunCancelled(Exception):
    """Internal: the run was cancelled; the segment stops and settles nothing."""


class ChildFailed(TenureError):
    """Raised in an agent function (SPEC §21) by `ctx.wait` / `ctx.gather` for a child run
    that did not complete: its `run_id`, its `status` (`failed` or `cancelled`), its
    termination `reason` and its `error` text. Recorded once; a replay raises it again."""

    def __init__(self, run_id: str, status: str, reason: str, error: str) -> None:
        super().__init__(
            f"child run {run_id} ended {status} ({reason}){': ' + error if error else ''}"
        )
        self.run_id = run_id
        self.status = status
        self.reason = reason
        self.error = error


class ToolFailed(TenureError):
    """Raised in an agent function (SPEC §20) by `ctx.tool` or `ctx.step` whose function
    raised: `name` is the tool or step, `error` the recorded error text. The failure is
    recorded once; a replay raises it again without running the step."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__(f"{name} failed: {error}")
        self.name = name
        self.error = error
