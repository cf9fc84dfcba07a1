"""A chain of providers tried in order (SPEC §12).

The next provider is tried only when the failure is retryable (`connection`, `timeout`,
`rate_limit`, `server_error`, `circuit_open`): another endpoint may well answer. A failure
that is not retryable (`auth`, `configuration`, `client_error`, `unknown`) says something is
wrong with the run or its setup, which another endpoint would not fix, so it is raised at once,
unchanged. When every provider failed, `FallbackExhausted` carries every attempt and is
classified (and carries `retry_after`) by the last one, so failure recovery treats the chain
as it would have treated that provider alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tenure._classify import classify, describe
from tenure._errors import FallbackExhausted, InvalidRequest
from tenure.providers._base import ModelCall, ModelReply, Provider

log = logging.getLogger("tenure")


class Fallback:
    """Tries each provider in order until one answers; see the module docstring."""

    def __init__(self, providers: Sequence[Provider]) -> None:
        if not providers:
            raise InvalidRequest("Fallback needs at least one provider")
        for provider in providers:
            if not callable(getattr(provider, "complete", None)):
                raise InvalidRequest(f"Fallback: {provider!r} is not a provider (no complete())")
        self.providers: tuple[Provider, ...] = tuple(providers)

    def complete(self, call: ModelCall) -> ModelReply:
        attempts: list[Exception] = []
        for index, provider in enumerate(self.providers):
            try:
                return provider.complete(call)
            except Exception as exc:
                failure_class = classify(exc)
                if not failure_class.is_retryable:
                    raise
                attempts.append(exc)
                if index + 1 < len(self.providers):
                    log.info(
                        "run %s: model %d of %d failed (%s), trying the next: %s",
                        call.run_id,
                        index + 1,
                        len(self.providers),
                        failure_class,
                        describe(exc),
                    )
        raise FallbackExhausted(attempts) from attempts[-1]

    def close(self) -> None:
        """Close every provider that can be closed."""
        for provider in self.providers:
            close = getattr(provider, "close", None)
            if callable(close):
                close()

    def __repr__(self) -> str:
        return f"Fallback({list(self.providers)!r})"
