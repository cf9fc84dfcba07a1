"""An async provider seen by the engine as a synchronous one.

The engine calls `complete` from a slot thread and waits; the provider's coroutine runs on
the process's one event loop (`tenure._loop`). Two things end it early: the segment's abort
event (the run was cancelled, reaped or redriven: `tenure.Cancelled`, as a synchronous
provider raises when it notices) and the model's timeout (a `timeout` failure, retryable,
rather than a step that hangs until the worker gives its slot back).
"""

from __future__ import annotations

from tenure import _loop
from tenure._errors import ProviderError
from tenure._types import FailureClass
from tenure.providers._base import AsyncProvider, ModelCall, ModelReply


class Awaited:
    """Wraps an `AsyncProvider` so that `complete` waits for its coroutine."""

    def __init__(self, provider: AsyncProvider, timeout: float) -> None:
        self.provider = provider
        self.timeout = timeout

    def complete(self, call: ModelCall) -> ModelReply:
        try:
            return _loop.run(
                self.provider.complete(call),
                timeout=self.timeout,
                abort=call.abort,
                what=f"the model call of run {call.run_id}",
            )
        except _loop.TimedOut as exc:
            raise ProviderError(FailureClass.TIMEOUT, str(exc)) from None

    def __repr__(self) -> str:
        return f"Awaited({self.provider!r})"
